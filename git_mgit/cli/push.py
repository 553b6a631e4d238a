"""`git mgit push [REMOTE] [--all | REV...]`: publish model versions without pushing branches.

`git push` does this itself (the pre-push hook), for the commits it pushes;
this publishes the versions in HEAD's history (or in every branch and tag,
or in the named commits) that REMOTE lacks, and the lineage notes beside them.
"""

from __future__ import annotations

import argparse

from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo
from git_mgit.transfer import notes
from git_mgit.transfer.push import describe, push_versions
from git_mgit.transfer.remotes import default_remote


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "remote", nargs="?", help="remote name or URL (default: upstream, else origin)"
    )
    parser.add_argument(
        "revs", nargs="*", metavar="REV", help="commits whose versions to publish (default HEAD)"
    )
    parser.add_argument("--all", action="store_true", help="every local branch and tag")


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    remote = args.remote or default_remote(repo)
    if remote is None:
        raise MgitError("no remote to push to; name one: `git mgit push <remote>`")
    if args.all:
        tips = repo.git("for-each-ref", "--format=%(objectname)", "refs/heads", "refs/tags").split()
    else:
        tips = [
            repo.git("rev-parse", "--verify", f"{r}^{{commit}}") for r in args.revs or ("HEAD",)
        ]
    with notes.pushed_meanwhile(repo, remote):
        report = push_versions(repo, remote, tips, [], set())
    print(f"git-mgit: {describe(report)}")
    return 0
