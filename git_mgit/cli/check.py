"""Check model files before a commit: tracked, valid headers, finite values, objects.

git mgit check                      # every check, on what is staged (the pre-commit hook)
git mgit check finite a.safetensors # one check, on working-tree files (the pre-commit framework)

Prints one line per problem, naming the file and the fix; exit status 1 if any.
"""

from __future__ import annotations

import argparse
import sys

from git_mgit.checks import CHECKS, check_files, check_staged
from git_mgit.gitcmd import find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "check",
        nargs="?",
        default="all",
        choices=[*CHECKS, "all"],
        help="which check (default all)",
    )
    parser.add_argument("files", nargs="*", help="files to check (default: what is staged)")


def run(args: argparse.Namespace) -> int:
    wanted = CHECKS if args.check == "all" else (args.check,)
    repo = find_repo()
    report = check_files(repo, args.files, wanted) if args.files else check_staged(repo, wanted)
    for problem in report.problems:
        print(f"git-mgit: {problem}", file=sys.stderr)
    return 1 if report.problems else 0
