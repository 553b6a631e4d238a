"""`evaluate ... vary ... keep`: try configurations of a creation function, keep the best.

ModelHub's Query 4, on git-mgit's lineage graph: for each source model (a
model, or every model a subquery selects), its creation function (mgit.toml
`creation`, else the function its provenance edge recorded) is called on
its provenance parents once per configuration: the `with` settings plus one
value of each `vary` axis (the grid of all combinations), as keyword
arguments. Each candidate is made in a worker process, scored by the
registered test the `keep` metric names, and ranked; `keep top(N, ...)`
keeps the N largest (`bottom`, the smallest). With `into`, the kept models
are committed with a provenance edge that names the query, their
configuration in the file's metadata, and their test results recorded in
the notes, so `select` finds them by metric at once.

How candidates are searched is a strategy (SEARCHES): `grid` runs them all.
Model selection (issue 8) plugs in here as another strategy: it gets the
candidates and a function that scores a batch of them, so it can score
cheap configurations first and stop the rest early, as MLtuner's trial
branches and Cerebro's model hopper do. Until it lands, `using grid` is the
only choice; ModelHub's `auto` (a default search over a parameter's range)
needs it too.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from git_mgit.dql import derive
from git_mgit.dql import syntax as s
from git_mgit.dql.catalog import Catalog
from git_mgit.dql.errors import QueryError
from git_mgit.dql.output import Result
from git_mgit.dql.planner import select
from git_mgit.dql.values import ID, NUMBER, TEXT
from git_mgit.errors import MgitError
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.contents import fetch_missing
from git_mgit.lineage.records import QUERY_FUNCTION
from git_mgit.lineage.save import commit_model
from git_mgit.repoconfig import TestDecl
from git_mgit.runtime.cascade import creation_function, ordered_parents
from git_mgit.runtime.deriving import METADATA_KEY
from git_mgit.runtime.loading import read_tensors
from git_mgit.runtime.targets import target
from git_mgit.runtime.testing import Runner


@dataclass(frozen=True)
class Recipe:
    """How a source model is made: its creation function and parents."""

    source: str
    label: str
    function: str
    parents: tuple[str, ...]
    architecture: str | None
    type: str | None


@dataclass(frozen=True)
class Candidate:
    index: int
    recipe: Recipe
    config: dict[str, s.Value]


@dataclass
class Scored:
    candidate: Candidate
    file: Path | None = None
    metrics: dict = field(default_factory=dict)
    error: str | None = None


Evaluator = Callable[[list[Candidate]], list[Scored]]
Search = Callable[[list[Candidate], Evaluator], list[Scored]]


def grid(candidates: list[Candidate], evaluate: Evaluator) -> list[Scored]:
    """Every configuration, in one batch (ModelHub's default strategy)."""
    return evaluate(candidates)


SEARCHES: dict[str, Search] = {"grid": grid}


def evaluate(
    catalog: Catalog,
    query: s.Evaluate,
    jobs: int | None = 1,
    dry_run: bool = False,
    cluster: str | None = None,
) -> Result:
    lin = catalog.lin
    if lin.repo.worktree is None:
        raise MgitError("evaluate runs creation functions: it needs a working tree")
    search = SEARCHES.get(query.search)
    if search is None:
        raise QueryError(
            f"unknown search {query.search!r}; available: {', '.join(SEARCHES)} (model "
            "selection strategies are not there yet)",
            query.search_pos,
        )
    test = _test(catalog, query.keep.metric)
    recipes = [_recipe(catalog, v, query.source) for v in _sources(catalog, query.source)]
    candidates = [
        Candidate(i, r, config)
        for i, (r, config) in enumerate(itertools.product(recipes, _configs(query)))
    ]
    places = None
    if query.into is not None:  # checked before anything runs; one kept model may take any path
        sources = [(c.recipe.source, c.config) for c in candidates]
        places = derive.place(catalog, query.into, sources, unique=query.keep.count > 1)
    if dry_run:
        return _result(query, [Scored(c) for c in candidates], [], places, {}, planned=True)
    scratch = lin.repo.mgit_dir / "query" / hashlib.sha1(query.text.encode()).hexdigest()[:12]
    scratch.mkdir(parents=True, exist_ok=True)
    runner = Runner(lin, jobs, cluster)
    try:
        trial = _Trial(lin, runner, test, scratch)
        scored = search(candidates, trial.run)
        kept = _ranked(scored, query.keep)[: query.keep.count]
        made = _commit(lin, runner, test, query, kept, places) if places is not None else {}
    finally:
        runner.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return _result(query, scored, kept, places, made)


def _test(catalog: Catalog, metric: s.Attr) -> TestDecl:
    test = catalog.lin.config.tests.get(metric.path[0])
    if test is None:
        known = ", ".join(catalog.lin.config.tests) or "none"
        raise QueryError(
            f"keep ranks by a registered test's metric; no test {metric.path[0]!r} in mgit.toml "
            f"(registered: {known})",
            metric.pos,
        )
    return test


def _sources(catalog: Catalog, source: s.ModelRef | s.Select) -> list[str]:
    if isinstance(source, s.ModelRef):
        return [catalog.resolve(source.ref, source.pos)]
    found = select(catalog, source.scope)
    if not found:
        raise QueryError("the subquery selects no model to evaluate")
    return found


def _recipe(catalog: Catalog, version: str, source: s.ModelRef | s.Select) -> Recipe:
    lin = catalog.lin
    decl = catalog.declared(version)
    label = catalog.label(version)
    pos = source.pos if isinstance(source, s.ModelRef) else None
    if decl is not None and lin.config.group_of(decl.name) is not None:
        raise QueryError(f"{label} is made with its MTL group; evaluate varies one model", pos)
    function = creation_function(lin, version, decl.creation if decl else None)
    if function is None or function.startswith(QUERY_FUNCTION):
        raise QueryError(
            f"{label} has no creation function to vary: add creation = 'module:function' "
            f"to [models.{decl.name if decl else 'NAME'}] in mgit.toml",
            pos,
        )
    parents = tuple(ordered_parents(lin, version, decl.parents if decl else ()))
    t = target(lin, version)
    return Recipe(version, label, function, parents, t.architecture, t.type)


def _configs(query: s.Evaluate) -> list[dict[str, s.Value]]:
    fixed = dict(query.settings)
    names = [a.name for a in query.axes]
    return [
        {**fixed, **dict(zip(names, values, strict=True))}
        for values in itertools.product(*(a.values for a in query.axes))
    ]


class _Trial:
    """Makes candidates and scores them with the test, in the runner's worker processes."""

    def __init__(self, lin: Lineage, runner: Runner, test: TestDecl, scratch: Path) -> None:
        self.lin, self.runner, self.test, self.scratch = lin, runner, test, scratch

    def run(self, batch: list[Candidate]) -> list[Scored]:
        scored = {c.index: Scored(c, self.scratch / f"{c.index}.safetensors") for c in batch}
        # One fetch for every parent the workers will load (a partial clone).
        fetch_missing(self.lin, (p for c in batch for p in c.recipe.parents))
        jobs = [(c.index, self._job(c, scored[c.index].file)) for c in batch]
        for index, answer in self.runner.pool.map(jobs):  # the test workers make them too
            if not answer["ok"]:
                scored[index].error = answer["error"]
        by_arch: dict[str | None, dict[str, str]] = {}
        for c in batch:
            if scored[c.index].error is None:
                by_arch.setdefault(c.recipe.architecture, {})[str(c.index)] = str(
                    scored[c.index].file
                )
        for arch, files in by_arch.items():
            answers = self.runner.run_files([self.test], files, arch)
            for label in files:
                answer = answers[(label, self.test.name)]
                result = scored[int(label)]
                if answer["ok"]:
                    result.metrics = answer["metrics"]
                else:
                    result.error = f"{self.test.name}: {answer['error']}"
        return [scored[c.index] for c in batch]

    def _job(self, c: Candidate, file: Path | None) -> dict:
        return {
            "kind": "create",
            "function": c.recipe.function,
            "parents": [target(self.lin, p).spec() for p in c.recipe.parents],
            "outputs": {"candidate": str(file)},
            "group": False,
            "config": c.config,
        }


def _value(scored: Scored, metric: str) -> float | None:
    value = scored.metrics.get(metric)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _ranked(scored: list[Scored], keep: s.Keep) -> list[Scored]:
    """Candidates with a value for the metric, best first (ties: the earlier candidate)."""
    metric = keep.metric.path[1]
    valid = [x for x in scored if x.error is None and _value(x, metric) is not None]
    sign = -1.0 if keep.best == "top" else 1.0
    return sorted(valid, key=lambda x: (sign * _value(x, metric), x.candidate.index))  # type: ignore[operator]


def _commit(
    lin: Lineage,
    runner: Runner,
    test: TestDecl,
    query: s.Evaluate,
    kept: list[Scored],
    places: list[derive.Placement],
) -> dict[int, str]:
    """Commit the kept candidates; candidate index -> new version. Their test results are
    recorded, so a select by the metric finds them without running the test again."""
    made: dict[int, str] = {}
    code = runner.code(test)
    for x in kept:
        c, where = x.candidate, places[x.candidate.index]
        assert x.file is not None and lin.repo.worktree is not None
        settings = json.dumps(c.config, sort_keys=True)
        saved = commit_model(
            read_tensors(str(x.file)),
            lin.repo.worktree / where.path,
            f"evaluate: {c.recipe.label} with {settings} -> {where.path}\n\n{query.text}\n",
            parents=list(c.recipe.parents) or [c.recipe.source],
            function=QUERY_FUNCTION + query.text,
            name=where.name,
            type=c.recipe.type,
            metadata={METADATA_KEY: query.text, "mgit_config": settings},
            lineage=lin,
        )
        made[c.index] = saved.version
        lin.record_tests([(saved.version, test.name, code, x.metrics)])
    return made


def _result(
    query: s.Evaluate,
    scored: list[Scored],
    kept: list[Scored],
    places: list[derive.Placement] | None,
    made: dict[int, str],
    planned: bool = False,
) -> Result:
    """One row per candidate, the kept ones first in rank order; `planned`: a dry run's
    candidates, each with the path it would be committed at if kept."""
    metric = query.keep.metric
    names = [k for k, _ in query.settings] + [a.name for a in query.axes]
    rank = {x.candidate.index: i + 1 for i, x in enumerate(kept)}
    columns = [("rank", NUMBER), ("model", TEXT), *((n, TEXT) for n in names)]
    columns += [(metric.text, NUMBER), ("kept", TEXT), ("path", TEXT), ("version", ID)]
    columns += [("error", TEXT)]
    rows = []
    for x in sorted(
        scored, key=lambda x: (rank.get(x.candidate.index, len(scored) + 1), x.candidate.index)
    ):
        c = x.candidate
        row = {"rank": rank.get(c.index), "model": c.recipe.label, **c.config}
        row[metric.text] = _value(x, metric.path[1])
        row["kept"] = c.index in rank
        shown = planned or c.index in rank
        row["path"] = places[c.index].path if places is not None and shown else None
        row["version"] = made.get(c.index)
        row["error"] = x.error
        rows.append(row)
    notes = []
    if kept and places is None:
        notes.append('nothing committed: add `into "PATH"` to keep the best models')
    return Result("evaluate", columns, rows, notes)
