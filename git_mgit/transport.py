"""Moving tensor objects and lineage notes with plain git fetch and push.

Objects travel as the anchor refs refs/mgit/objects/* (unique names, so
concurrent pushes never conflict); lineage travels as refs/notes/mgit, merged
with `cat_sort_uniq` because its records are sorted, de-duplicated lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from git_mgit import hashing
from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import ANCHOR_PREFIX
from git_mgit.store.packwriter import PackWriter
from git_mgit.tracked import needed_hashes

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


def _push_needed(repo: Repo, remote: str, revs: Sequence[str]) -> None:
    store = ChunkStore(repo)
    try:
        needed = needed_hashes(store, [*revs, "--not", f"--remotes={remote}"])
        missing = [h for h in needed if not store.locate(h)]
        if missing:
            raise MgitError(
                f"{needed[missing[0]]}: cannot push: {len(missing)} tensor object(s) are not in this clone "
                f"(e.g. {hashing.to_text(missing[0])}); run `git mgit fetch` first, "
                "or `git push --no-verify` to push the commits without them"
            )
        if not needed:
            return
        # One anchor named by exactly these objects: the push sends what the
        # remote lacks of them, and re-pushing the same set creates nothing new.
        objects = sorted((h, bytes.fromhex(store.locate(h)[0])) for h in needed)
        pack = PackWriter(repo.objects_dir)
        commit = anchors.write_anchor(pack, objects, timestamp=0)
        pack.finish()
        ref = anchors.set_ref(repo, commit)
    finally:
        store.close()
    # A clone pushing the same objects at the same moment creates the same ref:
    # its push wins the race, ours then finds the ref up to date.
    _push_retrying(repo, remote, f"{ref}:{ref}", lambda: None)


def _identity(repo: Repo) -> list[str]:
    """Notes merges make commits: supply an identity only where git has none."""
    if repo.git("var", "GIT_COMMITTER_IDENT", check=False):
        return []
    return ["-c", "user.name=git-mgit", "-c", "user.email=git-mgit@localhost"]


def push(repo: Repo, remote: str, revs: Sequence[str] | None = None) -> None:
    """Push tensor objects, then the notes (fetch-merge-retry when someone else pushed).

    With `revs` (what pre-push is about to send), push exactly the objects the
    manifests in those commits need and the remote may lack, and refuse if
    this clone lacks any; without, push every anchor ref.
    """
    if revs is None:
        if repo.git("for-each-ref", "--count=1", ANCHOR_PREFIX):
            repo.git("push", "--quiet", "--no-verify", remote, f"{ANCHOR_PREFIX}*:{ANCHOR_PREFIX}*")
    elif revs:
        _push_needed(repo, remote, revs)
    if repo.git("rev-parse", "--verify", "--quiet", NOTES_REF, check=False):
        # Someone else pushed notes meanwhile: merge theirs, then retry.
        _push_retrying(repo, remote, f"{NOTES_REF}:{NOTES_REF}", lambda: fetch(repo, remote))


def _push_retrying(repo: Repo, remote: str, refspec: str, on_reject: Callable[[], None]) -> None:
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
        raise MgitError(
            f"could not push {refspec} to {remote}: {exc}; run `git mgit push {remote}` again"
        ) from exc
