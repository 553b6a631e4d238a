"""The chunk store: content-addressed, delta-encoded chunks in git's object database.

Writes go into one pack per batch and become visible (and safe from `git gc`)
when flush() finishes the pack and creates the batch's anchor ref. Reads come
straight from the packs where they can (packreader: any byte range of an
object) and through `git cat-file` otherwise (the whole object). A chunk is
decoded block by block through its whole delta chain (codecs.decoder), every
level's BLAKE3 verified.

A chunk may be held by several objects (this clone's forward delta and the
whole object a push published, or another clone's encoding fetched with a
version): reads take the one with the shortest chain, chosen so that no chain
can lead back to where it started.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_mgit import codecs, hashing
from git_mgit.errors import ObjectCorrupt, ObjectMissing
from git_mgit.gitcmd import Repo, env_for
from git_mgit.store.lookup import LookupCache
from git_mgit.store.packreader import PackReader
from git_mgit.store.reader import ObjectReader

if TYPE_CHECKING:  # the codecs import zstandard and blake3: only when a chunk is read
    from git_mgit.codecs.decoder import ChunkDecoder, Level, Source
    from git_mgit.codecs.objectformat import ObjectHeader
    from git_mgit.codecs.planes import Buffer
    from git_mgit.store.packwriter import PackWriter


@dataclass(frozen=True)
class Located:
    """The object a read of a chunk takes: one of the objects holding it."""

    oid: str
    size: int  # stored bytes
    base: bytes | None  # its delta base's content hash; None when standalone
    depth: int  # levels below it on the chain the reads take (0: standalone)


@dataclass(frozen=True)
class _Written:
    """An object put() wrote into the pack under way, as flush() files it."""

    oid: bytes
    size: int
    base: bytes | None  # its header's delta base, None when standalone
    depth: int
    sha256: bytes  # of its bytes: its name in a Git LFS or S3 store


class ChunkStore:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.cache = LookupCache(repo)
        self.reader = ObjectReader(repo.cwd)
        self.packs = PackReader(repo.objects_dir)
        self._pack: PackWriter | None = None
        self._pending: dict[bytes, _Written] = {}  # content hash -> object, until flush()
        self._resolved: dict[bytes, Located | None] = {}
        self._refreshed = False
        # Objects read from another repository's packs while they are copied here.
        self._borrowed: dict[bytes, list[tuple[str, int]]] = {}
        # Where objects are read: this repository's packs and git, then each lender's.
        self._sources: list[tuple[PackReader, ObjectReader]] = [(self.packs, self.reader)]
        self._copies: list[Callable[[], None]] = []

    # -- lookup ---------------------------------------------------------------
    def _refresh_once(self) -> None:
        if not self._refreshed:
            # Once per process: index new refs, drop the cache if one vanished.
            self._refreshed = True
            self.cache.refresh()

    def locate(self, content_hash: bytes) -> tuple[str, int] | None:
        """(oid, stored size) of the object reads of this chunk take, if it is local."""
        found = self.resolve(content_hash)
        return None if found is None else (found.oid, found.size)

    def has(self, content_hash: bytes) -> bool:
        """Whether some object here holds the chunk (cheap: no delta chain is followed)."""
        if content_hash in self._pending or content_hash in self._borrowed:
            return True
        self._refresh_once()
        return self.cache.has(content_hash)

    def borrow(
        self, git_dir: Path, entries: Iterable[tuple[bytes, str, int]], done: Callable[[], None]
    ) -> None:
        """Read (hash, oid, size) objects from another repository here until close().

        A fetch from a repository on this machine lends its objects this way while
        they are copied here in the background; close() calls `done` to wait for that.
        """
        self._sources.append(
            (PackReader(git_dir / "objects"), ObjectReader(git_dir, env_for(git_dir)))
        )
        for h, oid, size in entries:
            self._borrowed.setdefault(h, []).append((oid, size))
        self._copies.append(done)
        self._resolved.clear()

    def missing(self, hashes: list[bytes]) -> list[bytes]:
        """Those of `hashes` that cannot be read here: no object holds the chunk, or none
        whose delta chain's bases are here too (a fetch cut off between a delta's version
        ref and its base's leaves the delta alone; fetching again brings the base)."""
        return [h for h in dict.fromkeys(hashes) if not self.has(h) or self.resolve(h) is None]

    def invalidate(self) -> None:
        """Forget what was scanned and chosen (after a fetch or a push brought new refs)."""
        self._refreshed = False
        self._resolved.clear()

    def _candidates(self, content_hash: bytes) -> list[tuple[str, int, bytes | None, int]]:
        """(oid, size, base, header depth) of every object holding the chunk."""
        pending = self._pending.get(content_hash)
        if pending is not None:
            return [(pending.oid.hex(), pending.size, pending.base, pending.depth)]
        self._refresh_once()
        out = []
        listed = self.cache.candidates(content_hash)
        extra = [b for b in self._borrowed.get(content_hash, ()) if b not in listed]
        for oid, size in listed + extra:
            header = self.cache.header(oid)
            if header is None:
                hdr = self._read_header(oid)
                if hdr is None:
                    continue  # filed in a ref but gone from the object database
                header = (hdr.base_hash, hdr.depth)
                self.cache.set_header(oid, *header)
            out.append((oid, size, *header))
        return out

    def holders(self, content_hash: bytes) -> list[tuple[str, int, bytes | None]]:
        """(oid, stored size, delta base or None) of every object here holding the chunk."""
        return [(oid, size, base) for oid, size, base, _ in self._candidates(content_hash)]

    def read_object(self, oid: str) -> bytearray | None:
        """A stored object's bytes, whole (from a pack here or a lender's, else through git)."""
        for packs, _ in self._sources:
            data = packs.read(oid)
            if data is not None:
                return data
        return self._read_whole(oid)

    def _read_header(self, oid: str) -> ObjectHeader | None:
        from git_mgit.codecs.decoder import read_header

        blob = self._open(oid)
        if blob is not None:
            return read_header(blob)
        data = self._read_whole(oid)
        return None if data is None else read_header(codecs.BytesSource(data))

    def _read_whole(self, oid: str) -> bytearray | None:
        """An object read through git, here or in a lender (loose, recompressed, ...)."""
        for _, reader in self._sources:
            data = reader.read(oid)
            if data is not None:
                return data
        return None

    def _open(self, oid: str) -> Source | None:
        """The object as a stored blob in a pack here, or in a lender's."""
        for packs, _ in self._sources:
            blob = packs.open(oid)
            if blob is not None:
                return blob
        return None

    def resolve(self, content_hash: bytes) -> Located | None:
        """The object reads of this chunk take: of those holding it, the one with the shortest
        delta chain (then the smallest), never one whose chain leads back to itself.

        Every choice is final for this store's lifetime and only rests on choices made
        before it, so the chosen chains form a forest: no read can loop.
        """
        if content_hash in self._resolved:
            return self._resolved[content_hash]
        return self._resolve(content_hash, set())

    def _resolve(self, h: bytes, visiting: set[bytes]) -> Located | None:
        if h in self._resolved:
            return self._resolved[h]
        visiting.add(h)
        best: Located | None = None
        try:
            for oid, size, base, _ in sorted(self._candidates(h), key=lambda c: (c[3], c[1])):
                if base is None:
                    found = Located(oid, size, None, 0)
                elif base in visiting:
                    continue
                else:
                    below = self._resolve(base, visiting)
                    if below is None:
                        continue
                    found = Located(oid, size, base, below.depth + 1)
                if best is None or (found.depth, found.size) < (best.depth, best.size):
                    best = found
                if best.depth == 0:
                    break
        finally:
            visiting.discard(h)
        self._resolved[h] = best
        return best

    # -- writing --------------------------------------------------------------
    def put(self, content_hash: bytes, encoded: codecs.Encoded) -> None:
        if self._pack is None:
            from git_mgit.store.packwriter import PackWriter  # writing only: not on checkout's path

            self._pack = PackWriter(self.repo.objects_dir)
        oid = self._pack.add("blob", encoded.parts)
        # its name in a Git LFS or S3 store, as git-lfs hashes at `git add`: a push sends it
        # without reading it first
        sha256 = hashlib.sha256()
        for part in encoded.parts:
            sha256.update(part)
        hdr = encoded.header
        self._pending[content_hash] = _Written(
            oid, encoded.size, hdr.base_hash, hdr.depth, sha256.digest()
        )
        self._resolved.pop(content_hash, None)

    def flush(self) -> None:
        """Make pending objects visible to git and anchored against gc."""
        pack, pending = self._pack, self._pending
        if pack is None:
            return
        self._pack, self._pending = None, {}
        from git_mgit.store import anchors

        try:
            commit = anchors.write_anchor(pack, [(h, w.oid) for h, w in pending.items()])
            pack.finish()
        except BaseException:
            pack.abort()
            raise
        anchors.set_ref(self.repo, commit)
        self.cache.add(((h, w.oid.hex(), w.size) for h, w in pending.items()), commit)
        for w in pending.values():
            self.cache.set_header(w.oid.hex(), w.base, w.depth)
        self.cache.set_sha256((w.oid.hex(), w.sha256, w.size) for w in pending.values())

    # -- reading --------------------------------------------------------------
    def source(self, content_hash: bytes, oid: str | None = None) -> Source:
        """Random access to the object holding this chunk (the one reads take, or `oid`)."""
        if content_hash in self._pending:
            self.flush()  # a delta base from this very batch: make it readable
        if oid is None:
            loc = self.locate(content_hash)
            oid = None if loc is None else loc[0]
        if oid is not None:
            blob = self._open(oid)
            if blob is not None:
                return blob
            data = self._read_whole(oid)
            if data is not None:
                return codecs.BytesSource(data)
        raise ObjectMissing(f"object {hashing.to_text(content_hash)} is not in this repository")

    def level(self, content_hash: bytes, oid: str | None = None) -> Level:
        """The chunk's object, header read and checked against the name it is filed under."""
        level = codecs.Level(self.source(content_hash, oid))
        hdr = level.header
        if hdr.content_hash != content_hash:
            raise ObjectCorrupt(
                f"object is filed as {hashing.to_text(content_hash)} but holds "
                f"{hashing.to_text(hdr.content_hash)}"
            )
        return level

    def chain_of(self, content_hash: bytes) -> tuple[bytes | None, int]:
        """(delta base, depth) of the object reads of this chunk take; ObjectMissing if none."""
        found = self.resolve(content_hash)
        if found is None:
            raise ObjectMissing(f"object {hashing.to_text(content_hash)} is not in this repository")
        return found.base, found.depth

    def decoder(
        self,
        content_hash: bytes,
        known: tuple[bytes, Buffer] | None = None,
        oid: str | None = None,
    ) -> ChunkDecoder:
        """The chunk's delta chain, ready to decode block by block.

        `known` is (content hash, verified bytes) of a chunk the caller holds:
        the chain stops there instead of decoding it again. `oid` names which of
        the objects holding the chunk to start from (fsck checks each one).
        """
        levels: list[Level] = []
        seen: set[str] = set()  # objects on the chain: a forced top may share its chunk
        h: bytes | None = content_hash
        while h is not None:
            at = oid if not levels and oid is not None else self._chosen(h)
            if at in seen or len(levels) > 255:
                raise ObjectCorrupt(
                    f"object {hashing.to_text(content_hash)} has a cyclic delta chain"
                )
            seen.add(at)
            levels.append(self.level(h, at))
            h = levels[-1].header.base_hash
            if known is not None and h == known[0]:
                return codecs.ChunkDecoder(levels[::-1], known[1])
        return codecs.ChunkDecoder(levels[::-1])

    def _chosen(self, content_hash: bytes) -> str:
        found = self.resolve(content_hash)
        if found is None:
            raise ObjectMissing(f"object {hashing.to_text(content_hash)} is not in this repository")
        return found.oid

    def get_raw(self, content_hash: bytes) -> bytearray:
        """Decode a whole chunk, verifying every level of its delta chain."""
        return codecs.decode_all(self.decoder(content_hash))

    def close(self) -> None:
        """Wait for the copies from lenders, then write what is pending; every reader is
        closed whatever fails on the way."""
        try:
            for done in self._copies:
                done()
        finally:
            try:
                self.flush()
            finally:
                for packs, reader in self._sources[1:]:
                    packs.close()
                    reader.close()
                self.reader.close()
                self.packs.close()
                self.cache.close()
