"""`git merge` with tensor-level strategies for the model files it merges.

git mgit merge --strategy average feature
git mgit merge --tensor 'classifier.*=theirs' --strategy task-arithmetic -- --no-ff feature

The rules go to the merge driver (then mgit.toml's [merge] rules apply);
everything after them, or after `--`, is passed to `git merge` as it is.
git's own merge strategy is `-s`, as always.
"""

from __future__ import annotations

import argparse
import os
import subprocess

from git_mgit.gitcmd import find_repo
from git_mgit.merge import strategy
from git_mgit.merge.strategy import ENV_RULES, Rules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    strategy.add_arguments(parser)
    parser.add_argument("git_args", nargs=argparse.REMAINDER, help="arguments for git merge")


def run(args: argparse.Namespace) -> int:
    rules = Rules.from_command_line(args.tensor, args.strategy)
    rest = args.git_args[1:] if args.git_args[:1] == ["--"] else args.git_args
    env = {**os.environ, ENV_RULES: rules.to_env()}
    code = subprocess.call(["git", "merge", *rest], env=env)
    if code == 0:
        from git_mgit.lineage import history, pending

        repo = find_repo()
        if pending.waiting(repo):
            pending.finalize(repo, history.read(repo).versions)  # the merge is in history now
    return code
