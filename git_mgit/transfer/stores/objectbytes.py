"""A push's objects as a blob store takes them: their bytes, and their pointers.

An object the push encodes is held in memory (hold()) until the store holds
it (release(), told by the store's upload), and is hashed and sent from
there: nothing of it is written here. Held bytes are bounded (HOLD): the
push's encoding waits for room, so memory stays a few objects whatever the
push. An object this clone has (one `git add` wrote) is read from its pack.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import Part, byte_view
from git_mgit.transfer.stores.blobs import BlobStoreError, Pieces, Pointer

HOLD = 128 << 20  # bytes of encoded objects held in memory at most (one, whatever its size)


class MissingThere(BlobStoreError):
    """The store lacks an object a version ref on the remote names."""

    def __init__(self, oid: str) -> None:
        super().__init__(
            f"object sha256:{oid[:12]}, which a version ref on the remote names, is not in its "
            "store; run `git mgit fsck --all` in a fresh clone of it, and report it"
        )


class ObjectBytes:
    """Object bytes for hashing and uploading, from any thread (the pack reader and git
    cat-file each take their own lock)."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self._held: dict[str, Pieces] = {}  # by pointer id: objects that are not here
        self._known: dict[str, Pointer] = {}  # their pointers
        self._held_bytes = 0
        self._room = threading.Condition()

    def hold(self, parts: Sequence[Part], stop: Callable[[], BaseException | None]) -> Pointer:
        """Keep an object's bytes, just encoded and never changed after, until release();
        returns its pointer (its name from now on). Waits while more than HOLD would be
        held, raising what `stop()` returns meanwhile (the uploads failed). An object known
        already (held, or let go once the store held it) is not held again: the upload
        takes each object once, and nothing would release a second copy."""
        held = Pieces([byte_view(p) for p in parts])
        p = Pointer.of(held)  # hashed on the thread that encoded it
        with self._room:
            while (
                p.oid not in self._known
                and self._held_bytes
                and self._held_bytes + len(held) > HOLD
            ):
                error = stop()
                if error is not None:
                    raise error
                self._room.wait(0.1)
            if p.oid not in self._known:
                self._held[p.oid] = held
                self._known[p.oid] = p
                self._held_bytes += len(held)
        return p

    def name(self, p: Pointer) -> None:
        """An object this clone has not, known by its pointer (the store holds it): named
        by the pointer's id; bytes() of it raises MissingThere."""
        with self._room:
            self._known.setdefault(p.oid, p)

    def release(self, oids: Iterable[str]) -> None:
        """Stop holding these objects (the store holds them, or the push is over)."""
        with self._room:
            for oid in oids:
                held = self._held.pop(oid, None)
                if held is not None:
                    self._held_bytes -= len(held)
            self._room.notify_all()

    def wake(self) -> None:
        """Have hold()s waiting for room look at their `stop()` again."""
        with self._room:
            self._room.notify_all()

    def bytes(self, oid: str, keep: bool = False) -> Pieces:
        """The object's bytes, not copied when they are held or a pack of ours holds them
        as stored blocks; a pack's pages are let go once they were read whole, unless the
        caller `keep`s them for a second reading (hashed now, sent next)."""
        with self._room:
            held = self._held.get(oid)
        if held is not None:
            return held
        with self._room:
            if oid in self._known:  # named by name(): it is only in the store
                raise MissingThere(oid)
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
        known = self.known(oid)
        if known is not None:
            return known
        p = Pointer.of(self.bytes(oid, keep=True))
        self.store.cache.set_sha256([(oid, bytes.fromhex(p.oid), p.size)])
        return p

    def known(self, oid: str) -> Pointer | None:
        """The object's pointer where it needs no hashing: held, named, or hashed before."""
        with self._room:
            pointer = self._known.get(oid)
        if pointer is not None:
            return pointer
        cached = self.store.cache.sha256(oid)
        return None if cached is None else Pointer(cached[0].hex(), cached[1])

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
        from git_mgit.codecs.workers import ordered  # the codecs' pool, not imported sooner
        from git_mgit.resources import cores

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
