"""pre-push: publish the tensor objects and lineage notes the pushed commits need.

Objects go first, so a remote never holds a manifest whose objects it lacks:
the model versions in the pushed commits that the remote has no version ref
of are laid out for fetching and sent under mgit.maxPushSize
(git_mgit.transfer.push), and the push is refused, with the fix, if this
clone lacks any of their objects. Everything is derived from git refs, so any
clone can push.
"""

from __future__ import annotations

import os
import sys

from git_mgit.gitcmd import Repo, find_repo
from git_mgit.hooks.hookfiles import LISTED_ENV, LISTING_FD_ENV
from git_mgit.transfer.remotes import push_listing


def run(args: list[str], stdin: bytes) -> int:
    """args: remote name (or URL) and URL; stdin: `<local ref> <local oid> <remote ref> <remote oid>` lines."""
    handed = _handed_listing()
    if not args:
        if handed is not None:
            os.close(handed)
        return 0
    # the remote lists its refs while git-mgit starts and loads (begun by the hook's shell)
    repo = find_repo()
    listing = push_listing(repo, _listed(repo, args), handed)
    try:
        from git_mgit.transfer.push import Update, describe, pre_push

        updates = [
            Update(*f)
            for f in (line.split() for line in stdin.decode().splitlines())
            if len(f) == 4
        ]
        report = pre_push(repo, args[0], updates, listing)
    finally:
        listing.close()
    if report.published and sys.stderr.isatty():
        print(f"git-mgit: {describe(report)}", file=sys.stderr)
    return 0


def _listed(repo: Repo, args: list[str]) -> str:
    """What the push lists, as the hook's shell chose it (and said in LISTED_ENV) where it
    began the listing: the URL git pushes to (args[1]; git runs the hook once for each of
    a remote's push URLs, and a mirror may lack what the fetch URL holds), by the remote's
    name where that is its fetch URL."""
    chosen = os.environ.pop(LISTED_ENV, "")
    if chosen:
        return chosen
    if len(args) < 2 or repo.git("remote", "get-url", "--", args[0], check=False) == args[1]:
        return args[0]
    return args[1]


def _handed_listing() -> int | None:
    """The descriptor of the listing the hook's shell began (hookfiles.py), if it began
    one; taken out of the environment, so that no git command started here sees it."""
    value = os.environ.pop(LISTING_FD_ENV, "")
    if not value.isdigit():
        return None
    fd = int(value)
    try:
        os.fstat(fd)
    except OSError:
        return None
    return fd
