"""Moving tensor objects and lineage notes with plain git fetch and push.

Objects travel as the anchor refs refs/mgit/objects/* (unique names, so
concurrent pushes never conflict); lineage travels as refs/notes/mgit, merged
with `cat_sort_uniq` because its records are sorted, de-duplicated lines.
"""

from __future__ import annotations

from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo
from git_mgit.store.lookup import ANCHOR_PREFIX

NOTES_REF = "refs/notes/mgit"
OBJECTS_REFSPEC = f"+{ANCHOR_PREFIX}*:{ANCHOR_PREFIX}*"
_PUSH_ATTEMPTS = 5


NOTES_REMOTES = "refs/notes/mgit-remotes/"


def remote_notes_ref(remote: str) -> str:
    return f"{NOTES_REMOTES}{remote}"


def notes_refspec(remote: str) -> str:
    """Fetch a remote's lineage notes beside ours (merged by hooks and `git mgit fetch`).

    A glob, because a configured exact refspec fails every fetch from a remote
    that has no notes yet.
    """
    return f"+{NOTES_REF}*:{remote_notes_ref(remote)}*"


def remotes(repo: Repo) -> list[str]:
    return [r for r in repo.git("remote").splitlines() if r]


def default_remote(repo: Repo) -> str | None:
    """The current branch's upstream remote, else origin, else the only remote."""
    branch = repo.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    if branch:
        up = repo.git("config", "--get", f"branch.{branch}.remote", check=False)
        if up and up != ".":
            return up
    names = remotes(repo)
    if "origin" in names:
        return "origin"
    return names[0] if len(names) == 1 else None


def fetch(repo: Repo, remote: str) -> None:
    """Fetch every anchor ref and the remote's lineage notes, then merge the notes."""
    repo.git(
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        remote,
        OBJECTS_REFSPEC,
        notes_refspec(remote),
    )
    merge_notes(repo, remote_notes_ref(remote))


def merge_notes(repo: Repo, theirs: str) -> None:
    """Fold fetched notes into refs/notes/mgit (union of sorted unique lines)."""
    if not repo.git("rev-parse", "--verify", "--quiet", theirs, check=False):
        return
    if not repo.git("rev-parse", "--verify", "--quiet", NOTES_REF, check=False):
        repo.git("update-ref", NOTES_REF, theirs)
        return
    repo.git(
        *_identity(repo),
        "notes",
        f"--ref={NOTES_REF}",
        "merge",
        "--quiet",
        "-s",
        "cat_sort_uniq",
        theirs,
    )


def _identity(repo: Repo) -> list[str]:
    """Notes merges make commits: supply an identity only where git has none."""
    if repo.git("var", "GIT_COMMITTER_IDENT", check=False):
        return []
    return ["-c", "user.name=git-mgit", "-c", "user.email=git-mgit@localhost"]


def push(repo: Repo, remote: str) -> None:
    """Push every anchor ref, then the notes (fetch-merge-retry when someone else pushed)."""
    if repo.git("for-each-ref", "--count=1", ANCHOR_PREFIX):
        repo.git("push", "--quiet", "--no-verify", remote, f"{ANCHOR_PREFIX}*:{ANCHOR_PREFIX}*")
    if not repo.git("rev-parse", "--verify", "--quiet", NOTES_REF, check=False):
        return
    for _ in range(_PUSH_ATTEMPTS):
        try:
            repo.git("push", "--quiet", "--no-verify", remote, f"{NOTES_REF}:{NOTES_REF}")
            return
        except GitError:
            fetch(repo, remote)  # someone else pushed notes: merge theirs, then retry
    raise MgitError(
        f"could not push {NOTES_REF} to {remote}: it kept changing; run `git mgit push {remote}` again"
    )
