"""`git mgit fetch [REMOTE] [--recent N | --all | --rev REV...]`: fetch objects ahead of checkouts.

Lineage notes always; tensor objects for HEAD's model versions by default,
or for the N newest versions of every model, every version, or those in the
named commits. Plain `git fetch` / `git pull` bring commits and notes only,
and checkouts fetch what they need; this is for working offline later.
"""

from __future__ import annotations

import argparse

from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer import prefetch
from git_mgit.transfer.fetch import missing_error
from git_mgit.transfer.remotes import default_remote


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "remote", nargs="?", help="remote name or URL (default: upstream, else origin)"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--recent",
        type=int,
        metavar="N",
        help="the N newest versions of every model, on every branch and tag",
    )
    which.add_argument(
        "--all", action="store_true", help="every version in the history of every branch and tag"
    )
    which.add_argument(
        "--rev", nargs="+", metavar="REV", default=(), help="the versions in these commits"
    )


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    remote = args.remote or default_remote(repo)
    if remote is None:
        raise MgitError("no remote to fetch from; name one: `git mgit fetch <remote>`")
    if args.recent is not None and args.recent < 1:
        raise MgitError("--recent takes a number of versions, at least 1")
    sel = prefetch.Selection(args.recent, args.all, tuple(args.rev))
    store = ChunkStore(repo)
    try:
        count, out = prefetch.prefetch(repo, store, remote, sel)
        if out.missing:
            v, m = next(iter(out.missing.items()))
            raise missing_error(f"version {v[:12]}", store, m, out)
    finally:
        store.close()
    print(f"git-mgit: {prefetch.describe(count, out)}")
    return 0
