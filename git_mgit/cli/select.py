"""Model selection by model hopper parallelism: every configuration of a space, one branch each.

git mgit select --space space.toml --workers 2                 # grid search
git mgit select --space space.toml --workers 4 --search random --epochs 5 --name sweep
git mgit select --space space.toml --workers 4 --search hyperband --epochs 27
git mgit select --space space.toml --workers 2 --replay sweep --name sweep-again
git mgit select --space space.toml --workers 16 --cluster tcp://head:8786 --replicas 2

Each worker process holds one data partition; configurations hop between
workers once per partition per epoch (Cerebro, paper 003). Every epoch of
every configuration is a commit on runs/NAME-cII; see docs/selection.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from git_mgit.cli import cluster_option


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--space", required=True, metavar="SPACE.toml", help="the workload")
    parser.add_argument(
        "--workers", type=int, required=True, help="data partitions (a worker each)"
    )
    parser.add_argument(
        "--replicas", type=int, default=1, help="workers holding each partition (default 1)"
    )
    cluster_option.add(parser, None)
    parser.add_argument("--epochs", type=int, help="epochs (default: the space's)")
    parser.add_argument(
        "--search",
        choices=["grid", "random", "hyperband"],
        default="grid",
        help="how configurations are made (hyperband also stops them at rungs)",
    )
    parser.add_argument("--name", help="branches runs/NAME-c00, ... (default select-<time>)")
    parser.add_argument("--seed", type=int, default=0, help="scheduler and random search seed")
    parser.add_argument(
        "--replay", metavar="NAME", help="train NAME's configurations in its recorded visit order"
    )
    parser.add_argument("--plot", metavar="FILE.png", help="where the learning curves go")
    parser.add_argument("--json", action="store_true", help="a JSON summary instead of the table")


def run(args: argparse.Namespace) -> int:
    from git_mgit.gitcmd import find_repo
    from git_mgit.runtime.selection import driver, hyperband, recorded, report, space

    repo = find_repo()
    if repo.worktree is None:
        raise driver.SelectionError("git mgit select runs in a working tree (it runs your code)")
    workload = space.load(Path(repo.worktree) / args.space)
    name = args.name or time.strftime("select-%Y%m%d-%H%M%S")
    if args.workers < 1:
        raise driver.SelectionError(f"--workers must be at least 1, not {args.workers}")
    if args.replicas < 1:
        raise driver.SelectionError(f"--replicas must be at least 1, not {args.replicas}")
    if args.epochs is not None and args.epochs < 1:
        raise driver.SelectionError(f"--epochs must be at least 1, not {args.epochs}")
    replay = None
    if args.replay:
        replay = recorded.schedule(repo, args.replay, args.workers)
        values, epochs = replay.values, replay.epochs
    else:
        epochs = args.epochs or workload.epochs
        values = workload.configurations(args.search, args.seed, epochs)
    driver.check_names(repo, name, len(values))

    def say(line: str) -> None:
        print(f"git-mgit: {line}", file=sys.stderr)

    say(f"{name}: {len(values)} configuration(s), {args.workers} worker(s), {epochs} epoch(s)")
    if args.search == "hyperband" and not replay:
        brackets = hyperband.brackets(epochs, workload.eta)
        say(f"hyperband eta={workload.eta}, configurations@epochs: {hyperband.describe(brackets)}")
    req = driver.Request(
        name,
        args.workers,
        epochs,
        args.search,
        args.seed,
        replay.orders if replay else None,
        replay.marks if replay else None,
        args.replicas,
        args.cluster,
        replay.threads if replay else None,
    )
    outcome = driver.Driver(repo, workload, values, req, say).run()
    picture = report.plot(outcome, Path(args.plot or driver.scratch(repo, name) / "curves.png"))
    if args.json:
        print(json.dumps({**report.as_json(outcome), "plot": str(picture)}, indent=2))
    else:
        print(report.table(outcome))
        print(f"learning curves: {picture}; {outcome.seconds:.1f} s")
    return 0
