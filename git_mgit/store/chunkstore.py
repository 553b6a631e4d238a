"""The chunk store: content-addressed, delta-encoded chunks in git's object database.

Writes go into one pack per batch and become visible (and safe from `git gc`)
when flush() finishes the pack and creates the batch's anchor ref. Reads come
straight from the packs where they can (packreader) and through
`git cat-file` otherwise; they decode delta chains from their full base upward so
memory holds at most a base, a result and one encoded object, and verify
every chunk's BLAKE3.
"""

from __future__ import annotations

from git_mgit import codecs, hashing
from git_mgit.codecs.objectformat import parse_header
from git_mgit.errors import ObjectCorrupt, ObjectMissing
from git_mgit.gitcmd import Repo
from git_mgit.store import anchors
from git_mgit.store.lookup import LookupCache
from git_mgit.store.packreader import PackReader
from git_mgit.store.packwriter import PackWriter
from git_mgit.store.reader import ObjectReader


class ChunkStore:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.cache = LookupCache(repo)
        self.reader = ObjectReader(repo.worktree or repo.git_dir)
        self.packs = PackReader(repo.objects_dir)
        self._pack: PackWriter | None = None
        self._pending: dict[bytes, tuple[bytes, int]] = {}
        self._refreshed = False

    # -- lookup ---------------------------------------------------------------
    def locate(self, content_hash: bytes) -> tuple[str, int] | None:
        """(oid, stored size) of the object holding this chunk, if it is local."""
        if content_hash in self._pending:
            oid, size = self._pending[content_hash]
            return oid.hex(), size
        if not self._refreshed:
            # Once per process: index new anchors, drop the cache if one vanished.
            self._refreshed = True
            self.cache.refresh()
        return self.cache.get(content_hash)

    def has(self, content_hash: bytes) -> bool:
        return self.locate(content_hash) is not None

    def missing(self, hashes: list[bytes]) -> list[bytes]:
        return [h for h in dict.fromkeys(hashes) if not self.has(h)]

    def invalidate(self) -> None:
        """Forget that the anchors were scanned (after a fetch brought new ones)."""
        self._refreshed = False

    # -- writing --------------------------------------------------------------
    def put(self, content_hash: bytes, encoded: codecs.Encoded) -> None:
        if self._pack is None:
            self._pack = PackWriter(self.repo.objects_dir)
        oid = self._pack.add("blob", encoded.parts)
        self._pending[content_hash] = (oid, encoded.size)
        hdr = encoded.header
        self.cache.set_chain(content_hash, hdr.base_hash, hdr.depth)

    def flush(self) -> None:
        """Make pending objects visible to git and anchored against gc."""
        pack, pending = self._pack, self._pending
        if pack is None:
            return
        self._pack, self._pending = None, {}
        try:
            commit = anchors.write_anchor(pack, [(h, oid) for h, (oid, _) in pending.items()])
            pack.finish()
        except BaseException:
            pack.abort()
            raise
        anchors.set_ref(self.repo, commit)
        self.cache.add(((h, oid.hex(), size) for h, (oid, size) in pending.items()), commit)

    # -- reading --------------------------------------------------------------
    def read_object(self, content_hash: bytes) -> bytearray:
        if content_hash in self._pending:
            self.flush()  # a delta base from this very batch: make it readable
        loc = self.locate(content_hash)
        data = None
        if loc is not None:
            data = self.packs.read(loc[0])
            if data is None:
                data = self.reader.read(loc[0])
        if data is None:
            raise ObjectMissing(f"object {hashing.to_text(content_hash)} is not in this repository")
        return data

    def chain_of(self, content_hash: bytes) -> tuple[bytes | None, int]:
        """(delta base, depth) of a chunk's object, reading its header if not cached."""
        known = self.cache.chain(content_hash)
        if known is None:
            hdr = parse_header(self.read_object(content_hash))
            known = (hdr.base_hash, hdr.depth)
            self.cache.set_chain(content_hash, *known)
        return known

    def get_raw(self, content_hash: bytes, top: bytearray | None = None) -> bytearray:
        """Decode a chunk, resolving its delta chain bottom-up; verifies every level.

        `top` is the chunk's own object if the caller already read it (read-ahead).
        """
        if top is None:
            top = self.read_object(content_hash)
        hdr = parse_header(top)
        if self.cache.chain(content_hash) is None:
            self.cache.set_chain(content_hash, hdr.base_hash, hdr.depth)
        chain: list[bytes] = []
        base = hdr.base_hash
        while base is not None:
            if base == content_hash or base in chain or len(chain) > 255:
                raise ObjectCorrupt(
                    f"object {hashing.to_text(content_hash)} has a cyclic delta chain"
                )
            chain.append(base)
            base = self.chain_of(base)[0]
        raw: bytearray | None = None
        for h in reversed(chain):
            raw = codecs.decode(self.read_object(h), lambda _h, b=raw: b, expected_hash=h)
        return codecs.decode(top, lambda _h: raw, expected_hash=content_hash)

    def close(self) -> None:
        self.flush()
        self.reader.close()
        self.packs.close()
        self.cache.close()
