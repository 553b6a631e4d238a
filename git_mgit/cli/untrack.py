"""Stop tracking a pattern: remove its line from the top-level .gitattributes (giving a
pattern taken over from git-lfs back to git-lfs)."""

from __future__ import annotations

import argparse

from git_mgit import setup
from git_mgit.gitcmd import find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "patterns", nargs="+", metavar="PATTERN", help="a pattern given to git mgit track"
    )


def run(args: argparse.Namespace) -> int:
    for pattern, status in setup.untrack(find_repo(), args.patterns):
        also = " (git-lfs tracks it again, as before git mgit track)" if status == "to-lfs" else ""
        print(f'Untracking "{pattern}"{also}')
    return 0
