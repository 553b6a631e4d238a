"""The git-mgit filter: connects git's filter protocol to clean and smudge.

Smudges whose objects are missing are delayed (when git allows it) and
fetched in one batch when git asks which blobs are available, so a clone or
checkout of many model files costs one fetch, not one per file. Fetching is
git_mgit.transfer's business; this module only says which versions.

Files of at least mgit.directSize are delayed too, and then written around
git's in-memory buffer (git_mgit.worktree): git writes an empty file, the
filter fills it at git's next request, and records its stat data in the
index at git's exit.
"""

from __future__ import annotations

import importlib
import sys
import threading
from functools import cached_property
from typing import TYPE_CHECKING, BinaryIO

from git_mgit import config
from git_mgit.errors import MgitError
from git_mgit.filters.process import ContentSink, Delayed
from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.smudge import missing_chunks, parse_or_none, smudge
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import object_id
from git_mgit.worktree.journal import Journal
from git_mgit.worktree.same import same_as_file

if TYPE_CHECKING:  # transfer is imported only when objects are missing
    from git_mgit.transfer.fetch import Outcome
    from git_mgit.transfer.stores.pointers import Arrived
    from git_mgit.worktree.session import DirectSession


class MgitFilter:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        # Off the path to git's first answer: the codecs' imports (zstd, blake3),
        # and the set-up a fresh clone needs (refspecs, hooks). The set-up waits
        # until the first file streams: its imports and git calls would hold the
        # GIL while the first answer is computed. close() waits for it.
        self._streaming = threading.Event()
        self._warm_up = threading.Thread(target=self._prepare, name="mgit-warm-up")
        self._warm_up.start()
        self.store = ChunkStore(repo)
        self.delayed: dict[str, tuple[str, mf.Manifest]] = {}  # path -> (version, manifest)
        self._outcome: Outcome | None = None  # of the last fetch: why objects are not here
        self.journal = Journal(repo.git_dir)
        self._direct: DirectSession | None = None  # once a large file is checked out

    def _prepare(self) -> None:
        importlib.import_module("git_mgit.codecs.codec")  # and the decoder, which it imports
        self._streaming.wait()
        try:
            from git_mgit import setup

            setup.ensure_repo(self.repo)
        except MgitError as exc:  # a hook problem must never block add or checkout
            print(f"git-mgit: warning: setting up the repository failed: {exc}", file=sys.stderr)

    @cached_property
    def settings(self) -> config.Settings:
        """Read at the first clean: a checkout needs none of them (one `git config` less)."""
        return config.load(self.repo)

    def clean(self, pathname: str, src: BinaryIO) -> bytes:
        from git_mgit.modelfile.clean import (
            clean,  # the clean path's modules: not needed to check out
        )

        self._streaming.set()
        written = self._directly_written(pathname)
        if written is not None and self.repo.worktree is not None:
            same, src = same_as_file(src, self.repo.worktree / pathname)
            if same:  # git's refresh of the file: the journal knows its manifest
                return written
        return clean(src, pathname, self.store, self.settings)

    def _directly_written(self, pathname: str) -> bytes | None:
        """The manifest of a file this tool wrote directly and nobody has touched since.

        git compares its content when the index does not yet have its stat
        data (a refresh before the filter's exit, or after a kill): hashing
        gigabytes again would only say what the journal already knows. The
        content git sends must still be the file's (same_as_file): git cleans
        other bytes under a path too (`git hash-object --path`).
        """
        if self.repo.worktree is None or not self.journal.active():
            return None
        record = self.journal.get(pathname)
        if record is None:
            return None
        if record.matches(self.repo.worktree):
            (blob,) = self.repo.cat_blobs([record.blob])
            return blob
        if not record.finished:
            print(
                f"git-mgit: {pathname}: its checkout did not finish; "
                f"run `git mgit checkout -- {pathname}`",
                file=sys.stderr,
            )
        return None

    def _large(self, m: mf.Manifest) -> bool:
        """Whether `m`'s file goes around git's buffer (mgit.directSize)."""
        if m.size < config.MIN_DIRECT_SIZE or self.repo.worktree is None:
            return False  # no `git config` for small files
        return 0 < self.settings.direct_size <= m.size

    def smudge(self, pathname: str, data: bytes, sink: ContentSink, can_delay: bool) -> None:
        try:
            version, m = self.delayed.pop(pathname, None) or (None, parse_or_none(data, pathname))
            if m is None:
                sink.write(data)
                return
            retried = version is not None
            large = self._large(m)
            missing = bool(missing_chunks(m, self.store))
            if version is None and (missing or large):
                version = object_id("blob", [data]).hex()  # the version's name: its blob id
            if can_delay and (large or missing):
                self.delayed[pathname] = (version, m)
                raise Delayed(pathname)
            if missing:
                from git_mgit.transfer import fetch

                if not retried:  # a delayed file was fetched for: its outcome says why not
                    self._fetch({version: m})
                if missing_chunks(m, self.store):
                    outcome = self._outcome or fetch.Outcome()
                    raise fetch.missing_error(pathname, self.store, m, outcome)

            if retried and large:
                sink.write(self._session().place(pathname, version, m))
                return
            if self.journal.active():
                self.journal.drop(pathname)  # git writes this file itself now

            def write(block: memoryview | bytes) -> None:
                sink.write(block)
                self._streaming.set()

            smudge(m, pathname, self.store, write)
        finally:
            self._streaming.set()

    def _session(self) -> DirectSession:
        if self._direct is None:
            from git_mgit.worktree.session import DirectSession

            self._direct = DirectSession(self.repo, self.store)
        return self._direct

    def settle(self) -> None:
        """git has written the empty files answered so far: write the models into them."""
        if self._direct is not None:
            self._direct.write_placed()

    def list_available(self) -> list[str]:
        """Fetch once for every delayed path; hand all of them back.

        Paths whose objects are still missing are handed back too, so that the
        re-sent smudge reports a clear error instead of git waiting forever.
        """
        missing = {p: (v, m) for p, (v, m) in self.delayed.items() if missing_chunks(m, self.store)}
        if missing:
            from git_mgit.worktree.staging import Staging

            # the large ones are decoded as their objects arrive, while the rest download
            staging = Staging(self.repo, {p: m for p, (_, m) in missing.items() if self._large(m)})
            try:
                self._fetch({v: m for v, m in missing.values()}, staging.arrived)
            finally:
                if staged := staging.finish():
                    self._session().stage(staged)
        return list(self.delayed)

    def _fetch(self, wanted: dict[str, mf.Manifest], arrived: Arrived | None = None) -> None:
        """One batch; each file still missing objects then fails with the outcome's reason.

        Whatever goes wrong is that reason: raised from list_available() it would fail every
        delayed file at once, those whose objects came included, in a line naming none."""
        from git_mgit.transfer import fetch

        try:
            self._outcome = fetch.fetch_versions(self.store, wanted, arrived=arrived)
        except Exception as exc:
            why = str(exc) if isinstance(exc, MgitError) else f"{type(exc).__name__}: {exc}"
            self._outcome = fetch.Outcome(failed={"": why})

    def close(self) -> None:
        """At git's exit (it waits for us): finish direct writes, give the index their stat data."""
        self._streaming.set()
        try:
            if self._direct is not None:
                self._direct.finish()
        except (MgitError, OSError) as exc:  # the files are written; git refreshes the index
            print(f"git-mgit: recording checked-out files in the index: {exc}", file=sys.stderr)
        finally:
            self._warm_up.join()
            self.store.close()
