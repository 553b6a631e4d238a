"""pre-push: send tensor objects and lineage notes ahead of the branches.

Objects go first, so a remote never holds a manifest whose objects it lacks:
exactly those the pushed commits need, and the push is refused (with the fix)
if this clone lacks any. Everything is derived from git refs, so any clone can
push.
"""

from __future__ import annotations

from git_mgit import transport
from git_mgit.gitcmd import find_repo

ZERO = "0" * 40


def run(args: list[str], stdin: bytes) -> int:
    """args: remote name (or URL) and URL; stdin: `<local ref> <local oid> <remote ref> <remote oid>` lines."""
    if not args:
        return 0
    revs = [
        f[1]
        for f in (line.split() for line in stdin.decode().splitlines())
        if len(f) == 4 and f[1] != ZERO
    ]
    transport.push(find_repo(), args[0], revs)
    return 0
