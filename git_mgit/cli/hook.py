"""Run one of git-mgit's git hooks; the installed hook scripts call this."""

from __future__ import annotations

import argparse
import importlib
import sys

from git_mgit.hooks.hookfiles import HOOKS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=HOOKS, help="the hook git is running")
    parser.add_argument(
        "args", nargs=argparse.REMAINDER, help="the hook's arguments, as git passed them"
    )


def run(args: argparse.Namespace) -> int:
    # git feeds hooks their input on stdin (pre-push: one line per ref); a
    # terminal means someone ran the hook by hand with no input.
    stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    module = importlib.import_module(f"git_mgit.hooks.{args.name.replace('-', '_')}")
    return int(module.run(list(args.args), stdin) or 0)
