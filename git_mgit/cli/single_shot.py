"""`git mgit clean` / `git mgit smudge`: single-shot filters, one file per process.

Fallbacks for git versions or setups without the long-running process
protocol (filter.mgit.clean / filter.mgit.smudge); same code paths as
filter-process, without pkt-lines.
"""

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
    from git_mgit.filters.process import run_clean_once, run_smudge_once

    once = run_clean_once if args.command == "clean" else run_smudge_once
    handler = MgitFilter(find_repo())
    try:
        return once(handler, args.path, sys.stdin.buffer, sys.stdout.buffer)
    finally:
        handler.close()
