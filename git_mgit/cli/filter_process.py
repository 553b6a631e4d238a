"""Long-running filter process (git runs it; see filter.mgit.process)."""

from __future__ import annotations

import argparse

from git_mgit.gitcmd import find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from git_mgit.transfer.guess import ahead

    repo = find_repo()
    ahead.begin(repo)  # a fresh checkout's listing of the remote, while the filter loads
    from git_mgit.filters.mgit_filter import MgitFilter
    from git_mgit.filters.process import serve

    handler = MgitFilter(repo)
    try:
        return serve(handler)
    finally:
        handler.close()
        ahead.drop()
