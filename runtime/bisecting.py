"""`git mgit bisect`: the first model version a registered test fails on, in about log2(n) runs.

The versions form a DAG through provenance edges (derived from) and version
edges (replaced); a failure is assumed to be inherited along both, as git
bisect assumes of commits. The search itself is git_mgit.lineage.bisection;
this module runs the test for it, through the same Runner as `git mgit
test`, so every verdict is recorded and a version already tested by the
same test code is not run again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from git_mgit.errors import MgitError
from git_mgit.lineage import bisection
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.graph import EDGE_KINDS
from git_mgit.repoconfig import TestDecl
from git_mgit.runtime.targets import Target, target
from git_mgit.runtime.testing import Result, Runner


class BisectError(MgitError):
    """A bisection that cannot give an answer (the test errs, or good and bad contradict)."""


@dataclass
class Found:
    first: Target  # the first failing version: it fails, its parents pass
    candidates: int  # versions that could have been the answer
    runs: int  # tests the search asked for (the number to compare with --linear)
    steps: list[Result] = field(default_factory=list)  # every verdict, in the order asked
    rounds: int = 0  # rounds of tests run at once (k per round with k workers)
    workers: int = 1  # tests each round could run at once

    @property
    def executed(self) -> int:
        """Tests actually run (the rest were recorded results, reused)."""
        return sum(not r.reused for r in self.steps)


def bisect(
    lin: Lineage,
    runner: Runner,
    test: TestDecl,
    bad: str,
    good: list[str],
    linear: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> Found:
    """The first failing version; with k workers free (runner.pool.size), k candidates
    are tested in each round (a k-ary split), so rounds fall as workers grow."""
    bad_id = lin.resolve(bad).id
    good_ids = [lin.resolve(g).id for g in good]
    steps: list[Result] = []

    def verdicts(versions: list[str]) -> dict[str, bool]:
        """Whether each version fails, its tests run at once."""
        results = runner.run([(target(lin, v), test) for v in versions])
        out = {}
        for r in results:
            steps.append(r)
            verdict, problem = r.verdict
            say(f"  {r.target.label:<40} {verdict}{' (recorded)' if r.reused else ''}")
            if verdict == "error":
                raise BisectError(
                    f"test {test.name} could not judge {r.target.label}: {problem}; bisect needs "
                    "a pass or a fail on every version it tries: fix the test and run it again"
                )
            out[r.target.version] = verdict == "FAIL"
        return out

    known = verdicts([bad_id, *good_ids])
    if not known[bad_id]:
        raise BisectError(
            f"test {test.name} passes on {target(lin, bad_id).label}: name a failing version "
            "with --bad (or a model whose current version fails)"
        )
    for g in good_ids:
        if known[g]:
            raise BisectError(
                f"test {test.name} fails on the good version {target(lin, g).label}: "
                "pick a passing one with --good"
            )

    def parents(v: str) -> list[str]:
        return lin.graph.parents(v, EDGE_KINDS) if v in lin.graph else []

    k = 1 if linear else runner.pool.size
    try:
        ancestry = bisection.candidates(bad_id, good_ids, parents)
        if linear:
            first, runs = bisection.run(
                bisection.linear(bad_id, good_ids, parents), lambda v: verdicts([v])[v]
            )
            n_rounds = runs
        else:
            first, n_rounds, runs = _drive(bisection.rounds(bad_id, good_ids, parents, k), verdicts)
    except bisection.BisectError as exc:
        raise BisectError(str(exc)) from exc
    return Found(target(lin, first), ancestry, runs, steps, n_rounds, k)


def _drive(search, verdicts: Callable[[list[str]], dict[str, bool]]) -> tuple[str, int, int]:
    """Run a k-ary search to its end: (first failing version, rounds, tests asked for)."""
    n_rounds = runs = 0
    try:
        probes = next(search)
        while True:
            n_rounds += 1
            runs += len(probes)
            probes = search.send(verdicts(probes))
    except StopIteration as done:
        return done.value, n_rounds, runs
