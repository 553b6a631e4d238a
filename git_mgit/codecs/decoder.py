"""Decode a chunk block by block through its whole delta chain, verifying every level.

A chunk's object may be a delta of a base chunk, itself perhaps a delta: a
chain of levels with a standalone object at the bottom. Block i is the same
byte range of every level, so decoding it needs only those bytes of each
plane of each level (one frame per plane when frames line up, as they do for
objects this version writes). A `qdelta` level (lossy, qdelta.py) reads its
integer planes the same way and computes its block from them and the base's.
Objects are read through a `Source` with random access, so a block is decoded
as soon as its frames are read, blocks decode in parallel on the worker
threads, and nothing chunk-sized is held unless the caller asks for the whole
chunk.

Every level's BLAKE3 is fed that level's blocks in order and checked after
the chunk's last block; a mismatch raises ObjectCorrupt. A streaming caller
has by then passed on unverified bytes, and must make its consumer discard
them (the filter answers status=error, and git drops the output).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Protocol

import blake3
import zstandard

from git_mgit import hashing
from git_mgit.codecs import planes
from git_mgit.codecs.objectformat import Codec, FrameMode, ObjectHeader, parse_header
from git_mgit.codecs.planes import Buffer, Op
from git_mgit.codecs.workers import ordered
from git_mgit.errors import ObjectCorrupt

DELTA_OPS = {Codec.XOR: Op.XOR, Codec.SUB: Op.SUB}
# First read of an object: a 64 MiB chunk's header is ~400 bytes. A longer one (a frame
# table of a huge chunk) is read in steps 16 times larger: a top-planes read reads no more.
HEADER_PEEK = 1 << 12
RAW_BLOCK = 1 << 22  # block size when the top object has no frames (`raw`)
AHEAD = 4  # blocks decoded ahead of the consumer: 4 x 4 MiB for fp32

_local = threading.local()


class Source(Protocol):
    """Random access to one object's bytes (a blob in a pack, or one in memory)."""

    size: int

    def view(self, pos: int, n: int, scratch: memoryview | None = None) -> memoryview:
        """Bytes [pos, pos + n): a view of the object if it is in memory, else read into
        scratch (at least n bytes), or into a new buffer without one."""
        ...

    def read_into(self, pos: int, dst: memoryview) -> None: ...


class BytesSource:
    """An object already in memory; reads are views, not copies."""

    def __init__(self, data: Buffer) -> None:
        self._data = memoryview(data).cast("B")
        self.size = len(self._data)

    def view(self, pos: int, n: int, scratch: memoryview | None = None) -> memoryview:
        return self._data[pos : pos + n]

    def read_into(self, pos: int, dst: memoryview) -> None:
        dst[:] = self._data[pos : pos + len(dst)]


class _Arena:
    """Per-thread scratch for the frames one level's block needs, reused block after block.

    A new bytearray is zero-filled and paged in every time; at 4 MiB a block
    that costs as much as the join itself. take() hands out consecutive
    slices; reset() starts over, with room for the last block's high-water mark.
    """

    def __init__(self) -> None:
        self._buf = memoryview(bytearray(0))
        self._used = self._peak = 0

    def reset(self) -> None:
        if self._peak > len(self._buf):
            self._buf = memoryview(bytearray(self._peak))
        self._used = self._peak = 0

    def take(self, n: int) -> memoryview:
        self._peak += n
        if self._used + n > len(self._buf):
            return memoryview(bytearray(n))  # this once; reset() makes room for next time
        self._used += n
        return self._buf[self._used - n : self._used]


def _arena() -> _Arena:
    arena = getattr(_local, "arena", None)
    if arena is None:
        arena = _local.arena = _Arena()
    return arena


class _Buffers:
    """Block buffers handed back once the consumer is done with a block, for the next one."""

    KEEP = 2 * AHEAD  # per size: what the blocks in flight and the one consumed use

    def __init__(self) -> None:
        self._free: dict[int, list[bytearray]] = {}
        self._lock = threading.Lock()

    def get(self, n: int) -> memoryview:
        with self._lock:
            free = self._free.get(n)
            if free:
                return memoryview(free.pop())
        return memoryview(bytearray(n))

    def put(self, views: Iterable[memoryview]) -> None:
        with self._lock:
            for v in views:
                free = self._free.setdefault(len(v), [])
                if len(free) < self.KEEP:
                    free.append(v.obj)  # type: ignore[arg-type]


def _dctx() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def _decompress(frame: Buffer, size: int) -> bytes:
    try:
        # Check the declared size first: a corrupt frame must not allocate gigabytes.
        if zstandard.frame_content_size(frame) != size:
            raise ObjectCorrupt("object frame has the wrong decompressed size")
        return _dctx().decompress(frame)
    except zstandard.ZstdError as exc:
        raise ObjectCorrupt(f"object frame does not decompress ({exc})") from exc


def read_header(source: Source) -> ObjectHeader:
    """The object's header, checked against the object's size."""
    peek = HEADER_PEEK
    while True:
        try:
            hdr = parse_header(source.view(0, min(source.size, peek)))
            break
        except ObjectCorrupt:
            if source.size <= peek:
                raise
            peek *= 16
    if source.size - hdr.header_len != hdr.payload_len:
        raise ObjectCorrupt(
            f"object payload is {source.size - hdr.header_len} bytes, header says {hdr.payload_len}"
        )
    if hdr.codec.is_delta and hdr.codec not in DELTA_OPS and hdr.codec != Codec.QDELTA:
        raise ObjectCorrupt(f"codec {hdr.codec.name} is not supported by this git-mgit")
    return hdr


class Level:
    """One object of a chain: its header, and where each frame of each plane lies."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.header = hdr = read_header(source)
        self.op = DELTA_OPS.get(hdr.codec, Op.NONE)
        self._plane_len = hdr.raw_len // hdr.element_size
        self._frames: list[list[tuple[int, int, int]]] = []  # (mode, offset, stored length)
        pos = hdr.header_len
        for plane in hdr.frames:
            row = []
            for mode, n in plane:
                row.append((mode, pos, n))
                pos += n
            self._frames.append(row)

    def decode(
        self,
        start: int,
        stop: int,
        base: memoryview | None,
        dst: memoryview,
        top_planes: int | None = None,
    ) -> None:
        """Bytes [start, stop) of the chunk into dst; `base`: the same bytes of the base chunk.

        With `top_planes` (a `planes` or `xor` level only), only that many
        planes are read, most significant first, and the others taken as
        zeros: the chunk's bits under a mask (tensors/multires.py).
        """
        hdr = self.header
        assert top_planes is None or hdr.codec in (Codec.PLANES, Codec.XOR)
        if hdr.codec == Codec.RAW:
            self.source.read_into(hdr.header_len + start, dst)
            return
        w, size = hdr.width, hdr.element_size
        arena = _arena()
        arena.reset()
        rows = [
            self._plane(p, start // size, stop // size, arena)
            if top_planes is None or p < top_planes
            else bytes((stop - start) // size)
            for p in range(w)
        ]
        if hdr.codec == Codec.QDELTA:
            from git_mgit.codecs import qdelta  # numpy: only once a lossy object is read

            assert base is not None
            qdelta.decode_into(dst, rows, hdr, base, arena.take((stop - start) // size * w))
            return
        planes.join(dst, rows, w, hdr.sign_at, self.op, base)

    def _plane(self, p: int, first: int, stop: int, arena: _Arena) -> Buffer:
        """Plane p's bytes for elements [first, stop)."""
        size = self.header.frame_size
        pieces = []
        for f in range(first // size, (stop - 1) // size + 1):
            lo, hi = max(first, f * size) - f * size, min(stop, (f + 1) * size) - f * size
            mode, at, n = self._frames[p][f]
            if mode == FrameMode.STORED:
                pieces.append(self.source.view(at + lo, hi - lo, arena.take(hi - lo)))
            else:
                frame = self.source.view(at, n, arena.take(n))
                full = _decompress(frame, min(size, self._plane_len - f * size))
                pieces.append(memoryview(full)[lo:hi])
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class ChunkDecoder:
    """One chunk: its chain of levels, bottom first, decodable block by block.

    `base` is the verified content of the bottom level's base when the caller
    already holds it (then the bottom level may be a delta).
    """

    def __init__(self, levels: list[Level], base: Buffer | None = None) -> None:
        self.levels = levels
        top = levels[-1].header
        self.size = top.raw_len
        self.content_hash = top.content_hash
        bottom = levels[0].header
        if bottom.codec.is_delta and base is None:
            raise ObjectCorrupt("delta object without a base")
        self.base = None if base is None else memoryview(base).cast("B")
        if self.base is not None and len(self.base) != self.size:
            raise ObjectCorrupt("delta base has a different length")
        for below, above in itertools.pairwise(levels):
            if above.header.base_hash != below.header.content_hash:
                raise ObjectCorrupt("delta chain does not link up")
            if below.header.raw_len != self.size:
                raise ObjectCorrupt("delta base has a different length")
        block = top.frame_size * top.element_size if top.codec != Codec.RAW else RAW_BLOCK
        self.block_size = -(-block // 8) * 8  # a whole number of elements of any width
        self.blocks = math.ceil(self.size / self.block_size)

    def span(self, i: int) -> tuple[int, int]:
        return i * self.block_size, min(self.size, (i + 1) * self.block_size)

    def decode_block(
        self,
        i: int,
        dst: memoryview | None = None,
        alloc: Callable[[int], memoryview] = lambda n: memoryview(bytearray(n)),
        top_planes: int | None = None,
    ) -> list[memoryview]:
        """Block i of every level, bottom first; the top one into dst if given.

        Buffers for the other levels (and the top without dst) come from alloc.
        `top_planes`: read only that many planes of each level (see Level.decode).
        """
        a, b = self.span(i)
        prev = None if self.base is None else self.base[a:b]
        out = []
        for k, level in enumerate(self.levels):
            top = k == len(self.levels) - 1
            buf = dst if top and dst is not None else alloc(b - a)
            level.decode(a, b, prev, buf, top_planes)
            out.append(buf)
            prev = buf
        return out


class _Check:
    """The running BLAKE3 of every level of one chunk, fed block by block in order."""

    def __init__(self, chunk: ChunkDecoder) -> None:
        self.chunk = chunk
        # One thread each: the blocks are in cache, and the CPU is shared with git.
        self.hashers = [blake3.blake3() for _ in chunk.levels]

    def update(self, blocks: list[memoryview]) -> None:
        for h, block in zip(self.hashers, blocks, strict=True):
            h.update(block)

    def verify(self) -> None:
        for h, level in zip(self.hashers, self.chunk.levels, strict=True):
            if h.digest() != level.header.content_hash:
                raise ObjectCorrupt(
                    f"object does not decode to {hashing.to_text(level.header.content_hash)}"
                )


# (the chunk's check, whether this is its last block, every level's block, those from the pool)
Done = tuple[_Check, bool, list[memoryview], list[memoryview]]
Job = Callable[[], Done | tuple[_Check, bool, None, None]]


def _jobs(
    chunks: Iterable[tuple[ChunkDecoder, memoryview | None]], buffers: _Buffers
) -> Iterator[Job]:
    for chunk, out in chunks:
        check = _Check(chunk)
        if not chunk.blocks:  # an empty chunk: still verified
            yield lambda check=check: (check, True, None, None)
        for i in range(chunk.blocks):
            a, b = chunk.span(i)
            dst = None if out is None else out[a:b]
            last = i == chunk.blocks - 1
            yield partial(_job, check, chunk, i, dst, last, buffers)


def _job(
    check: _Check,
    chunk: ChunkDecoder,
    i: int,
    dst: memoryview | None,
    last: bool,
    buffers: _Buffers,
) -> Done:
    blocks = chunk.decode_block(i, dst, buffers.get)
    return check, last, blocks, blocks if dst is None else blocks[:-1]


def _run(chunks: Iterable[tuple[ChunkDecoder, memoryview | None]]) -> Iterator[memoryview]:
    buffers = _Buffers()
    for check, last, blocks, owned in ordered(_jobs(chunks, buffers), AHEAD):
        if blocks is not None:
            check.update(blocks)
            yield blocks[-1]
            buffers.put(owned)  # the consumer is done with the block: they serve a later one
        if last:
            check.verify()


def stream(chunks: Iterable[ChunkDecoder]) -> Iterator[memoryview]:
    """Every block of every chunk in order, decoded ahead; each chunk verified after its last.

    `chunks` is consumed lazily, a few blocks ahead of what has been yielded.
    A block is valid until the next one is asked for: its buffer is reused.
    """
    return _run((c, None) for c in chunks)


def decode_into(chunk: ChunkDecoder, out: memoryview) -> None:
    """The whole chunk into `out` (chunk.size bytes), verified."""
    for _ in _run([(chunk, out)]):
        pass


def decode_all(chunk: ChunkDecoder) -> bytearray:
    """The whole chunk, verified."""
    out = bytearray(chunk.size)
    decode_into(chunk, memoryview(out))
    return out


def decode(
    obj: Buffer,
    load_base: Callable[[bytes], Buffer | None] | None = None,
    expected_hash: bytes | None = None,
) -> bytearray:
    """Decode an object held in memory and verify it.

    `load_base(content_hash)` must return the verified bytes of a delta's base.
    """
    level = Level(BytesSource(obj))
    hdr = level.header
    if expected_hash is not None and hdr.content_hash != expected_hash:
        raise ObjectCorrupt(
            f"object is filed as {hashing.to_text(expected_hash)} but holds "
            f"{hashing.to_text(hdr.content_hash)}"
        )
    base = None
    if hdr.codec.is_delta and load_base is not None and hdr.base_hash is not None:
        base = load_base(hdr.base_hash)
    return decode_all(ChunkDecoder([level], base))
