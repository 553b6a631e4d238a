"""Configure filters, drivers and hooks (global by default), git-lfs style."""

from __future__ import annotations

import argparse

from git_mgit import setup


def add_scope_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """--global/--local/--system and --skip-repo, shared with uninstall."""
    scope = parser.add_mutually_exclusive_group()
    for name, where in (
        ("global", "your global git config (the default)"),
        ("local", "this repository's .git/config"),
        ("system", "the system git config"),
    ):
        scope.add_argument(
            f"--{name}", dest="scope", action="store_const", const=name, help=f"{verb} {where}"
        )
    parser.set_defaults(scope="global")
    parser.add_argument(
        "--skip-repo",
        action="store_true",
        help=f"do not {verb.lower()} this repository's hooks, refspecs and attributes",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scope_arguments(parser, "configure")
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite other values of our keys, and re-chain hooks",
    )


def run(args: argparse.Namespace) -> int:
    repo = setup.repo_here()
    changes = setup.install_config(args.scope, args.force, repo)
    if repo is not None and not args.skip_repo:
        changes += setup.ensure_repo(repo, args.force)
    for change in changes:
        print(change)
    print("git-mgit installed." if changes else "git-mgit is already installed; nothing to do.")
    return 0
