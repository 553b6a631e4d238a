"""`git push` of git-mgit's own refs: never our hook again, and what a refusal means.

Whatever the remote says when it refuses (its `remote:` lines, a hook's
message) reaches the user (remotes.transfer prints it), followed by one line
on what to do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from git_mgit import config
from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo, anonymized
from git_mgit.store import anchors
from git_mgit.transfer.remotes import ls_remote, transfer

PAD_PREFIX = "refs/mgit/pad/"
PAD_OBJECTS = 100  # git's default receive.unpackLimit
PAD_FROM = 1 << 20  # pushes of fewer object bytes stay as they are: loose is cheap there
_ATTEMPTS = 3  # pushes of a batch that raced another clone's
_MARGIN = 0.95  # of mgit.maxPushSize: what git adds to our estimate stays under it
# What hosts say when they refuse large or binary files in git (the Hub, GitHub, GitLab,
# Bitbucket, a size hook).
_TOO_LARGE = (
    "larger than",
    "exceeds",
    "git-lfs",
    "git lfs",
    "large file",
    "file size limit",
    "binary files",
    "/xet",
)


def push_limit(repo: Repo) -> int:
    """The most object bytes one `git push` may carry (mgit.maxPushSize, less a margin)."""
    return int(config.load(repo).max_push_size * _MARGIN)


def push(repo: Repo, remote: str, specs: Sequence[str], payload: int = 0) -> None:
    """One `git push --no-verify` of `specs`; padded when it carries `payload` bytes of tensor
    objects (see refs.py). Raises MgitError: git's reason and what to do."""
    specs = list(specs)
    if payload >= PAD_FROM:
        specs.append(f"+{_pad(repo)}:{PAD_PREFIX}{_clone_id(repo)}")
    try:
        transfer(repo, "push", "--no-verify", remote, *specs)
    except GitError as exc:
        shown = anonymized(remote)
        raise MgitError(f"pushing tensor objects to {shown} failed ({exc}); {hint(exc)}") from exc


def hint(exc: GitError) -> str:
    """What to do about a refused push, from what git and the remote said."""
    said = exc.detail.lower()
    if "exceeds maximum allowed size" in said:
        return "the remote refused the pack's size: lower `git config mgit.maxPushSize`"
    if any(word in said for word in _TOO_LARGE):
        return (
            "the remote refuses large files in git: keep tensor objects in its Git LFS store "
            "(`git config mgit.store lfs`) or a bucket (`git config mgit.store s3://bucket/prefix`)"
        )
    return "run the push again: it resumes where it stopped"


def push_refs(repo: Repo, remote: str, names: Sequence[str], payload: int = 0) -> bool:
    """Force-push refs of the same name; True if a push carried them.

    Another clone publishing one of them at the same moment makes git refuse
    ours: its ref is as good (the same version, complete), so what the remote
    then has counts as done and the rest is pushed again.
    """
    todo = list(names)
    for attempt in range(_ATTEMPTS):
        if not todo:
            return False
        try:
            push(repo, remote, [f"+{name}:{name}" for name in todo], payload)
            return True
        except MgitError:
            if attempt + 1 == _ATTEMPTS:
                raise
            there = ls_remote(repo, remote, *todo)
            todo = [name for name in todo if name not in there]
    return False


def _pad(repo: Repo) -> str:
    """A commit of PAD_OBJECTS blobs no remote has yet (unique to this push)."""
    nonce = f"{time.time_ns()} {os.getpid()}"
    blobs = [f"git-mgit pad {nonce} {i}\n".encode() for i in range(PAD_OBJECTS)]
    return anchors.commit_blobs(repo, blobs, "git-mgit pad: keeps a push a pack on the remote\n")


def _clone_id(repo: Repo) -> str:
    """A random name for this clone, made once (.git/mgit/clone-id)."""
    path = repo.mgit_dir / "clone-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.write_text(os.urandom(8).hex() + "\n")
        return path.read_text().strip()
