"""Find the first model version a registered test fails on, along provenance and version edges.

git mgit bisect --test fp16-finite grandchild          # bad: grandchild's current version
git mgit bisect --test accuracy --good base --bad ft-b
git mgit bisect --test accuracy ft-b --linear          # the baseline: test oldest first
git mgit bisect --test fp16 grand --jobs 4              # 4 candidates per round, at once
git mgit bisect --test fp16 grand --cluster tcp://head:8786   # k = the cluster's threads

Like git bisect, it assumes a failure is inherited by everything derived
from or replacing a failing version, and takes about log2(n) test runs; with k workers, k candidates are tested in
each round (a k-ary split), about log(n) / log(k + 1) rounds.
"""

from __future__ import annotations

import argparse
import json

from git_mgit.cli import cluster_option
from git_mgit.errors import MgitError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="a model whose current version fails")
    parser.add_argument("--test", required=True, help="a registered test's name")
    parser.add_argument("--bad", help="a failing version (default: MODEL's current version)")
    parser.add_argument("--good", action="append", default=[], help="a passing version (repeat)")
    parser.add_argument("--linear", action="store_true", help="test every candidate in turn")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    cluster_option.add(parser, "candidates tested in each round, at once")


def run(args: argparse.Namespace) -> int:
    from git_mgit.lineage.api import Lineage
    from git_mgit.runtime.bisecting import bisect
    from git_mgit.runtime.testing import Runner

    bad = args.bad or args.model
    if bad is None:
        raise MgitError("say which version fails: git mgit bisect --test T MODEL (or --bad V)")
    lin = Lineage()
    test = lin.config.tests.get(args.test)
    if test is None:
        known = ", ".join(sorted(lin.config.tests)) or "none"
        raise MgitError(f"no test named {args.test!r} in mgit.toml (registered: {known})")
    runner = Runner(lin, args.jobs, args.cluster)
    try:
        found = bisect(
            lin,
            runner,
            test,
            bad,
            args.good,
            args.linear,
            say=(lambda _: None) if args.json else print,
        )
    finally:
        runner.close()
    how = "linear search" if args.linear else "bisection"
    if args.json:
        payload = {
            "first_bad": found.first.version,
            "model": found.first.label,
            "path": found.first.path,
            "candidates": found.candidates,
            "runs": found.runs,
            "rounds": found.rounds,
            "workers": found.workers,
            "executed": found.executed,
            "search": how,
        }
        print(json.dumps(payload, indent=2))
        return 0
    first = found.first
    print(f"first failing version: {first.label} ({first.version[:10]}, {first.path})")
    at_once = f" in {found.rounds} rounds of up to {found.workers}" if found.workers > 1 else ""
    print(
        f"{how}: {found.runs} test runs{at_once} among {found.candidates} candidates "
        f"({found.executed} executed, {len(found.steps) - found.executed} recorded results reused)"
    )
    return 0
