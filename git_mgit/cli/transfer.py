"""`git mgit fetch` / `git mgit push`: move tensor objects and lineage notes.

Plain `git push` does the push part through the pre-push hook, and checkout
fetches on demand; these commands are for doing it explicitly.
"""

from __future__ import annotations

import argparse

from git_mgit import transport
from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "remote", nargs="?", help="remote name or URL (default: upstream, else origin)"
    )


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    remote = args.remote or transport.default_remote(repo)
    if remote is None:
        raise MgitError(
            f"no remote to {args.command} with; name one: `git mgit {args.command} <remote>`"
        )
    (transport.fetch if args.command == "fetch" else transport.push)(repo, remote)
    return 0
