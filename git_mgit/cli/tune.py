"""Automatic tuning of training tunables on branches: MLtuner's loop, checkpoints as commits.

git mgit tune --tunables TUNABLES.toml demo:workload
git mgit tune --tunables TUNABLES.toml --name lr-sweep --seed 1 --json demo:workload

Trials fork from a snapshot commit on runs/NAME-rR-tK, time-shared in this
process; the fastest converging one is kept on runs/NAME and the others
are pruned (`git mgit gc` reclaims them); training re-tunes on a plateau.
See docs/tuning.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("function", metavar="module:fn", help="returns a tuning Workload")
    parser.add_argument(
        "--tunables", required=True, metavar="TUNABLES.toml", help="budget and search space"
    )
    parser.add_argument("--name", help="the run's branch runs/NAME (default tune-<time>)")
    parser.add_argument("--seed", type=int, default=0, help="seeds torch, numpy, random, searcher")
    parser.add_argument("--json", action="store_true", help="a JSON summary instead of the table")


def run(args: argparse.Namespace) -> int:
    from git_mgit.errors import MgitError
    from git_mgit.gitcmd import find_repo
    from git_mgit.runtime.tuning import tunables

    repo = find_repo()
    if repo.worktree is None:
        raise MgitError("git mgit tune runs in a working tree (it runs your code)")
    plan = tunables.load(args.tunables)  # before torch is imported: a wrong file fails at once
    from git_mgit.runtime.tuning import record, report, tuner, workload

    name = args.name or time.strftime("tune-%Y%m%d-%H%M%S")
    record.check_name(repo, name)
    code = repo.git("rev-parse", "--verify", "--quiet", "HEAD", check=False)
    if not code:
        raise workload.TuneError("the repository has no commit yet; commit your workload first")
    work = workload.load(args.function, Path(repo.worktree), args.seed)

    def say(line: str) -> None:
        print(f"git-mgit: {line}", file=sys.stderr, flush=True)

    say(f"{name}: {plan.clocks} clocks, epoch {plan.epoch}, searcher {plan.searcher}")
    runs = record.RunRecord(repo, name, code, args.function, plan.epoch)
    outcome = tuner.Tuner(plan, work, runs, args.seed, say).run()
    if args.json:
        print(json.dumps(report.as_json(outcome), indent=2))
    else:
        print(report.table(outcome))
    return 0
