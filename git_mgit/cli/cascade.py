"""Re-derive every model downstream of an updated one, committing each onto a branch.

git mgit cascade base                      # base's version at HEAD replaces its previous one
git mgit cascade base --from OLD --to NEW --skip 'pruned' --stop 'ft-b' --jobs 2
git mgit cascade base --dry-run            # print the plan
git mgit cascade base --cluster tcp://head:8786   # on a Dask cluster's nodes

Runs each descendant's creation function (mgit.toml) on its new parents, in
all-parents-first order, independent models in parallel. Nothing is
overwritten: new versions go on a branch (default mgit/cascade/MODEL-NEW).
Killed or stopped part-way, the same command finishes the job.
"""

from __future__ import annotations

import argparse

from git_mgit.cli import cluster_option


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the updated model (name, path or version)")
    parser.add_argument("--from", dest="old", help="the version it replaces (default: previous)")
    parser.add_argument("--to", dest="new", help="the new version (default: MODEL at --rev)")
    parser.add_argument("--rev", default="HEAD", help="whose models to re-derive")
    parser.add_argument("--skip", metavar="RE", help="leave these as they are (not descendants)")
    parser.add_argument("--stop", metavar="RE", help="re-derive these but not their descendants")
    cluster_option.add(parser, "units re-derived at once")
    parser.add_argument("--branch", "-b", help="the branch for the new versions")
    parser.add_argument("--dry-run", "-n", action="store_true", help="print the plan only")


def run(args: argparse.Namespace) -> int:
    from git_mgit.lineage.api import Lineage
    from git_mgit.runtime import cascade

    lin = Lineage()
    plan = cascade.plan(
        lin, args.model, args.old, args.new, args.rev, args.skip, args.stop, args.branch
    )
    if not plan.units:
        print(
            f"nothing to re-derive: no model at {args.rev} is derived from "
            f"{plan.old.id[:10]} (skipped: {', '.join(plan.skipped) or 'none'})"
        )
        return 0
    for line in cascade.describe(plan):
        print(line)
    if args.dry_run:
        return 0
    done = cascade.run(lin, plan, args.jobs, cluster=args.cluster)
    again = f" ({done.resumed} from an earlier run)" if done.resumed else ""
    print(
        f"{len(done.made)} new version(s) on {plan.branch}{again}; "
        f"`git merge {plan.branch}` brings them in"
    )
    return 0
