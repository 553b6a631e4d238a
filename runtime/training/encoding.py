"""One chunk's work, as an encoder process does it: hash, skip, delta decision, encode, pack.

A chunk whose content the store already holds costs its hash only (a
frozen layer). Otherwise its object is a delta of the keyframe at its
place (the chunk last stored whole there, objects.py) when that pays,
decided once on a few fixed windows of both (the `sample`, at most 1/8 of a
chunk: the parent keeps the keyframe's, so the decision reads nothing), and
standalone otherwise. Only a chosen delta decodes its base. Objects are
appended to this encoder's own pack, finished (fsynced, moved into place)
once the parent has no more chunks for it.

No torch here: encoder processes import this, and start in a fraction of a
second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import blake3

from git_mgit import codecs
from git_mgit.codecs.codec import DELTA_GAIN, encode_as, estimate, layout, standalone
from git_mgit.codecs.objectformat import Codec
from git_mgit.config import Settings
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.packwriter import PackWriter

_WINDOWS = 4
_MAX_WINDOW = 16384  # elements


@dataclass(frozen=True)
class Previous:
    """The keyframe at a chunk's place: the chunk last stored whole there (objects.py)."""

    content_hash: bytes
    depth: int | None  # chain depth of the object written for it (None: found stored)
    sample: bytes


@dataclass(frozen=True)
class Task:
    """What to do with one chunk besides its bytes."""

    dtype: str  # safetensors dtype, or "bytes" for a header
    previous: Previous | None
    start: bytes | None  # the start model's chunk at this place (a first checkpoint's base)


@dataclass(frozen=True)
class Result:
    content_hash: bytes
    sample: bytes
    oid: bytes | None = None  # None: the store held it already
    size: int = 0  # bytes of the object written
    base: bytes | None = None  # its delta base's content hash
    depth: int = 0


def probe(data: memoryview, width: int) -> memoryview:
    """A few fixed windows of a chunk (at most 1/8 of it): what delta decisions are made on."""
    n = len(data) // width
    win = min(_MAX_WINDOW, max(1, n // (8 * _WINDOWS)))
    if n <= win * _WINDOWS:
        return data
    step = n // _WINDOWS
    return memoryview(
        b"".join(data[i * step * width : (i * step + win) * width] for i in range(_WINDOWS))
    )


class Encoder:
    """One process's chunks into its own pack, for one checkpoint at a time."""

    def __init__(
        self, repo: Repo, settings: Settings, encoded: Callable[[], None] | None = None
    ) -> None:
        """`encoded` is called with each object encoded and not yet written (its buffers at
        their largest: the moment to measure memory)."""
        self.repo, self.settings, self._encoded = repo, settings, encoded
        self.pack: PackWriter | None = None
        self._store: ChunkStore | None = None  # made per checkpoint: it sees the last one's packs
        self._written: set[bytes] = set()  # in this checkpoint's pack

    def one(self, data: memoryview, task: Task) -> Result:
        h = blake3.blake3(data).digest()
        width, _ = layout(task.dtype, len(data))
        sample = bytes(probe(data, width))
        if h in self._written or self.store().has(h):
            return Result(h, sample)
        encoded = self._encode(data, task, h, sample)
        if self._encoded is not None:
            self._encoded()
        if self.pack is None:
            self.pack = PackWriter(self.repo.objects_dir)
        oid = self.pack.add("blob", encoded.parts)
        self._written.add(h)
        hdr = encoded.header
        return Result(h, sample, oid, encoded.size, hdr.base_hash, hdr.depth)

    def end(self, keep: bool) -> None:
        """Finish this checkpoint's pack, durable and visible (the rank anchors it after), or
        discard it (`keep` False)."""
        try:
            if self.pack is not None and keep:
                self.pack.finish()
            elif self.pack is not None:
                self.pack.abort()
        finally:
            self._reset()

    def _reset(self) -> None:
        self.pack = None
        self._written = set()
        if self._store is not None:
            self._store.close()
            self._store = None

    def store(self) -> ChunkStore:
        if self._store is None:
            self._store = ChunkStore(self.repo)
        return self._store

    def _encode(self, data: memoryview, task: Task, h: bytes, sample: bytes) -> codecs.Encoded:
        prev = task.previous
        if prev is not None and prev.content_hash != h:
            est = estimate(memoryview(sample), task.dtype, memoryview(prev.sample))
            codec = standalone(est)
            delta = min((Codec.XOR, Codec.SUB), key=est.__getitem__)
            if est[delta] < est[codec] * DELTA_GAIN:
                base = self._decoded(prev.content_hash, prev.depth)
                if base is not None:
                    return encode_as(delta, data, task.dtype, h, base)
            return encode_as(codec, data, task.dtype, h)
        base = self._decoded(task.start, None) if prev is None and task.start else None
        return codecs.encode(data, task.dtype, h, base, self.settings.max_chain_depth)

    def _decoded(self, h: bytes, depth: int | None) -> codecs.Base | None:
        try:
            if depth is None:
                depth = self.store().chain_of(h)[1]
            if depth + 1 > self.settings.max_chain_depth:
                return None
            return codecs.Base(self.store().get_raw(h), h, depth)
        except MgitError:
            return None  # not here (another node wrote it): store it whole
