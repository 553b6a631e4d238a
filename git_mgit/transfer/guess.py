"""A fresh clone's version refs fetched by name while the remote is still being listed.

A fetch lists the remote's version refs first, then fetches the closure it
needs: two exchanges with the remote, one after the other (over HTTP, two
runs of the server's git; on loopback 0.07 s and 0.13 s of a 54 MiB LFS
clone). In a fresh clone the versions wanted are the checkout's, and the
refs of a version are named after it: `refs/mgit/v/<version>` for a pushed
tip (published whole), `refs/mgit/v/<version>.<bases>` for a delta (a
fine-tune of a base in the same commit, an older commit). So a fresh clone
fetches `refs/mgit/v/<version>*` for each (a glob: a version the remote
lacks fails nothing), and the lineage notes, beside the listing, offering
no haves where the clone has no notes either: it then holds nothing those
refs reach (git's default offers the branch's commits in vain and takes a
second round trip for it, 0.05 s on loopback), in protocol v0 (remotes.py:
the advertisement answers the names, where v2 asks `ls-refs` first; 0.119 s
-> 0.077 s for that fetch from giftless's git on loopback). The
listing still runs (commands that stay offline read what it recorded) and
decides: what the guess brought counts as here, the rest of the closure (a
delta's bases) is fetched as before.

Better still, a fresh checkout's filter begins both before it loads
(`ahead`): the remote answers while Python imports (0.1-0.2 s each, side
by side, on a small VM). The versions are not asked for yet then, but they
are among the blobs of HEAD's tree (a manifest's blob id names its
version): the small ones are guessed, unless there are too many, and then
the fetch takes one exchange, by object id, after the listing. Fresh means
no index yet (a clone's checkout writes it at the end) and no `.git/mgit`
(git-mgit never ran here); the remote is the default one.

Only over HTTP(S), and never interactively: neither may ask for a password
beside the other work (git's prompts and askpass are off, and Git
Credential Manager's windows); without stored credentials they fail and the
fetch lists again, asking, as before.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterable

from git_mgit.errors import MgitError
from git_mgit.gitcmd import NO_PROMPT, GitError, Repo
from git_mgit.store import keep
from git_mgit.store.lookup import VERSION_PREFIX
from git_mgit.transfer import notes
from git_mgit.transfer.remotes import (
    KEEP_PACKS,
    NO_MAINTENANCE,
    Listing,
    default_remote,
    fetch_listing,
    protocol,
    remembered,
)

_MANIFEST_SIZE = 1 << 20  # the blobs that may be manifests: no larger than this
_GUESSES = 256  # a tree with more of them is not guessed from
_LISTING_WAIT = 2.0  # seconds a listing no fetch took may still take, at the filter's end


class Guessed:
    """The guessed fetch, under way: wait() ends it, and keeps the pack it brought out of
    git's automatic repacks, as an on-demand fetch's is (store/keep.py)."""

    def __init__(self, repo: Repo, argv: list[str]) -> None:
        self._objects_dir = repo.objects_dir
        self._before: set[str] | None = keep.packs(self._objects_dir)
        self._proc = subprocess.Popen(
            argv,
            cwd=repo.cwd,
            env={**os.environ, **NO_PROMPT},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait(self) -> None:
        """Its outcome does not matter: the listing decides what is fetched."""
        self._proc.wait()
        if self._before is not None:
            before, self._before = self._before, None
            keep.mark_new(self._objects_dir, before)


def begin(repo: Repo, remote: str, url: str, versions: Iterable[str]) -> Guessed | None:
    """Start fetching the versions' refs from `remote` (at `url`), if it is reached over
    HTTP(S) and this clone has no version ref yet."""
    names = [f"{VERSION_PREFIX}{v}*" for v in versions]
    if not names or not url.startswith(("http://", "https://")):
        return None
    # refnames sort version refs before notes: the first says whether either is here
    lineage = (notes.NOTES_REF, notes.NOTES_REMOTES)
    first = repo.git("for-each-ref", "--count=1", "--format=%(refname)", VERSION_PREFIX, *lineage)
    if first.startswith(VERSION_PREFIX):
        return None
    # nothing here reaches what it fetches, unless notes are: then they are worth offering
    negotiation = () if first else ("-c", "fetch.negotiationAlgorithm=noop")
    return Guessed(
        repo,
        ["git", *KEEP_PACKS, *protocol(repo, remote), *negotiation, "fetch", "--quiet"]
        + ["--no-tags", "--no-write-fetch-head", NO_MAINTENANCE]
        + [remote]
        + [f"+{name}:{name}" for name in names]
        + [notes.notes_refspec(remote)],  # a glob: a remote without notes fails nothing
    )


class Ahead:
    """The listing a fresh checkout began before its filter loaded, until a fetch takes it."""

    def __init__(self) -> None:
        self._started: threading.Thread | None = None
        self._repo: Repo | None = None
        self._listings: dict[str, Listing] = {}
        self._guesses: dict[str, Guessed] = {}

    def begin(self, repo: Repo) -> None:
        """Start it, if this is a fresh checkout from a remote over HTTP(S): on a thread,
        which waits on git while the filter imports."""
        fresh = not (repo.git_dir / "index").exists() and not (repo.common_dir / "mgit").exists()
        if fresh and repo.worktree is not None:
            self._repo = repo
            self._started = threading.Thread(target=self._list, args=(repo,), daemon=True)
            self._started.start()

    def take(self, remote: str) -> tuple[Listing | None, Guessed | None]:
        """The listing of `remote` begun ahead and the guess begun beside it (wait() on it),
        once each; None where there is none."""
        if self._started is not None:
            self._started.join()
        return self._listings.pop(remote, None), self._guesses.pop(remote, None)

    def drop(self) -> None:
        """End what no fetch took. A guess no fetch took still brought the lineage notes
        (the objects came with it, before a file asked: nothing was left to fetch), so
        they are merged here, as a fetch would have; and its listing, once it answers
        (it began with the filter), is what offline commands read of the remote."""
        if self._started is not None:
            self._started.join()
        for listing in self._listings.values():
            if self._repo is not None and listing.wait(_LISTING_WAIT):
                with contextlib.suppress(MgitError):  # unreachable: nothing to record
                    remembered(self._repo, listing)
            listing.close()
        self._listings.clear()
        for remote, guessed in self._guesses.items():
            guessed.wait()  # it only brings refs; their fetch is short
            if self._repo is not None:
                with contextlib.suppress(GitError):  # the next fetch merges them then
                    notes.merge(self._repo, notes.remote_notes_ref(remote))
        self._guesses.clear()

    def _list(self, repo: Repo) -> None:
        # best effort: a fetch that finds no listing here lists the remote itself
        with contextlib.suppress(Exception):
            remote = default_remote(repo)
            url = repo.git("remote", "get-url", remote) if remote else ""
            if remote and url.startswith(("http://", "https://")):
                guessed = begin(repo, remote, url, _small_blobs(repo))
                if guessed is not None:
                    self._guesses[remote] = guessed
                self._listings[remote] = fetch_listing(repo, remote, NO_PROMPT)


def _small_blobs(repo: Repo) -> list[str]:
    """The blobs of HEAD's tree that may be manifests; none if there are too many."""
    try:
        listing = repo.git_bytes("ls-tree", "-r", "-l", "-z", "HEAD")
    except GitError:  # an unborn HEAD: nothing to check out
        return []
    blobs: dict[str, None] = {}  # each once: a tree may hold one blob many times
    for entry in listing.split(b"\0"):
        fields = entry.partition(b"\t")[0].split()  # mode, type, id, size
        if len(fields) == 4 and fields[1] == b"blob" and int(fields[3]) <= _MANIFEST_SIZE:
            blobs[fields[2].decode()] = None
    return list(blobs) if len(blobs) <= _GUESSES else []


ahead = Ahead()  # the filter process's (one repository, one fresh checkout)
