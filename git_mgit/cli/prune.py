"""`git mgit prune [--dry-run] [--keep DATE]`: free disk from objects a remote holds.

Keeps what the index, HEAD, recent checkouts (mgit.pruneKeep, default
7.days.ago) and unpushed commits need; drops the rest of what some remote
has a version ref of. A pruned version is fetched again on its next checkout.
"""

from __future__ import annotations

import argparse
import sys

from git_mgit import config
from git_mgit.console.progress import format_size
from git_mgit.gitcmd import find_repo
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer.prune import prune


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", "-n", action="store_true", help="say what would be dropped")
    parser.add_argument(
        "--keep", metavar="DATE", help="keep checkouts younger than this (default: mgit.pruneKeep)"
    )


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    since = args.keep or config.load(repo).prune_keep
    store = ChunkStore(repo)
    try:
        report = prune(repo, store, since, args.dry_run)
    finally:
        store.close()
    for name in report.unreachable:
        print(
            f"git-mgit: warning: {name} could not be reached: nothing it holds was dropped",
            file=sys.stderr,
        )
    verb = "would drop" if args.dry_run else "dropped"
    print(
        f"git-mgit: {verb} {report.dropped} object(s) ({format_size(report.freed)}); kept {report.kept} chunk(s)"
    )
    return 0
