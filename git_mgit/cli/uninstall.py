"""Remove what install configured: only values that are still git-mgit's."""

from __future__ import annotations

import argparse

from git_mgit import setup
from git_mgit.cli.install import add_scope_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scope_arguments(parser, "unconfigure")


def run(args: argparse.Namespace) -> int:
    repo = setup.repo_here()
    changes = setup.uninstall_config(args.scope, repo)
    if repo is not None and not args.skip_repo:
        changes += setup.remove_repo(repo)
    for change in changes:
        print(change)
    print("git-mgit uninstalled." if changes else "git-mgit was not installed; nothing to do.")
    return 0
