"""Stop tracking a pattern: remove its line from the top-level .gitattributes."""

from __future__ import annotations

import argparse

from git_mgit import setup
from git_mgit.gitcmd import find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "patterns", nargs="+", metavar="PATTERN", help="a pattern given to git mgit track"
    )


def run(args: argparse.Namespace) -> int:
    setup.untrack(find_repo(), args.patterns)
    for pattern in dict.fromkeys(args.patterns):
        print(f'Untracking "{pattern}"')
    return 0
