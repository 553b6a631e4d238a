"""The git-mgit filter: connects git's filter protocol to clean and smudge.

Smudges whose objects are missing are delayed (when git allows it) and
fetched in one batch when git asks which blobs are available, so a clone or
checkout of many model files costs one fetch, not one per file. Fetching is
git_mgit.transfer's business; this module only says which versions.
"""

from __future__ import annotations

import importlib
import sys
import threading
from functools import cached_property
from typing import TYPE_CHECKING, BinaryIO

from git_mgit import config
from git_mgit import manifest as mf
from git_mgit.errors import MgitError
from git_mgit.filters.process import ContentSink, Delayed
from git_mgit.gitcmd import Repo
from git_mgit.smudge import missing_chunks, parse_or_none, smudge
from git_mgit.store.chunkstore import ChunkStore

if TYPE_CHECKING:  # transfer is imported only when objects are missing
    from git_mgit.transfer.fetch import Outcome


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
        from git_mgit.clean import clean  # the clean path's modules: not needed to check out

        self._streaming.set()
        return clean(src, pathname, self.store, self.settings)

    def smudge(self, pathname: str, data: bytes, sink: ContentSink, can_delay: bool) -> None:
        try:
            version, m = self.delayed.pop(pathname, None) or (None, parse_or_none(data, pathname))
            if m is None:
                sink.write(data)
                return
            if missing_chunks(m, self.store):
                from git_mgit.transfer import fetch

                if version is None:
                    version = fetch.version_id(data)
                if can_delay:
                    self.delayed[pathname] = (version, m)
                    raise Delayed(pathname)
                self._fetch({version: m})
                if missing_chunks(m, self.store):
                    outcome = self._outcome or fetch.Outcome()
                    raise fetch.missing_error(pathname, self.store, m, outcome)

            def write(block: memoryview | bytes) -> None:
                sink.write(block)
                self._streaming.set()

            smudge(m, pathname, self.store, write)
        finally:
            self._streaming.set()

    def list_available(self) -> list[str]:
        """Fetch once for every delayed path; hand all of them back.

        Paths whose objects are still missing are handed back too, so that the
        re-sent smudge reports a clear error instead of git waiting forever.
        """
        if self.delayed:
            self._fetch(dict(self.delayed.values()))
        return list(self.delayed)

    def _fetch(self, wanted: dict[str, mf.Manifest]) -> None:
        """One batch; each file still missing objects then fails with the outcome's reason."""
        from git_mgit.transfer import fetch

        self._outcome = fetch.fetch_versions(self.store, wanted)

    def close(self) -> None:
        self._streaming.set()
        self._warm_up.join()
        self.store.close()
