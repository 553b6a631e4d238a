"""Update cascades (MGit's run_update_cascade): re-derive every model downstream of an update.

    git mgit cascade base                       # base's version at HEAD replaces its previous one
    git mgit cascade base --from v1 --to v2 --skip 'pruned.*' --jobs 2

plan() reads the graph and mgit.toml and decides the work; run() does it
(planning apart from execution, as torch.distributed.checkpoint separates
planning from storage I/O). The work: every provenance descendant of OLD
that the start revision holds is re-derived by its creation function
(mgit.toml `creation`, else the function its provenance edge recorded),
given its parents' new versions (NEW for OLD, the re-derived version for a
re-derived parent, the parent as it is otherwise), in all-parents-first
order. An MTL group (`[groups.NAME]` in mgit.toml) is one unit: one call
of the group's function makes all its members. Units whose parents are
ready run at once, in worker processes here or on a cluster's nodes (the
execution layer, runtime.execution). A sharded model folder is re-derived
from one state dict and laid out as its old version was (reshard.py).

Each new version is committed onto the cascade's branch (never HEAD: the
user's checkout is untouched) with provenance edges to its new parents and
a version edge from its old version, and a trailer in the commit message,
`Mgit-Cascade: <cascade id> <old version>`. The cascade id is a hash of
OLD, NEW, --skip and --stop, so running the same command again finds the
versions already made (a killed cascade resumes without duplicating any),
writes any lineage records the kill cut off, and runs only the rest.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_mgit import hashing
from git_mgit.errors import MgitError
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.graph import PROVENANCE, VERSION
from git_mgit.lineage.records import QUERY_FUNCTION
from git_mgit.lineage.resolve import Version
from git_mgit.lineage.save import (
    ModelFile,
    commit_files,
    lineage_records,
    record_many,
)
from git_mgit.runtime import reshard
from git_mgit.runtime.execution import open_pool
from git_mgit.runtime.loading import read_tensors
from git_mgit.runtime.targets import target

TRAILER = "Mgit-Cascade"


class CascadeError(MgitError):
    """A cascade that cannot be planned, or that stopped at a node."""


@dataclass(frozen=True)
class Member:
    """One model a unit re-derives: its version at the start revision."""

    old: str
    path: str
    name: str
    folder: bool = False  # a model folder (a tree of shards), not one file


@dataclass
class Unit:
    """One creation call: a model, or every member of an MTL group."""

    members: list[Member]
    function: str | None
    parents: list[str]  # old parent versions, in the order the function takes them
    group: str | None = None

    @property
    def label(self) -> str:
        return self.group or self.members[0].name


@dataclass
class Plan:
    cid: str
    old: Version
    new: Version
    branch: str
    start: str  # the commit the branch starts from
    units: list[Unit]  # all parents first
    skipped: list[str] = field(default_factory=list)  # names left as they are (--skip)

    def dependencies(self) -> list[set[int]]:
        """For each unit, the units that make one of its parents."""
        return _dependencies(self.units)


def creation_function(lin: Lineage, old: str, declared: str | None) -> str | None:
    """How `old` is made: its declared `creation`, else the function its provenance edge names."""
    if declared:
        return declared
    for e in lin.graph.in_edges(old, (PROVENANCE,)):
        fn = e.info.get("function")
        if fn and fn != "None":
            return fn
    return None


def ordered_parents(lin: Lineage, old: str, declared: tuple[str, ...]) -> list[str]:
    """The old version's provenance parents, in mgit.toml's `parents` order where declared."""
    parents = lin.graph.parents(old, (PROVENANCE,))

    def rank(p: str) -> int:
        node = lin.graph.nodes.get(p)
        decl = lin.config.model_at(node.path) if node and node.path else None
        return declared.index(decl.name) if decl and decl.name in declared else len(declared)

    return sorted(parents, key=rank)


def _previous(lin: Lineage, new: Version) -> Version:
    before = lin.graph.parents(new.id, (VERSION,))
    if len(before) != 1:
        what = "no previous version" if not before else f"{len(before)} previous versions"
        raise CascadeError(
            f"{new.path or new.id[:10]} has {what}; name the version it replaces with --from"
        )
    return lin.resolve(before[0])


def plan(
    lin: Lineage,
    model: str,
    old: str | None = None,
    new: str | None = None,
    rev: str = "HEAD",
    skip: str | None = None,
    stop: str | None = None,
    branch: str | None = None,
) -> Plan:
    new_v = lin.resolve(new or model)
    old_v = lin.resolve(old) if old else _previous(lin, new_v)
    if old_v.id == new_v.id:
        raise CascadeError("--from and --to name the same version: nothing changed")
    start = lin.repo.git("rev-parse", "--verify", f"{rev}^{{commit}}")
    held = contents.versions_at(lin.repo, lin.config.folders(), start)

    def name(v: str) -> str:
        t = target(lin, v, held.get(v))
        return t.model or t.label

    def matches(pattern: str | None, v: str) -> bool:
        return pattern is not None and bool(
            re.search(pattern, name(v)) or re.search(pattern, held.get(v, ""))
        )

    # descendants of OLD the start revision holds, through provenance edges
    found: dict[str, None] = {}
    frontier = [old_v.id]
    while frontier:
        for child in lin.graph.children(frontier.pop(0), (PROVENANCE,)):
            if child in held and child not in found and child not in (old_v.id, new_v.id):
                found[child] = None
                if not matches(stop, child):
                    frontier.append(child)
    skipped = [v for v in found if matches(skip, v)]
    chosen = [v for v in found if v not in skipped]
    folders = set(lin.config.folders())

    units: dict[str, Unit] = {}  # keyed by group name or version id
    by_path = {p: v for v, p in held.items()}
    for v in chosen:
        decl = lin.config.model_at(held[v])
        group = lin.config.group_of(decl.name) if decl else None
        if group is None:
            member = Member(v, held[v], name(v), held[v] in folders)
            units[v] = Unit(
                [member],
                creation_function(lin, v, decl.creation if decl else None),
                ordered_parents(lin, v, decl.parents if decl else ()),
            )
        elif group.name not in units:
            paths = [(m.path.rstrip("/"), m.name) for m in map(lin.config.models.get, group.models)]
            members = [Member(by_path[p], p, n, p in folders) for p, n in paths if p in by_path]
            parents: dict[str, None] = {}
            for m in members:
                decl_m = lin.config.models[m.name]
                parents.update(dict.fromkeys(ordered_parents(lin, m.old, decl_m.parents)))
            own = {m.old for m in members}
            units[group.name] = Unit(
                members, group.creation, [p for p in parents if p not in own], group.name
            )
    ordered = _topological(list(units.values()), lin)
    # not the start commit: committing a fix to a creation function must not change the id
    options = f"{old_v.id} {new_v.id} skip={skip} stop={stop}"
    cid = hashing.to_text(hashing.digest(options.encode()))[3:15]
    label = name(new_v.id) if new_v.id in held else (new_v.path or model)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(label).stem).strip("-") or "model"
    return Plan(
        cid,
        old_v,
        new_v,
        branch or f"mgit/cascade/{safe}-{new_v.id[:8]}",
        start,
        ordered,
        [name(v) for v in skipped],
    )


def _dependencies(units: list[Unit]) -> list[set[int]]:
    maker = {m.old: i for i, u in enumerate(units) for m in u.members}
    return [{maker[p] for p in u.parents if p in maker} for u in units]


def _topological(units: list[Unit], lin: Lineage) -> list[Unit]:
    """Units with every unit that makes one of their parents first (commit order among equals)."""
    deps = _dependencies(units)
    out: list[int] = []
    done: set[int] = set()

    def key(i: int) -> tuple:
        return lin.graph.order_key(units[i].members[0].old)

    while len(out) < len(units):
        ready = sorted((i for i in range(len(units)) if i not in done and deps[i] <= done), key=key)
        if not ready:
            raise CascadeError("the provenance edges among these models form a cycle")
        out.append(ready[0])
        done.add(ready[0])
    return [units[i] for i in out]


# -- running -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    made: dict[str, str] = field(default_factory=dict)  # old version -> new version
    resumed: int = 0  # versions found already committed by an earlier run
    cluster: Any = None  # what the cluster did (execution.cluster.Stats), when on one
    commit_seconds: float = 0.0  # the head's part: writing and committing what units made


def _trailer(plan: Plan, old: str) -> str:
    return f"{TRAILER}: {plan.cid} {old}"


def _committed(lin: Lineage, plan: Plan) -> dict[str, tuple[str, str]]:
    """old version -> (new version, commit) for what earlier runs of this cascade committed."""
    ref = f"refs/heads/{plan.branch}"
    if not lin.repo.git("rev-parse", "--verify", "--quiet", ref, check=False):
        return {}
    fmt = f"%H%x1f%(trailers:key={TRAILER},valueonly,separator=%x1e)"
    paths = {m.old: m.path for u in plan.units for m in u.members}
    out: dict[str, tuple[str, str]] = {}
    # split("\n"), not splitlines(): that also splits at the \x1e between trailers
    for line in lin.repo.git("log", f"--format={fmt}", ref).split("\n"):
        commit, _, values = line.partition("\x1f")
        for value in filter(None, values.split("\x1e")):
            cid, _, old = value.strip().partition(" ")
            if cid == plan.cid and old in paths and old not in out:
                out[old] = (lin.repo.git("rev-parse", f"{commit}:{paths[old]}"), commit)
    return out


class _Cascade:
    """One run of a plan: schedules units on workers, commits what they make, in order."""

    def __init__(
        self, lin: Lineage, plan: Plan, jobs: int | None, say, cluster: str | None
    ) -> None:
        if lin.repo.worktree is None:
            raise CascadeError("cascades run in a working tree (they import the repository's code)")
        self.lin, self.plan, self.jobs, self.say = lin, plan, jobs, say
        self.cluster = cluster
        self.renew: dict[str, str] = {plan.old.id: plan.new.id}
        self.outcome = Outcome()
        self.scratch = lin.repo.mgit_dir / "cascades" / plan.cid

    def new_parents(self, unit: Unit) -> list[str]:
        return [self.renew.get(p, p) for p in unit.parents]

    def message(self, made: list[tuple[Unit, Member]]) -> str:
        """The commit message of members re-derived together: each one's parents and function,
        then one trailer per member (how a rerun finds them)."""

        def parents(unit: Unit) -> str:
            return ", ".join(target(self.lin, p).label for p in self.new_parents(unit))

        trailers = "".join(f"{_trailer(self.plan, m.old)}\n" for _, m in made)
        if len(made) == 1:
            (unit, m), what = made[0], self.plan.old.path or "the model"
            return (
                f"cascade: re-derive {m.name} from {parents(unit)}\n\n"
                f"{unit.function} on the new version of {what}.\n\n{trailers}"
            )
        lines = "".join(f"{m.name} from {parents(u)} by {u.function}\n" for u, m in made)
        return f"cascade: re-derive {len(made)} models\n\n{lines}\n{trailers}"

    def resume(self, unit: Unit, done: dict[str, tuple[str, str]]) -> list[Member]:
        """Take the members an earlier run committed (repairing cut-off records); the rest."""
        todo = []
        for m in unit.members:
            if m.old not in done:
                todo.append(m)
                continue
            new, commit = done[m.old]
            self.renew[m.old] = new
            self.outcome.made[m.old] = new
            self.outcome.resumed += 1
            want = set(self.new_parents(unit))
            if not want <= set(self.lin.graph.parents(new, (PROVENANCE,))):
                parents = [self.lin.resolve(p) for p in self.new_parents(unit)]
                code = self.lin.repo.git("rev-parse", f"{commit}^")
                kind = "folder" if m.folder else "file"
                recs = lineage_records(m.path, parents, unit.function, code, m.old, kind=kind)
                record_many(self.lin, {new: recs}, f"save {m.path}")
        return todo

    def commit(self, finished: list[tuple[Unit, list[Member], dict[str, str]]]) -> None:
        """What units made, in one commit onto the branch and one lineage write: the units
        that finished while the last commit was made go together, so the head's part does
        not grow with the jobs that finish at once. A folder is laid out as its old version."""
        began = time.monotonic()
        repo = self.lin.repo
        files: list[ModelFile] = []
        plain: dict[str, bytes] = {}
        made = [(unit, m) for unit, members, _ in finished for m in members]
        for _, members, outputs in finished:
            for m in members:
                state = read_tensors(outputs[m.name])
                if m.folder:
                    shards, index = reshard.like(repo, m.old, m.path, state)
                    files += shards
                    plain |= index
                else:
                    files.append(ModelFile(m.path, state))
        commit, blobs = commit_files(repo, files, self.message(made), self.plan.branch, plain)
        code = repo.git("rev-parse", f"{commit}^")
        changes = {}
        for unit, m in made:
            version = repo.git("rev-parse", f"{commit}:{m.path}") if m.folder else blobs[m.path]
            parents = [self.lin.resolve(p) for p in self.new_parents(unit)]
            kind = "folder" if m.folder else "file"
            changes[version] = lineage_records(
                m.path, parents, unit.function, code, m.old, kind=kind
            )
            self.renew[m.old] = version
            self.outcome.made[m.old] = version
            self.say(f"  {m.name}: {m.old[:10]} -> {version[:10]}")
        record_many(self.lin, changes, f"cascade {self.plan.cid}: {len(made)} version(s)")
        self.outcome.commit_seconds += time.monotonic() - began

    def job(self, unit: Unit) -> tuple[dict, dict[str, str]]:
        """The worker job that makes every member of the unit, and where each lands."""
        outputs = {m.name: str(self.scratch / f"{m.old}.safetensors") for m in unit.members}
        parents = [target(self.lin, p).spec() for p in self.new_parents(unit)]
        job = {
            "kind": "create",
            "function": unit.function,
            "parents": parents,
            "outputs": outputs,
            "group": unit.group is not None,
        }
        return job, outputs

    def run(self) -> Outcome:
        plan = self.plan
        ref = f"refs/heads/{plan.branch}"
        if not self.lin.repo.git("rev-parse", "--verify", "--quiet", ref, check=False):
            self.lin.repo.git("update-ref", ref, plan.start, "0" * 40)
        done = _committed(self.lin, plan)
        self.scratch.mkdir(parents=True, exist_ok=True)
        remaining: dict[int, list[Member]] = {}  # unit -> members still to commit
        deps = plan.dependencies()
        finished: set[int] = set()
        for i in range(len(plan.units)):  # in dependency order: parents resolve first
            todo = self.resume(plan.units[i], done)
            if todo:
                remaining[i] = todo
            else:
                finished.add(i)
        failure: str | None = None
        running: dict[int, dict[str, str]] = {}  # unit -> its output files
        with open_pool(self.lin, self.jobs, self.cluster) as pool:
            while True:
                for i in [i for i in remaining if i not in running and deps[i] <= finished]:
                    if failure is not None or not pool.idle():
                        break
                    unit = plan.units[i]
                    if not unit.function or unit.function.startswith(QUERY_FUNCTION):
                        failure = self._no_function(unit)
                        break
                    job, running[i] = self.job(unit)
                    pool.submit(i, job)
                    self.say(f"re-deriving {unit.label} with {unit.function}")
                if not running:
                    break
                succeeded = []
                for i, answer in [pool.next_done(), *pool.ready()]:
                    outputs = running.pop(i)
                    unit = plan.units[i]
                    if answer["ok"]:
                        succeeded.append((unit, remaining.pop(i), outputs))
                        finished.add(i)
                    elif failure is None:
                        failure = f"{unit.function} failed on {unit.label}: {answer['error']}"
                if succeeded:
                    self.commit(succeeded)
            self.outcome.cluster = getattr(pool, "stats", None)
        if failure is None and not remaining:
            shutil.rmtree(self.scratch, ignore_errors=True)
            return self.outcome
        left = len([m for i in remaining for m in remaining[i]])
        raise CascadeError(
            f"cascade stopped: {failure or 'units left whose parents never finished'}. "
            f"{len(self.outcome.made)} version(s) are committed on {plan.branch}, {left} left; "
            "fix that and run the same command again to finish (finished versions are kept)"
        )

    def _no_function(self, unit: Unit) -> str:
        where = f"[groups.{unit.group}]" if unit.group else f"[models.{unit.members[0].name}]"
        fix = f"add creation = 'module:function' to {where} in mgit.toml"
        if unit.function:  # a query made it: a cascade re-runs functions, not queries
            return (
                f"{unit.label} was made by a query, which a cascade does not re-run: run the "
                f"query again on the new version (git mgit log shows it), or {fix}"
            )
        return f"{unit.label} has no creation function: {fix}"


def run(
    lin: Lineage, plan: Plan, jobs: int | None = 1, say=print, cluster: str | None = None
) -> Outcome:
    """Re-derive every unit of the plan not yet on its branch; commit each as it finishes.

    `jobs` units at once, here, or on the Dask cluster at `cluster` ("" for
    DASK_SCHEDULER_ADDRESS).
    """
    return _Cascade(lin, plan, jobs, say, cluster).run()


def describe(plan: Plan) -> Iterator[str]:
    """The plan as lines a person reads before running it."""
    yield (
        f"cascade {plan.cid}: {plan.old.id[:10]} -> {plan.new.id[:10]}, "
        f"{sum(len(u.members) for u in plan.units)} model(s) onto branch {plan.branch}"
    )
    for u in plan.units:
        names = ", ".join(m.name for m in u.members)
        yield f"  {names}  <- {u.function or '(no creation function)'}"
    for s in plan.skipped:
        yield f"  {s}  (skipped)"
