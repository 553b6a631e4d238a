"""Run the registered tests on model versions, print a table, record every result in the notes.

git mgit test                                  # every test on every model at HEAD
git mgit test base --traversal provenance      # base and everything derived from it
git mgit test --models 'ft-.*' --tests accuracy --jobs 2 --json
git mgit test --pending                        # merges waiting for their tests
git mgit test --cluster tcp://head:8786 --jobs 64   # spread over a Dask cluster's nodes

A result recorded for the same test code and model version is reused; change
the test (or a module of the repository it imports) and it runs again.
Exits 1 if any test fails or errs.
"""

from __future__ import annotations

import argparse
import json
import re

from git_mgit.cli import cluster_option
from git_mgit.errors import MgitError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("start", nargs="?", help="traverse the lineage graph from this model")
    parser.add_argument("--models", metavar="RE", help="only models whose name or path matches")
    parser.add_argument("--tests", metavar="RE", help="only tests whose name matches")
    parser.add_argument(
        "--traversal",
        choices=["bfs", "dfs", "versions", "provenance"],
        help="from START: every version (bfs, dfs), later versions, or derived models "
        "(default bfs); without START, every model at --rev",
    )
    parser.add_argument("--rev", default="HEAD", help="the revision whose models to test")
    parser.add_argument("--pending", action="store_true", help="merged versions awaiting tests")
    cluster_option.add(parser)
    parser.add_argument("--rerun", action="store_true", help="run even where a result is recorded")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _metrics(metrics: dict | None) -> str:
    if not metrics:
        return ""
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(metrics.items())
    )


def run(args: argparse.Namespace) -> int:
    from git_mgit.lineage.api import Lineage
    from git_mgit.runtime import targets
    from git_mgit.runtime.testing import Runner

    lin = Lineage()
    if args.pending:
        chosen = targets.pending(lin)
    elif args.start:
        start = targets.target(lin, lin.resolve(args.start).id)
        chosen = targets.along(lin, [start], args.traversal or "bfs")
    else:
        chosen = targets.at_revision(lin, args.rev)
    if args.models:
        pattern = re.compile(args.models)
        chosen = [
            t for t in chosen if any(pattern.search(x or "") for x in (t.model, t.label, t.path))
        ]
    runner = Runner(lin, args.jobs, args.cluster)
    try:
        tests = runner.tests(args.tests)
        if not tests:
            raise MgitError(
                "no registered test matches; register one with `git mgit lineage "
                "register-test NAME module:function --models RE`"
            )
        pairs = [(t, test) for t in chosen for test in runner.applicable(t, tests)]
        results = runner.run(pairs, rerun=args.rerun)
    finally:
        runner.close()
    rows = []
    for r in results:
        verdict, problem = r.verdict
        rows.append(
            {
                "model": r.target.label,
                "version": r.target.version,
                "path": r.target.path,
                "test": r.test.name,
                "result": verdict,
                "metrics": r.metrics,
                "error": problem,
                "reused": r.reused,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no test applies to these models")
    else:
        _table(rows)
    return 1 if any(row["result"] != "pass" for row in rows) else 0


def _table(rows: list[dict]) -> None:
    width = max(len(r["model"]) for r in rows)
    tw = max(len(r["test"]) for r in rows)
    print(f"{'model':<{width}}  {'version':<10}  {'test':<{tw}}  result  metrics")
    for r in rows:
        what = r["error"] or _metrics(r["metrics"])
        mark = " (recorded)" if r["reused"] else ""
        print(
            f"{r['model']:<{width}}  {r['version'][:10]}  {r['test']:<{tw}}  "
            f"{r['result']:<6}  {what}{mark}"
        )
    counts = {k: sum(r["result"] == k for r in rows) for k in ("pass", "FAIL", "error")}
    reused = sum(r["reused"] for r in rows)
    print(
        f"{counts['pass']} passed, {counts['FAIL']} failed, {counts['error']} errors "
        f"({reused} recorded results reused)"
    )
