"""`git mgit select`: model hopper parallelism on worker processes, a branch per configuration.

The driver starts one worker per data partition (`replicas` per partition
with --replicas), here or on a Dask cluster's nodes (channels.py), and runs
the scheduler (schedule.py) epoch by epoch: an idle worker gets a unit of a
partition it holds, a finished unit frees its configuration, a worker that
dies (its process, or its whole node) has its unit queued again and is
started anew (a new generation, reading its partition again). At each
epoch's end every configuration's hopped state is committed onto its branch
`runs/NAME-cII` with the epoch's metrics and visit order (`Mgit-Visits`),
through the same RunCommitter as `git mgit train`, so k configurations that
start from one model store only what each changes; the commits run in a
thread while the workers train the next epoch. Under `--search
hyperband` the epoch's scheduler gets only the configurations still training
(hyperband.py says which stop at a rung); a replay trains those its
recorded schedule has an order for.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.lineage.api import Lineage
from git_mgit.runtime.loading import load_state_dict
from git_mgit.runtime.selection import channels, hop, hyperband
from git_mgit.runtime.selection.schedule import (
    FixedScheduler,
    RandomScheduler,
    Scheduler,
    Unit,
)
from git_mgit.runtime.selection.space import Space
from git_mgit.runtime.selection.unit import Task
from git_mgit.runtime.training import layout, runs, threads
from git_mgit.runtime.training.storage import RunCommitter

MAX_ATTEMPTS = 3  # a unit whose worker dies this often stops the run: the unit kills it
_POLL = 0.005


class SelectionError(MgitError):
    """A selection run that cannot go on, with what to do."""


def scratch(repo: Repo, name: str) -> Path:
    """A selection's working folder: hop files, worker logs, the learning curves."""
    return Path(repo.git_dir) / "mgit" / "select" / name


@dataclass
class Config:
    """One configuration of the search and its run."""

    index: int
    values: dict[str, Any]
    run: str
    committer: RunCommitter
    state: Path
    units: list[dict[str, float | str]] = field(default_factory=list)  # this epoch's
    history: list[dict[str, float | str]] = field(default_factory=list)  # per epoch trained
    commits: list[str] = field(default_factory=list)
    bracket: int | None = None  # hyperband's s
    stopped: int | None = None  # the last epoch it trained, when hyperband stopped it there

    @property
    def label(self) -> str:
        return self.run.rpartition("-")[2]


@dataclass
class Worker:
    index: int
    partition: int  # the data partition it holds
    log: Path
    generation: int = -1
    unit: Unit | None = None

    @property
    def idle(self) -> bool:
        return self.unit is None


@dataclass
class Outcome:
    name: str
    space: Space
    configs: list[Config]
    seconds: float
    events: list[str]  # worker deaths and restarts, as said
    visits: dict[tuple[int, int], list[int]]  # (config, epoch) -> partitions in order

    def best(self) -> Config:
        found = best(self.configs, self.space)
        if found is None:
            raise SelectionError(f"no configuration reported metric {self.space.metric!r}")
        return found


def best(configs: list[Config], space: Space) -> Config | None:
    """The configuration whose latest epoch scores best on the space's metric and goal, among
    those that trained the most epochs. Hyperband stopped the others because their bracket
    ranked them lower at a rung, and a metric after fewer epochs does not compare with one
    after more: the answer is a configuration that survived to the full budget."""
    metric = space.metric
    scored = [c for c in configs if c.history and isinstance(c.history[-1].get(metric), float)]
    most = max((len(c.history) for c in scored), default=0)
    scored = [c for c in scored if len(c.history) == most]
    pick = max if space.goal == "max" else min
    return pick(scored, key=lambda c: c.history[-1][metric], default=None)


@dataclass(frozen=True)
class Request:
    name: str
    workers: int
    epochs: int
    search: str = "grid"
    seed: int = 0
    orders: dict[tuple[int, int], list[int]] | None = None  # replay: (config, epoch) -> visits
    marks: dict[tuple[int, int], dict[str, Any]] | None = None  # replay: hyperband's, recorded
    replicas: int = 1  # workers holding each partition
    cluster: str | None = None  # a Dask scheduler's address ("": $DASK_SCHEDULER_ADDRESS)
    threads: int | None = None  # replay: the intra-op threads per worker it was trained with


class Driver:
    def __init__(
        self,
        repo: Repo,
        space: Space,
        values: list[dict[str, Any]],
        req: Request,
        say: Callable[[str], None],
    ) -> None:
        assert repo.worktree is not None
        self.repo, self.space, self.req, self.say = repo, space, req, say
        self.scratch = scratch(repo, req.name)
        shutil.rmtree(self.scratch, ignore_errors=True)
        (self.scratch / "state").mkdir(parents=True)
        code = repo.git("rev-parse", "--verify", "HEAD")
        lineage = Lineage(repo)  # one graph for the start and every configuration's committer
        self.start_file = self._start_weights(lineage)
        self.configs = []
        for i, v in enumerate(values):
            run = f"{req.name}-c{i:02d}"
            committer = RunCommitter(repo, run, code, start=space.start, lineage=lineage)
            config = {"seed": req.seed + i, **v}
            state = self.scratch / "state" / f"c{i:02d}.safetensors"
            self.configs.append(Config(i, config, run, committer, state))
        self.code = code
        self.plan: hyperband.Plan | None = None
        if req.search == "hyperband" and req.orders is None:
            self.plan = hyperband.Plan(hyperband.brackets(req.epochs, space.eta))
        self.partitions = req.workers
        count = req.workers * req.replicas
        # One count for every worker, here or on any node, recorded in every commit: a
        # replay trains with the same, so its weights match bit for bit (threads.py).
        self.threads = threads.for_recorded(req.threads, count)
        self.workers = [
            Worker(w, w % self.partitions, self.scratch / f"worker-{w}.log") for w in range(count)
        ]
        spec = channels.Spec(self.partitions, self.threads, space.functions, self.start_file)
        self.channel: channels.Processes | channels.Nodes = (
            channels.Processes(repo.worktree, spec)
            if req.cluster is None
            else channels.Nodes(repo, spec, req.cluster)
        )
        self.events: list[str] = []
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="git-mgit-select-commit")
        self._pending: Future[None] | None = None
        self.attempts: dict[Unit, int] = {}
        self.visits: dict[tuple[int, int], list[int]] = {}

    def _start_weights(self, lineage: Lineage) -> str | None:
        """The starting model's tensors as a plain file every worker reads for a first unit."""
        if self.space.start is None:
            return None
        path = self.scratch / "start.safetensors"
        tensors = load_state_dict(self.space.start, lineage)
        save_file({n: t.contiguous() for n, t in tensors.items()}, str(path))
        return str(path)

    # -- workers ---------------------------------------------------------------------------------

    def _spawn(self, w: Worker) -> None:
        w.generation += 1
        w.unit = None
        self.channel.start(w.index, w.generation, w.partition, w.log)

    def _died(self, w: Worker, sched: Scheduler) -> None:
        """Queue the unit again, start the worker anew; stop if the unit keeps killing workers."""
        why = self.channel.died(w.index)
        unit = w.unit
        what = "while idle"
        if unit is not None:
            sched.failed(unit)
            self.attempts[unit] = self.attempts.get(unit, 0) + 1
            what = f"training c{unit.config:02d} on partition {unit.partition} (epoch {unit.epoch}); the unit is queued again"
            if self.attempts[unit] >= MAX_ATTEMPTS:
                raise SelectionError(
                    f"worker {w.index} died {MAX_ATTEMPTS} times training c{unit.config:02d} on "
                    f"partition {unit.partition}; its output: {w.log}"
                )
        event = f"worker {w.index} died ({why}) {what}; restarting it"
        self.events.append(event)
        self.say(event)
        self._spawn(w)

    def _task(self, unit: Unit) -> dict[str, Any]:
        c = self.configs[unit.config]
        visit = len(c.units)
        return dataclasses.asdict(
            Task(
                c.run,
                c.values,
                unit.epoch,
                visit,
                self.partitions,
                visit == self.partitions - 1,
                str(c.state),
                c.values["seed"],
                self.start_file,
            )
        )

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> Outcome:
        began = time.monotonic()
        try:
            for w in self.workers:
                self._spawn(w)
            for epoch in range(self.req.epochs):
                active = self._active(epoch)
                self._epoch(epoch, active)
                self._commit(epoch, active)
            for w in self.workers:
                self.channel.send(w.index, None)
            self._wait_commits()
            for w in self.workers:
                self.channel.finish(w.index)
        finally:
            self._committer.shutdown(wait=True)  # never leave a commit half made
            self.channel.close()
        return Outcome(
            self.req.name,
            self.space,
            self.configs,
            time.monotonic() - began,
            self.events,
            self.visits,
        )

    def _active(self, epoch: int) -> list[Config]:
        """The configurations that train this epoch: in a replay those with a recorded order,
        under hyperband those it has not stopped, otherwise all."""
        if self.req.orders is not None:
            return [c for c in self.configs if (c.index, epoch) in self.req.orders]
        if self.plan is not None:
            return [c for c in self.configs if self.plan.training(c.index)]
        return self.configs

    def _scheduler(self, epoch: int, active: list[Config]) -> Scheduler:
        indices = [c.index for c in active]
        if self.req.orders is not None:
            orders = {i: self.req.orders[(i, epoch)] for i in indices}
            return FixedScheduler(orders, self.partitions, epoch)
        rng = random.Random(f"{self.req.seed}/{epoch}")
        return RandomScheduler(indices, self.partitions, epoch, rng)

    def _epoch(self, epoch: int, active: list[Config]) -> None:
        sched = self._scheduler(epoch, active)
        for c in active:
            c.units = []
        while not sched.done:
            progressed = False
            for w in self.workers:
                if w.unit is not None:
                    reply = self.channel.reply(w.index)
                    if reply is not None:
                        self._finished(w, sched, reply)
                        progressed = True
                    elif self.channel.died(w.index) is not None:
                        self._died(w, sched)
                elif self.channel.died(w.index) is not None:
                    self._died(w, sched)
                if w.unit is None:
                    unit = sched.next_for(w.partition)
                    if unit is not None:
                        w.unit = unit
                        self.channel.send(w.index, self._task(unit))
                        progressed = True
            if not progressed:
                time.sleep(_POLL)
        for c in active:
            self.visits[(c.index, epoch)] = sched.visits[c.index]

    def _finished(self, w: Worker, sched: Scheduler, reply: dict[str, Any]) -> None:
        unit = w.unit
        assert unit is not None
        if "error" in reply:
            raise SelectionError(
                f"c{unit.config:02d} failed on partition {unit.partition} (epoch {unit.epoch}): "
                f"{reply['error']}; fix the function and run again"
            )
        sched.finished(unit)
        self.configs[unit.config].units.append(reply["metrics"])
        w.unit = None

    def _marks(
        self, epoch: int, metrics: dict[int, dict[str, float | str]]
    ) -> dict[int, dict[str, Any]]:
        """Hyperband's bracket, rung and stop of each configuration that trained this epoch:
        decided by the plan, or as a replayed selection recorded them."""
        if self.req.marks is not None:
            return {c: self.req.marks.get((c, epoch), {}) for c in metrics}
        if self.plan is None:
            return {}
        scores = {c: _score(m.get(self.space.metric)) for c, m in metrics.items()}
        return self.plan.cut(epoch, scores, self.space.goal)

    def _commit(self, epoch: int, active: list[Config]) -> None:
        """End the epoch: its metrics and hyperband's marks now, and every configuration's
        state onto its branch in the background, while the workers train the next epoch.

        The commits of the epoch before must be done first (in order, and any failure raised
        here). A configuration's state at the epoch's end is kept by a hard link to its hop
        file: the next unit replaces that file (a new inode), never the link's content.
        """
        self._wait_commits()
        metrics = {c.index: _epoch_metrics(c.units) for c in active}
        marks = self._marks(epoch, metrics)
        jobs = []
        for c in active:
            schedule = {
                "selection": self.req.name,
                "configuration": c.label,
                "epoch": epoch,
                "visits": self.visits[(c.index, epoch)],
                "seed": self.req.seed,
                **marks.get(c.index, {}),
            }
            c.history.append(metrics[c.index])
            c.bracket = schedule.get("bracket")
            c.stopped = epoch if schedule.get("stopped") else None
            kept = _kept(c.state, self.scratch / "commit" / c.state.name)
            jobs.append(_Job(c, kept, metrics[c.index], schedule))
        top = best(self.configs, self.space)
        said = (
            f"{top.label} {self.space.metric}={top.history[-1][self.space.metric]}"
            if top
            else "none"
        )
        cut = sum(1 for m in marks.values() if m.get("stopped"))
        stops = f", {cut} stopped by hyperband" if cut else ""
        self.say(f"epoch {epoch}: {len(active)} configuration(s) trained{stops}; best {said}")
        self._pending = self._committer.submit(self._commit_states, epoch, jobs)

    def _commit_states(self, epoch: int, jobs: list[_Job]) -> None:
        """The commit thread's work: each kept state onto its configuration's branch."""
        for job in jobs:
            c = job.config
            snapshot = hop.read(job.kept)
            snapshot.info = dataclasses.replace(
                snapshot.info,
                metrics=job.metrics,
                code=self.code,
                function=self.space.functions["train"],
                start=c.committer.start.id if c.committer.start else None,
                visits=job.schedule["visits"],
            )
            c.commits.append(c.committer(snapshot, {"schedule": job.schedule}).commit)
            job.kept.unlink()
        self.say(f"epoch {epoch}: {len(jobs)} configuration(s) committed")

    def _wait_commits(self) -> None:
        """Return once every epoch's commits are made; raise the first that failed."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()


@dataclass(frozen=True)
class _Job:
    """One configuration's epoch-end state, waiting for the commit thread."""

    config: Config
    kept: Path  # a hard link to (or copy of) its hop file at the epoch's end
    metrics: dict[str, float | str]
    schedule: dict[str, Any]


def _kept(state: Path, where: Path) -> Path:
    """A name for the hop file's content now, which a later replace of `state` leaves alone."""
    where.parent.mkdir(exist_ok=True)
    where.unlink(missing_ok=True)
    try:
        os.link(state, where)
    except OSError:  # a file system without hard links
        shutil.copyfile(state, where)
    return where


def _epoch_metrics(units: list[dict[str, float | str]]) -> dict[str, float | str]:
    """The mean of each metric over the epoch's units; one only the last unit reported
    (an evaluation) as it is."""
    out: dict[str, float | str] = {}
    for name in dict.fromkeys(k for u in units for k in u):
        values = [u[name] for u in units if name in u]
        numbers = [v for v in values if isinstance(v, float)]
        out[name] = sum(numbers) / len(numbers) if len(numbers) == len(values) else values[-1]
    return out


def _score(value: float | str | None) -> float | None:
    """A metric hyperband can rank by: a number (NaN and infinity are text, and rank last)."""
    return value if isinstance(value, float) else None


def check_names(repo: Repo, name: str, count: int) -> None:
    """Refuse names whose branches exist: a selection never overwrites a run."""
    for i in range(count):
        run = f"{name}-c{i:02d}"
        runs.check_name(repo, run)
        if runs.tip(repo, run) is not None:
            raise SelectionError(
                f"{layout.branch(run)} exists; pick another --name for this selection"
            )
