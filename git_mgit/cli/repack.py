"""Re-plan every tensor object's delta base globally: least storage under recreation budgets.

git mgit repack --plan-only          # what it would store, per planner, changing nothing
git mgit repack                      # heads within 2x their size to decode, others 8x
git mgit repack --budget 4 --head-budget 1 --planner pas-pt

A budget is a multiple of the decode work of the version stored whole: 1
means every chunk of the version materialized, 2 an average delta chain of
two levels. Only object refs change; commits, manifests and checkouts are
byte-for-byte the same (see docs/storage.md).
"""

from __future__ import annotations

import argparse

from git_mgit import config
from git_mgit.console.progress import format_size
from git_mgit.gitcmd import find_repo
from git_mgit.planning import bounds
from git_mgit.planning.graph import Scheme
from git_mgit.repack import rewrite
from git_mgit.repack.costs import Budgets
from git_mgit.repack.estimate import Estimate, estimate
from git_mgit.repoconfig import load as load_config
from git_mgit.store.chunkstore import ChunkStore

PLANNERS = ("best", "pas-mt", "pas-pt")


def _factor(text: str) -> float:
    value = float(text)
    if not value >= 1:
        raise argparse.ArgumentTypeError("a budget is a multiple of the version's size, >= 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget",
        type=_factor,
        default=Budgets.others,
        help=f"recreation budget of older versions, x their size (default {Budgets.others:g})",
    )
    parser.add_argument(
        "--head-budget",
        type=_factor,
        default=Budgets.heads,
        help=f"budget of versions at a branch tip or tag (default {Budgets.heads:g})",
    )
    parser.add_argument(
        "--planner",
        choices=PLANNERS,
        default="best",
        help="PAS-MT, PAS-PT or the better of both (default); the optimum on small graphs",
    )
    parser.add_argument(
        "--scheme",
        choices=[s.value for s in Scheme],
        default=Scheme.INDEPENDENT.value,
        help="a version's cost: the sum over its chunks (independent, as checkout decodes) "
        "or the longest chain (parallel)",
    )
    parser.add_argument("--plan-only", action="store_true", help="report the plan, write nothing")


def _report(est: Estimate, planner: str) -> None:
    sv, g = est.survey, est.costed.estimated()
    print(
        f"{len(sv.chunks)} chunks in {len(sv.versions)} model versions "
        f"({len(sv.heads)} at a branch tip or tag), {len(g.edges) - len(sv.chunks)} candidate deltas"
    )
    rows = [("now", est.now, est.current), (planner, est.plan, est.planned)]
    rows += [
        (name, plan, plan.storage())
        for name, plan in (("mst (least storage)", bounds.mst(g)), ("spt (fastest)", bounds.spt(g)))
    ]
    for name, plan, stored in rows:
        over = len(plan.violations(est.scheme))
        print(f"  {name:<20} {format_size(stored):>10}  {over} version(s) over budget")
    for group in est.plan.violations(est.scheme):
        print(
            f"  over budget: {group.name} needs {est.plan.cost(group, est.scheme) / group.budget:.2f}x "
            "its budget (raise --budget / --head-budget)"
        )
    if sv.missing:
        print(f"  {sv.missing} chunk(s) are not in this clone and were left out (`git mgit fetch`)")


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    settings = config.load(repo)
    folders = load_config(repo.worktree).folders()
    store = ChunkStore(repo)
    try:
        est = estimate(
            repo,
            store,
            folders,
            Budgets(heads=args.head_budget, others=args.budget),
            args.planner,
            Scheme(args.scheme),
            max_depth=settings.max_chain_depth + 1,  # the planner counts the stored-whole level
        )
        if not est.survey.chunks:
            print("nothing to repack: no model versions in this history")
            return 0
        _report(est, args.planner)
        if args.plan_only:
            return 0
        if not est.worthwhile:
            print("nothing to do: the objects are stored as well as the planner can do")
            return 0
        done = rewrite.apply(store, est.survey, est.costed, est.plan)
    finally:
        store.close()
    print(
        f"re-encoded {done.reencoded}, re-stamped {done.restamped}, kept {done.kept} objects: "
        f"{format_size(done.before)} -> {format_size(done.after)} stored"
    )
    if done.anchor:
        print("the old objects are unreachable now: `git mgit gc --prune=now` reclaims them")
    return 0
