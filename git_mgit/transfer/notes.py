"""Lineage notes travel with every fetch and push.

They are fetched beside ours (refs/notes/mgit-remotes/<remote>) by the
refspec setup installs, and merged into refs/notes/mgit with `cat_sort_uniq`
(records are sorted, de-duplicated lines), so concurrent edits never conflict.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo, anonymized, remote_file_name

NOTES_REF = "refs/notes/mgit"
NOTES_REMOTES = "refs/notes/mgit-remotes/"
_REF_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._/-]*(?<![/.])")  # a remote's name, as it is
_PUSH_ATTEMPTS = 5


def remote_notes_ref(remote: str) -> str:
    """Where `remote`'s notes are fetched to: under its name, or, for a URL or path given in
    place of a remote's name (`git mgit fetch https://host/repo`), under that URL made one
    ref component (as given, it is no ref name: git refused the fetch)."""
    plain = _REF_NAME.fullmatch(remote) and ".." not in remote and not remote.endswith(".lock")
    return f"{NOTES_REMOTES}{remote if plain else remote_file_name(remote)}"


def notes_refspec(remote: str) -> str:
    """Fetch a remote's lineage notes beside ours (merged by `git mgit fetch` and fetches).

    A glob, because a configured exact refspec fails every fetch from a remote
    that has no notes yet.
    """
    return f"+{NOTES_REF}*:{remote_notes_ref(remote)}*"


def fetch(repo: Repo, remote: str) -> None:
    """Fetch the remote's notes and merge them into ours."""
    repo.git(
        "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote, notes_refspec(remote)
    )
    merge(repo, remote_notes_ref(remote))


def merge(repo: Repo, theirs: str) -> None:
    """Fold fetched notes into refs/notes/mgit (union of sorted unique lines)."""
    if not repo.git("rev-parse", "--verify", "--quiet", theirs, check=False):
        return
    if not repo.git("rev-parse", "--verify", "--quiet", NOTES_REF, check=False):
        repo.git("update-ref", NOTES_REF, theirs)
        return
    repo.git(
        *identity(repo),
        "notes",
        f"--ref={NOTES_REF}",
        "merge",
        "--quiet",
        "-s",
        "cat_sort_uniq",
        theirs,
    )


def merge_fetched(repo: Repo, theirs: str) -> None:
    """merge() after a fetch brought objects: a notes ref another process holds locked (a
    concurrent `git notes`) must not fail the checkout those objects are for. The fetched
    notes stay under `theirs`, and the next fetch merges them."""
    try:
        merge(repo, theirs)
    except MgitError as exc:
        print(
            f"git-mgit: warning: the remote's lineage notes were not merged ({exc}); "
            "`git mgit fetch` merges them later",
            file=sys.stderr,
        )


def identity(repo: Repo) -> list[str]:
    """Notes merges make commits: supply an identity only where git has none."""
    if repo.git("var", "GIT_COMMITTER_IDENT", check=False):
        return []
    return ["-c", "user.name=git-mgit", "-c", "user.email=git-mgit@localhost"]


def push(repo: Repo, remote: str) -> None:
    """Push our notes; when someone else pushed notes meanwhile, merge theirs and retry."""
    if repo.git("rev-parse", "--verify", "--quiet", NOTES_REF, check=False):
        push_retrying(repo, remote, f"{NOTES_REF}:{NOTES_REF}", lambda: fetch(repo, remote))


@contextmanager
def pushed_meanwhile(repo: Repo, remote: str) -> Iterator[None]:
    """Push our notes on a thread of their own while the block runs (a push's tensor
    objects and version refs), and wait for them at its end: the two are independent
    (a note names a commit, which the remote may receive later), and on a network each
    is a few round trips of waiting. A failure of the notes' push is raised after the
    block ends, unless the block raised first."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            push(repo, remote)
        except BaseException as exc:  # raised where the push waits for it, below
            failed.append(exc)

    thread = threading.Thread(target=run, name="mgit-notes", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if failed:
        raise failed[0]


def push_retrying(repo: Repo, remote: str, refspec: str, on_reject: Callable[[], None]) -> None:
    """Push, calling on_reject() and retrying when a concurrent push got in first."""
    for _ in range(_PUSH_ATTEMPTS - 1):
        try:
            repo.git("push", "--quiet", "--no-verify", remote, refspec)
            return
        except GitError:
            on_reject()
    try:
        repo.git("push", "--quiet", "--no-verify", remote, refspec)
    except GitError as exc:
        shown = anonymized(remote)
        raise MgitError(
            f"could not push {refspec} to {shown}: {exc}; run `git mgit push {shown}` again"
        ) from exc
