"""post-merge (and post-checkout): fold lineage notes fetched by `git pull` into refs/notes/mgit."""

from __future__ import annotations

from git_mgit import transport
from git_mgit.gitcmd import find_repo


def run(args: list[str], stdin: bytes) -> int:
    repo = find_repo()
    for remote in transport.remotes(repo):
        transport.merge_notes(repo, transport.remote_notes_ref(remote))
    return 0
