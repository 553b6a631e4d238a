"""The chunk store: content-addressed, delta-encoded chunks in git's object database.

Writes go into one pack per batch and become visible (and safe from `git gc`)
when flush() finishes the pack and creates the batch's anchor ref. Reads come
straight from the packs where they can (packreader: any byte range of an
object) and through `git cat-file` otherwise (the whole object). A chunk is
decoded block by block through its whole delta chain (codecs.decoder), every
level's BLAKE3 verified.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from git_mgit import codecs, hashing
from git_mgit.errors import ObjectCorrupt, ObjectMissing
from git_mgit.gitcmd import Repo
from git_mgit.store.lookup import LookupCache
from git_mgit.store.packreader import PackReader
from git_mgit.store.reader import ObjectReader

if TYPE_CHECKING:  # the codecs import zstandard and blake3: only when a chunk is read
    from git_mgit.codecs.decoder import ChunkDecoder, Level, Source
    from git_mgit.codecs.planes import Buffer
    from git_mgit.store.packwriter import PackWriter


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
            from git_mgit.store.packwriter import PackWriter  # writing only: not on checkout's path

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
        from git_mgit.store import anchors

        try:
            commit = anchors.write_anchor(pack, [(h, oid) for h, (oid, _) in pending.items()])
            pack.finish()
        except BaseException:
            pack.abort()
            raise
        anchors.set_ref(self.repo, commit)
        self.cache.add(((h, oid.hex(), size) for h, (oid, size) in pending.items()), commit)

    # -- reading --------------------------------------------------------------
    def source(self, content_hash: bytes) -> Source:
        """Random access to the object holding this chunk: from its pack, or through git."""
        if content_hash in self._pending:
            self.flush()  # a delta base from this very batch: make it readable
        loc = self.locate(content_hash)
        if loc is not None:
            blob = self.packs.open(loc[0])
            if blob is not None:
                return blob
            data = self.reader.read(loc[0])
            if data is not None:
                return codecs.BytesSource(data)
        raise ObjectMissing(f"object {hashing.to_text(content_hash)} is not in this repository")

    def level(self, content_hash: bytes) -> Level:
        """The chunk's object, header read and checked against the name it is filed under."""
        level = codecs.Level(self.source(content_hash))
        hdr = level.header
        if hdr.content_hash != content_hash:
            raise ObjectCorrupt(
                f"object is filed as {hashing.to_text(content_hash)} but holds "
                f"{hashing.to_text(hdr.content_hash)}"
            )
        if self.cache.chain(content_hash) is None:
            self.cache.set_chain(content_hash, hdr.base_hash, hdr.depth)
        return level

    def chain_of(self, content_hash: bytes) -> tuple[bytes | None, int]:
        """(delta base, depth) of a chunk's object, reading its header if not cached."""
        known = self.cache.chain(content_hash)
        if known is None:
            hdr = self.level(content_hash).header
            known = (hdr.base_hash, hdr.depth)
        return known

    def decoder(
        self, content_hash: bytes, known: tuple[bytes, Buffer] | None = None
    ) -> ChunkDecoder:
        """The chunk's delta chain, ready to decode block by block.

        `known` is (content hash, verified bytes) of a chunk the caller holds:
        the chain stops there instead of decoding it again.
        """
        levels: list[Level] = []
        h: bytes | None = content_hash
        while h is not None:
            if h in (lv.header.content_hash for lv in levels) or len(levels) > 255:
                raise ObjectCorrupt(
                    f"object {hashing.to_text(content_hash)} has a cyclic delta chain"
                )
            levels.append(self.level(h))
            h = levels[-1].header.base_hash
            if known is not None and h == known[0]:
                return codecs.ChunkDecoder(levels[::-1], known[1])
        return codecs.ChunkDecoder(levels[::-1])

    def get_raw(self, content_hash: bytes) -> bytearray:
        """Decode a whole chunk, verifying every level of its delta chain."""
        return codecs.decode_all(self.decoder(content_hash))

    def close(self) -> None:
        self.flush()
        self.reader.close()
        self.packs.close()
        self.cache.close()
