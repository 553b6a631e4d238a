"""A few decoded chunks kept for the next delta: walks over versions decode each once.

Consecutive versions of a tensor are stored as deltas of each other, so a
walk over them in order finds each chunk's base among the last few it
decoded: the chain stops there (ChunkStore.decoder's `known`), and a chunk
costs one level of decoding, not its whole chain.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from git_mgit import codecs
from git_mgit.store.chunkstore import ChunkStore

KEEP = 4
# A chunk's verified bytes where they need no decoding (a checked-out file), else None
Readable = Callable[[bytes], bytearray | None]


class DecodedChunks:
    def __init__(
        self,
        store: ChunkStore,
        keep: int = KEEP,
        lock: AbstractContextManager | None = None,
        read: Readable | None = None,
    ) -> None:
        """`lock`: held while the store is asked where a chunk is (its lookups are not
        thread-safe), not while decoding, when walks run on several threads. `read`: a
        chunk's verified bytes from elsewhere (a checked-out file), or None to decode it."""
        self.store = store
        self.keep = keep
        self.lock = lock if lock is not None else nullcontext()
        self.read = read
        self._raw: OrderedDict[bytes, bytearray] = OrderedDict()

    def get(self, h: bytes) -> bytearray:
        """The chunk's verified bytes, decoded through the last chunks kept where it can."""
        raw = self._raw.pop(h, None)
        if raw is None and self.read is not None:
            raw = self.read(h)
        if raw is None:
            known = None
            with self.lock:
                found = self.store.resolve(h)
                if found is not None and found.base in self._raw:
                    known = (found.base, self._raw[found.base])
                chain = self.store.decoder(h, known)
            raw = codecs.decode_all(chain)
        self._raw[h] = raw
        while len(self._raw) > self.keep:
            self._raw.popitem(last=False)
        return raw
