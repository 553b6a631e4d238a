"""A push's objects as a blob store takes them: their bytes from the packs, and their pointers.

An object the push has just encoded may be held in memory (hold()) until the
pack it went into is finished: it is hashed and sent from there, so its
upload need not wait for the pack. Held bytes are bounded (HOLD); an object
beyond that waits for its pack.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Iterator, Sequence

from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import Part, byte_view
from git_mgit.transfer.stores.blobs import Pieces, Pointer

HOLD = 128 << 20  # bytes of encoded objects held in memory at most


class ObjectBytes:
    """Object bytes for hashing and uploading, from any thread (the pack reader and git
    cat-file each take their own lock)."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self._held: dict[str, Pieces] = {}
        self._held_bytes = 0
        self._lock = threading.Lock()

    def hold(self, oid: str, parts: Sequence[Part]) -> bool:
        """Keep an object's bytes, just encoded and never changed after, until release();
        False (not kept) when that would hold more than HOLD."""
        held = Pieces([byte_view(p) for p in parts])
        with self._lock:
            if oid in self._held:
                return True
            if self._held_bytes + len(held) > HOLD:
                return False
            self._held[oid] = held
            self._held_bytes += len(held)
        return True

    def release(self, oids: Iterable[str]) -> None:
        """Stop holding these objects (their pack is readable now, or the push is over)."""
        with self._lock:
            for oid in oids:
                held = self._held.pop(oid, None)
                if held is not None:
                    self._held_bytes -= len(held)

    def bytes(self, oid: str, keep: bool = False) -> Pieces:
        """The object's bytes, not copied when they are held or a pack of ours holds them
        as stored blocks; a pack's pages are let go once they were read whole, unless the
        caller `keep`s them for a second reading (hashed now, sent next)."""
        with self._lock:
            held = self._held.get(oid)
        if held is not None:
            return held
        packs = self.store.packs
        views = packs.pieces(oid)
        if views is None:
            data = self.store.reader.read(oid)
            if data is None:
                raise FileNotFoundError(f"object {oid} is not in this clone")
            return Pieces([memoryview(data)])
        return Pieces(views, None if keep else functools.partial(packs.forget, oid))

    def pointer(self, oid: str) -> Pointer:
        """The object's pointer: hashed when it was written here, else now (and kept)."""
        known = self.store.cache.sha256(oid)
        if known is not None:
            return Pointer(known[0].hex(), known[1])
        p = Pointer.of(self.bytes(oid, keep=True))
        self.store.cache.set_sha256([(oid, bytes.fromhex(p.oid), p.size)])
        return p

    def forget(self, oids: Iterable[str]) -> None:
        """Let the pages of these objects go, where still kept since they were hashed, and
        whatever is still held of them."""
        oids = list(oids)
        self.release(oids)
        for oid in oids:
            self.store.packs.forget(oid)

    def pointers(self, oids: Iterable[str]) -> Iterator[tuple[str, Pointer]]:
        """Each object with its pointer, in order, as they are hashed on git-mgit's cores
        (hashlib lets go of the GIL), a few objects ahead of the caller; `oids` is read
        only as that room frees (it may wait for objects still being written)."""
        from git_mgit import cores
        from git_mgit.codecs.workers import ordered  # the codecs' pool, not imported sooner

        jobs = (functools.partial(self._paired, oid) for oid in oids)
        return ordered(jobs, cores.available())

    def _paired(self, oid: str) -> tuple[str, Pointer]:
        return oid, self.pointer(oid)

    def holder(self, h: bytes, p: Pointer) -> tuple[str, int] | None:
        """(oid, size) of the object here that holds chunk `h` as the bytes `p` names."""
        for oid, size, _ in self.store.holders(h):
            if size == p.size and self.pointer(oid) == p:
                return oid, size
        return None
