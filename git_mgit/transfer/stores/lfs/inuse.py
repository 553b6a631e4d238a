"""Whether this repository already uses Git LFS: what `mgit.store auto` takes as a sign that a
remote which is not on a known host still has an LFS endpoint.

git-lfs sends every object a push brings to the LFS endpoint of the remote
pushed to, and stops the push where there is none. A repository whose files
git-lfs tracks, or whose objects it keeps, therefore only pushes to remotes
with an endpoint: a self-hosted GitLab, Gitea or Bitbucket Server moving
from git-lfs to git-mgit keeps its tensors where its other large files are,
with nothing to configure. The signs, in order, each read from local files
(no request, no git process):

1. `lfs.<endpoint>.access` in git config: git-lfs has authenticated to that
   very endpoint (it writes the key after its first request there);
2. a `filter=lfs` line in the work tree's top-level `.gitattributes` or in
   `.git/info/attributes` (patterns `git mgit track` took over from git-lfs
   are git-mgit's now: a Hub repository keeps two dozen others);
3. objects in `.git/lfs/objects` (a clone that git-lfs smudged, before the
   take-over removed its last pattern).

A remote with no endpoint git-lfs could use (a local path, file://) is never
asked: git-lfs talks to those through its standalone adapter.
"""

from __future__ import annotations

import os
from pathlib import Path

from git_mgit.gitcmd import Repo
from git_mgit.setup import attribute_line
from git_mgit.transfer.stores.lfs.endpoint import Endpoint
from git_mgit.transfer.stores.lfs.gitconfig import LfsConfig


def uses_lfs(repo: Repo, endpoint: Endpoint, config: LfsConfig) -> str | None:
    """Why this repository's own use of git-lfs says `endpoint` serves LFS (for
    `git mgit store`), or None where nothing does."""
    key = f"lfs.{endpoint.url}.access"
    if config.get(key):
        return f"git-lfs has used its LFS endpoint (git config {key})"
    for where in _attributes(repo):
        if _tracks(where):
            return f"this repository tracks files with git-lfs (filter=lfs in {where.name})"
    if _holds_objects(repo.common_dir / "lfs" / "objects"):
        return "git-lfs keeps objects of this repository (.git/lfs/objects)"
    return None


def _attributes(repo: Repo) -> list[Path]:
    found = [repo.common_dir / "info" / "attributes"]
    if repo.worktree is not None:
        found.insert(0, repo.worktree / ".gitattributes")
    return found


def _tracks(path: Path) -> bool:
    """A line of `path` that sets git-lfs's filter on a pattern."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any("filter=lfs" in attribute_line(line)[1] for line in text.splitlines())


def _holds_objects(objects: Path) -> bool:
    """git-lfs files each object under two levels of folders (`ab/cd/abcd...`)."""
    try:
        with os.scandir(objects) as top:
            for first in top:
                if first.is_dir():
                    with os.scandir(first.path) as second:
                        if any(second):
                            return True
    except OSError:
        pass
    return False
