"""Registered tests over model versions: which to run, running them, recording the results.

A test (mgit.toml `[tests.NAME]`) is a `module:callable` that takes a model
(a torch module of its declared architecture, else its state dict) and
returns a dict of metrics; its pass condition (`accuracy >= 0.9 and ...`)
decides pass or fail. It applies to models by name or by type (regex).

Every result is recorded in the lineage notes keyed by the test's name, the
hash of its code (callables.code_hash) and the model version, and a recorded
result is reused instead of running the test again: change the test, or a
module of the repository it imports, and it runs again. Errors (a test that
raises, a missing metric) are reported, never recorded.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.contents import fetch_missing
from git_mgit.repoconfig import TestDecl, parse_condition
from git_mgit.runtime import callables
from git_mgit.runtime.execution import Executor, open_pool
from git_mgit.runtime.targets import Target

_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
        "==": operator.eq, "!=": operator.ne}  # fmt: skip


@dataclass
class Result:
    target: Target
    test: TestDecl
    code: str
    metrics: dict | None = None
    error: str | None = None
    reused: bool = False

    @property
    def verdict(self) -> tuple[str, str | None]:
        """(pass | FAIL | error, what went wrong)."""
        if self.error is not None:
            return "error", self.error
        assert self.metrics is not None
        ok, problem = judge(self.test, self.metrics)
        if problem:
            return "error", problem
        return ("pass" if ok else "FAIL"), None


def judge(test: TestDecl, metrics: dict) -> tuple[bool, str | None]:
    """(passed, problem) under the test's condition; no condition: it passes if it ran."""
    if not test.condition:
        return True, None
    ok = True
    for metric, op, value in parse_condition(test.condition):
        if metric not in metrics:
            return False, f"{test.function} returned no {metric!r} (it returned {sorted(metrics)})"
        got = metrics[metric]
        if not isinstance(got, int | float):
            got = float(got)  # "nan" / "inf" as JSON strings
        ok = ok and _OPS[op](got, value)
    return ok, None


class Runner:
    """Runs tests on targets through the execution layer; records and reuses results.

    `jobs` run at once, here or (with `cluster`, a Dask scheduler's address) on a cluster.
    """

    def __init__(self, lin: Lineage, jobs: int | None = 1, cluster: str | None = None) -> None:
        if lin.repo.worktree is None:
            raise MgitError("tests run in a working tree (they import the repository's code)")
        self.lin = lin
        self.root = Path(lin.repo.worktree)
        self.jobs, self.cluster = jobs, cluster
        self._pool: Executor | None = None
        self._codes: dict[str, str] = {}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    @property
    def pool(self) -> Executor:
        """The workers, started (or the cluster reached) on first use; other jobs may share them."""
        if self._pool is None:
            self._pool = open_pool(self.lin, self.jobs, self.cluster)
        return self._pool

    def tests(self, pattern: str | None = None) -> list[TestDecl]:
        found = list(self.lin.config.tests.values())
        if pattern is not None:
            found = [t for t in found if re.search(pattern, t.name)]
        return found

    def applicable(self, t: Target, tests: Iterable[TestDecl]) -> list[TestDecl]:
        return [test for test in tests if test.applies_to(t.model, t.type)]

    def code(self, test: TestDecl) -> str:
        if test.function not in self._codes:
            self._codes[test.function] = callables.code_hash(test.function, self.root)
        return self._codes[test.function]

    def run(self, pairs: Iterable[tuple[Target, TestDecl]], rerun: bool = False) -> list[Result]:
        results: list[Result] = []
        todo: list[tuple[Result, dict]] = []
        for t, test in pairs:
            r = Result(t, test, self.code(test))
            recorded = None if rerun else self.lin.recorded_test(t.version, test.name, r.code)
            if recorded is not None:
                r.metrics, r.reused = recorded, True
            else:
                todo.append((r, {"kind": "test", "function": test.function, "model": t.spec()}))
            results.append(r)
        if todo:
            # One fetch for every version the workers will load (a partial clone); a
            # cluster's nodes fetch for themselves, from the remote.
            if self.cluster is None:
                fetch_missing(self.lin, dict.fromkeys(r.target.version for r, _ in todo))
            progress = Progress("git-mgit: running tests", len(todo), counting=True)
            try:
                for r, answer in self.pool.map(todo):
                    if answer["ok"]:
                        r.metrics = answer["metrics"]
                    else:
                        r.error = answer["error"]
                    progress.update(1)
            finally:
                progress.finish()
            self.lin.record_tests(
                (r.target.version, r.test.name, r.code, r.metrics)
                for r, _ in todo
                if r.metrics is not None
            )
        return results

    def run_files(
        self, tests: Iterable[TestDecl], files: Mapping[str, str], architecture: str | None
    ) -> dict[tuple[str, str], dict]:
        """Each test on each safetensors file (label -> path): models no version holds yet.

        Returns the worker's answer per (label, test name); nothing is recorded.
        """
        todo = [
            ((label, test.name), _file_job(test, path, architecture))
            for test in tests
            for label, path in files.items()
        ]
        progress = Progress("git-mgit: running tests", len(todo), counting=True)
        answers = {}
        try:
            for key, answer in self.pool.map(todo):
                answers[key] = answer
                progress.update(1)
        finally:
            progress.finish()
        return answers


def _file_job(test: TestDecl, path: str, architecture: str | None) -> dict:
    model = {"file": path, "architecture": architecture}
    return {"kind": "test", "function": test.function, "model": model}
