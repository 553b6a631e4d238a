"""pre-push: send tensor objects and lineage notes ahead of the branches.

Objects go first, so a remote never holds a manifest whose objects it lacks.
Everything pushed is derived from git refs, so any clone can push.
"""

from __future__ import annotations

from git_mgit import transport
from git_mgit.gitcmd import find_repo


def run(args: list[str], stdin: bytes) -> int:
    if not args:
        return 0
    transport.push(find_repo(), args[0])
    return 0
