"""Single-shot clean filter (fallback for git without the process protocol)."""

from __future__ import annotations

import argparse
import sys

from git_mgit.gitcmd import find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", nargs="?", default="", help="path of the file in the repository (%%f)"
    )


def run(args: argparse.Namespace) -> int:
    from git_mgit.filters.mgit_filter import MgitFilter
    from git_mgit.filters.process import run_clean_once

    handler = MgitFilter(find_repo())
    try:
        return run_clean_once(handler, args.path, sys.stdin.buffer, sys.stdout.buffer) or 0
    finally:
        handler.close()
