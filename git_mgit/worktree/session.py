"""The filter's side of direct writes, across the requests of one git command.

1. smudge of a large file that git lets us delay: delay it (even when its
   objects are here), so git asks again from its delayed-checkout loop;
2. the re-sent smudge: record the write as started, answer an empty file;
3. git's next request (it always asks which blobs are available once more
   after the last re-sent smudge, before it writes the index): git has
   written the empty file by now, so fill it with the model;
4. git's exit (it closes our stdin and waits for us): record the written
   files' stat data in the index git has just written.

The placeholder is empty because git never trusts a recorded size of 0 for
a blob that is not empty: until step 4 gives the index the real stat data,
git compares content, and the clean filter says whether the file is the
committed one. So a kill at any point, even before step 3 starts, leaves a
file git does not take for the committed one unless the write had finished.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore

from .gitindex import IndexBusy, record_stats
from .journal import Journal, Record, stat_key
from .staging import Staged
from .write import failure, write_model


@dataclass(frozen=True)
class Placed:
    blob: str
    manifest: mf.Manifest


class DirectSession:
    def __init__(self, repo: Repo, store: ChunkStore) -> None:
        if repo.worktree is None:
            raise MgitError("direct checkout needs a working tree")
        self.repo, self.store = repo, store
        self.journal = Journal(repo.git_dir)
        self.placed: dict[str, Placed] = {}
        self.written: dict[str, tuple[str, os.stat_result]] = {}
        self.staged: dict[str, Staged] = {}  # copies decoded while their objects came

    def stage(self, staged: dict[str, Staged]) -> None:
        """Files decoded (in part) while their objects downloaded, for their writes."""
        for path, copy in staged.items():
            old = self.staged.pop(path, None)
            if old is not None:
                old.discard()
            self.staged[path] = copy

    def place(self, path: str, blob: str, m: mf.Manifest) -> bytes:
        """Step 2: what git writes now (nothing); the model follows at git's next request."""
        self.journal.put(Record(path, blob, None))
        self.written.pop(path, None)
        self.placed[path] = Placed(blob, m)
        return b""

    def write_placed(self) -> None:
        """Step 3. A failed file is removed and named in one line with what to run."""
        while self.placed:
            path, p = next(iter(self.placed.items()))
            del self.placed[path]
            try:
                staged = self.staged.pop(path, None)
                if staged is not None and staged.manifest is not p.manifest:
                    staged.discard()
                    staged = None
                self.written[path] = write_recorded(
                    self.repo,
                    self.journal,
                    path,
                    p.blob,
                    p.manifest,
                    self.store,
                    placeholder=True,
                    staged=staged,
                )
            except Exception as exc:  # a full disk, a bad object, a bug: the next file still goes
                print(f"git-mgit: {failure(path, exc)}", file=sys.stderr, flush=True)

    def finish(self) -> None:
        """Step 4, at git's exit: the index git wrote gets the written files' stat data."""
        try:
            self.write_placed()
        finally:
            for copy in self.staged.values():  # files git did not ask for after all
                copy.discard()
            self.staged.clear()
        record_written(self.repo, self.journal, self.written)
        self.written.clear()


def write_recorded(
    repo: Repo,
    journal: Journal,
    path: str,
    blob: str,
    m: mf.Manifest,
    store: ChunkStore,
    staged: Staged | None = None,
    **how: bool,
) -> tuple[str, os.stat_result]:
    """write_model() into the worktree, then the journal record marked finished:
    (blob, stat) for record_written(). `how`: write_model's keyword options."""
    assert repo.worktree is not None
    st = write_model(repo.worktree / path, path, m, store, staged=staged, **how)
    journal.put(Record(path, blob, stat_key(st)))
    return blob, st


def record_written(
    repo: Repo, journal: Journal, written: dict[str, tuple[str, os.stat_result]]
) -> None:
    """Patch the index; drop the journal records it now vouches for.

    Records of files the index could not take (busy lock, split index, the
    entry changed meanwhile) stay: the clean filter uses them to answer
    git's own refresh without hashing the file.
    """
    if not written:
        return
    fmt, index = repo.git(
        "rev-parse", "--show-object-format", "--path-format=absolute", "--git-path", "index"
    ).splitlines()
    try:
        done = record_stats(Path(index), written, 32 if fmt == "sha256" else 20)
    except IndexBusy:
        done = set()
    for name in done:
        journal.drop(name)
