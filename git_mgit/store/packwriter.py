"""A direct writer of git packfiles (v2) and pack indexes (v2).

`git hash-object -w` stores ~20 MB/s; tensor payloads are already compressed
and arrive in hundreds of MB, so objects go straight into a new pack in
objects/pack instead. Payload bytes are framed as zlib "stored" blocks that
point into the caller's buffers (no compression, no copies) and go out with
pwritev. There are no git deltas: payloads are compressed already, often as
tensor deltas.

SHA-1 (~2 GB/s) is the bottleneck and must run twice over the payload: once
for the object id in add(), and once for the pack trailer. The pack header
holds the object count, which in general only finish() knows, so the trailer
is computed there: finish() maps the pack's pages (in page cache) and hashes
them while a worker computes the entries' CRC32 for the idx and the kernel
writes the pack back to disk; add() writes and computes adler32 while a worker
hashes the object id. End to end throughput cannot exceed half the SHA-1
speed (~1 GB/s here). A writer told how many objects it will hold (a
download: so many objects and their anchor) hashes the pack and the CRC32s
as it writes instead, so finish() has nothing left to read; a different
count at finish() falls back to the re-read. Its entries are built whole
(`frame`: framed in one buffer, with the object id, adler32 and CRC32), by
`built` on git-mgit's cores while the writer's thread hashes and appends
the ones before: framing and three hashes in one thread held a 1 GiB
download to that thread's speed.
Objects under SMALL bytes (trees, commits, pointer files: a version's anchor
is hundreds of them) are framed whole and written BATCH bytes at a time, not
with a few system calls each.
A finished pack is marked `.keep` (keep.py): git's own gc leaves it alone, and
git's multi-pack-index is written again once enough such packs are new (midx.py).
Writeback starts as the pack grows (writeout.start on a worker every
few MiB, one at a time: queued, not waited for, where the platform
allows), so the disk works while objects are still being encoded and the
fsync at finish() has only what is in flight to wait for.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import os
import struct
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from zlib_ng import zlib_ng  # zlib's adler32 and CRC32 with SIMD: 2-4x as fast

from git_mgit.store import keep, midx, writeout
from git_mgit.store.gitobjects import Part, byte_view, object_header

PACK_TYPES = {"commit": 1, "tree": 2, "blob": 3}
ZLIB_HEADER = b"\x78\x01"  # deflate, 32K window, "fastest" level, valid FCHECK
BLOCK = 0xFFFF  # largest stored-block payload
FULL_BLOCK = b"\x00\xff\xff\x00\x00"  # non-final stored block of BLOCK bytes
WINDOW = BLOCK * 64  # adler32 and writes walk 4 MiB at a time (fewer syscalls, same speed)
THREAD_MIN = 1 << 20  # below this, handing SHA-1 to the worker costs more than it saves
HASH_BLOCK = 8 << 20  # the pack's trailer is hashed this much at a time
SMALL = 16 << 10  # objects below this are framed whole and written in batches
BATCH = 1 << 20  # bytes of small entries held before they are written
LARGE_OFFSET = 1 << 31  # idx v2: offsets from here on go to the 64-bit table
T = TypeVar("T")
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: the pages mapped in one call, not faulted


@functools.cache
def _writeback_every() -> int:
    """Bytes appended between two writebacks started: few when they are only queued, more
    when each one waits for the disk and a journal commit (looked up at the first, not at
    import: a process that writes no pack never looks for sync_file_range)."""
    return (8 if writeout.queued() else 64) << 20


def encode_idx(entries: Iterable[tuple[bytes, int, int]], pack_digest: bytes) -> bytes:
    """An idx v2 for (oid20, pack offset, crc32) entries of the pack with trailer pack_digest."""
    ents = sorted(entries)
    n = len(ents)
    counts = [0] * 256
    for oid, _, _ in ents:
        counts[oid[0]] += 1
    fanout, total = [], 0
    for c in counts:
        total += c
        fanout.append(total)
    small, large = [], []
    for _, offset, _ in ents:
        if offset < LARGE_OFFSET:
            small.append(offset)
        else:
            small.append(LARGE_OFFSET | len(large))
            large.append(offset)
    out = bytearray(b"\xfftOc\x00\x00\x00\x02")
    out += struct.pack(">256I", *fanout)
    out += b"".join(oid for oid, _, _ in ents)
    out += struct.pack(f">{n}I", *(crc for _, _, crc in ents))
    out += struct.pack(f">{n}I", *small)
    out += struct.pack(f">{len(large)}Q", *large)
    out += pack_digest
    out += hashlib.sha1(out).digest()
    return bytes(out)


def entry_header(type_code: int, size: int) -> bytes:
    """Pack entry header: type in bits 4-6 of the first byte, size as a little-endian varint."""
    out = bytearray()
    byte = (type_code << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _stored_block_header(final: bool, length: int) -> bytes:
    return (
        FULL_BLOCK
        if not final and length == BLOCK
        else struct.pack("<BHH", final, length, length ^ 0xFFFF)
    )


def _hash_all(hasher: hashlib._Hash, views: Sequence[memoryview]) -> None:
    for v in views:
        hasher.update(v)


def _windows(views: Sequence[memoryview]) -> Iterator[tuple[memoryview, list[bytes | memoryview]]]:
    """The payload's zlib stored blocks, a WINDOW at a time: (the window's bytes, its blocks
    with their headers). A part ends a block, so parts are never copied to be framed."""
    parts = [v for v in views if v.nbytes]
    if not parts:
        yield memoryview(b""), [_stored_block_header(True, 0)]
    for i, part in enumerate(parts):
        last_part = i == len(parts) - 1
        for w in range(0, part.nbytes, WINDOW):
            window = part[w : w + WINDOW]
            framed: list[bytes | memoryview] = []
            for b in range(0, window.nbytes, BLOCK):
                block = window[b : b + BLOCK]
                final = last_part and w + b + BLOCK >= part.nbytes
                framed += (_stored_block_header(final, block.nbytes), block)
            yield window, framed


@dataclass(frozen=True)
class Entry:
    """One object's pack entry, built whole: its id, its bytes, their CRC32 (for the idx)."""

    oid: bytes
    body: bytes
    crc: int


def frame(kind: str, parts: Sequence[Part]) -> Entry:
    """The pack entry of the concatenation of parts, on any thread (hashlib and zlib let go
    of the GIL on whole windows; the copy into one buffer is what makes the CRC32 and the
    pack's hash one call each)."""
    views = [byte_view(p) for p in parts]
    size = sum(v.nbytes for v in views)
    hasher = hashlib.sha1(object_header(kind, size))
    _hash_all(hasher, views)
    pieces: list[bytes | memoryview] = [entry_header(PACK_TYPES[kind], size) + ZLIB_HEADER]
    adler = 1
    for window, framed in _windows(views):
        adler = zlib_ng.adler32(window, adler)
        pieces += framed
    pieces.append(struct.pack(">I", adler))
    body = b"".join(pieces)
    return Entry(hasher.digest(), body, zlib_ng.crc32(body))


def built(objects: Iterable[tuple[T, str, Part]]) -> Iterator[tuple[T, Entry]]:
    """(tag, entry) of each (tag, kind, bytes), in order, framed on git-mgit's cores a few
    objects ahead of the caller; `objects` is read on the caller's thread. A failure of
    `objects` is raised after the entries of everything it gave before (a download cut
    off keeps what it verified)."""
    from git_mgit.codecs.workers import ordered  # the codecs' pool, not imported sooner
    from git_mgit.resources import cores

    failure: list[Exception] = []

    def jobs() -> Iterator[functools.partial[tuple[T, Entry]]]:
        try:
            for tag, kind, data in objects:
                yield functools.partial(_tagged, tag, kind, data)
        except Exception as exc:  # raised below, once the jobs before it are through
            failure.append(exc)

    yield from ordered(jobs(), cores.available())
    if failure:
        raise failure[0]


def _tagged(tag: T, kind: str, data: Part) -> tuple[T, Entry]:
    return tag, frame(kind, [data])


class PackWriter:
    """Appends objects to one new pack in objects_dir/pack; finish() makes it visible to git atomically.

    Not thread-safe: one writer per batch, used from one thread.
    """

    def __init__(self, objects_dir: Path, expected: int | None = None) -> None:
        """`expected`: how many objects the pack will hold, when known before the first."""
        self._dir = Path(objects_dir) / "pack"
        self._dir.mkdir(exist_ok=True)  # objects_dir itself must exist: a wrong path fails loudly
        fd, name = tempfile.mkstemp(prefix="tmp_pack_", dir=self._dir)
        self._fd: int | None = fd
        self._tmp_pack: Path | None = Path(name)
        self._tmp_idx: Path | None = None
        self._entries: dict[bytes, tuple[int, int]] = {}  # oid -> (start, end), in file order
        self._end = 12  # header rewritten with the real count at finish()
        self._pool: ThreadPoolExecutor | None = None
        self._writeback: Future[None] | None = None
        self._written_back = 0  # where the last writeback started
        header = b"PACK" + struct.pack(">II", 2, expected or 0)
        self._expected = expected
        # the trailer and CRC32s as entries are written, where the count is known up front
        self._stream = hashlib.sha1(header) if expected else None
        self._crcs: list[int] = []
        self._held: list[bytes] = []  # small entries framed, not written yet
        self._held_at = self._end  # where they go
        try:
            self._pwritev([header], 0)
        except BaseException:
            self.abort()
            raise

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._end

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()

    def _worker(self) -> ThreadPoolExecutor:
        if self._pool is None:
            # Two: finish() re-reads the pack on one while the other waits on fdatasync.
            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mgit-pack")
        return self._pool

    def _open_fd(self) -> int:
        if self._fd is None:
            raise ValueError("pack writer is already finished or aborted")
        return self._fd

    def add(self, kind: str, parts: Sequence[Part]) -> bytes:
        """Store the concatenation of parts as one object; returns its 20-byte id."""
        if self._stream is not None:  # hashed as written: built whole, then appended
            return self.add_entry(frame(kind, parts))
        fd = self._open_fd()
        views = [byte_view(p) for p in parts]
        size = sum(v.nbytes for v in views)
        if size < SMALL:
            return self._add_small(frame(kind, views))
        self._release()
        hasher = hashlib.sha1(object_header(kind, size))
        start = self._end
        hashing: Future[None] | None = None
        if size >= THREAD_MIN:
            hashing = self._worker().submit(_hash_all, hasher, views)
        else:
            _hash_all(hasher, views)
        try:
            end = self._write_entry(PACK_TYPES[kind], size, views, start)
            if hashing is not None:
                hashing.result()
        except BaseException:
            if hashing is not None:
                wait([hashing])  # it still reads the caller's buffers
            os.ftruncate(fd, start)
            raise
        oid = hasher.digest()
        if oid in self._entries:
            os.ftruncate(fd, start)  # checking after writing keeps the payload to one pass
        else:
            self._appended(oid, start, end, fd)
        return oid

    def _add_small(self, entry: Entry) -> bytes:
        """Hold a small entry, to be written with the ones after it."""
        if entry.oid not in self._entries:
            if not self._held:
                self._held_at = self._end
            self._held.append(entry.body)
            self._entries[entry.oid] = (self._end, self._end + len(entry.body))
            self._end += len(entry.body)
            if self._end - self._held_at >= BATCH:
                self._release()
        return entry.oid

    def _release(self) -> None:
        """Write the small entries held, in one call."""
        if self._held:
            held, self._held = b"".join(self._held), []  # one buffer: IOV_MAX is 1024
            self._pwritev([held], self._held_at)
            self._start_writeback(self._open_fd())

    def add_entry(self, entry: Entry) -> bytes:
        """Append an entry from frame() (built on any thread); returns its object id."""
        fd = self._open_fd()
        if entry.oid in self._entries:
            return entry.oid
        self._release()
        start, stream = self._end, self._stream
        # the pack's hash and the write both let go of the GIL: they run side by side
        writing = None
        if len(entry.body) >= THREAD_MIN:
            writing = self._worker().submit(self._pwritev, [entry.body], start)
        try:
            if stream is not None:
                self._stream = stream.copy()  # the old one stays as it was if this fails
                self._stream.update(entry.body)
            end = self._pwritev([entry.body], start) if writing is None else writing.result()
        except BaseException:
            if writing is not None:
                wait([writing])
            os.ftruncate(fd, start)
            self._stream = stream
            raise
        self._crcs.append(entry.crc)
        self._appended(entry.oid, start, end, fd)
        return entry.oid

    def _appended(self, oid: bytes, start: int, end: int, fd: int) -> None:
        self._entries[oid] = (start, end)
        self._end = end
        self._start_writeback(fd)

    def _start_writeback(self, fd: int) -> None:
        """Flush what was appended so far in the background, once enough bytes are new."""
        if self._writeback is not None:
            if not self._writeback.done():
                return
            self._writeback.result()  # a failed flush is this pack's failure (fsync says it once)
        if self._end - self._written_back >= _writeback_every():
            start, self._written_back = self._written_back, self._end
            self._writeback = self._worker().submit(writeout.start, fd, start, self._end - start)

    def _write_entry(
        self, type_code: int, size: int, views: Sequence[memoryview], offset: int
    ) -> int:
        """Write the entry (header, zlib stream of stored blocks pointing into the caller's
        buffers) at offset, a window at a time; returns its end."""
        adler = 1
        head: list[bytes | memoryview] = [entry_header(type_code, size) + ZLIB_HEADER]
        for window, framed in _windows(views):
            adler = zlib_ng.adler32(window, adler)
            offset = self._pwritev(head + framed, offset)
            head = []
        return self._pwritev([*head, struct.pack(">I", adler)], offset)

    def _pwritev(self, bufs: list[bytes | memoryview], offset: int) -> int:
        """Write all of bufs at offset (retrying short writes); returns the end offset."""
        fd = self._open_fd()
        while bufs:
            n = os.pwritev(fd, bufs, offset)
            if n <= 0:
                raise OSError(f"short write to {self._tmp_pack}")
            offset += n
            i = 0
            while i < len(bufs) and n >= len(bufs[i]):
                n -= len(bufs[i])
                i += 1
            bufs = bufs[i:]
            if n:
                bufs[0] = memoryview(bufs[0])[n:]
        return offset

    def _digest_and_crcs(self) -> tuple[bytes, list[int]]:
        """SHA-1 of the pack so far and each entry's CRC32, from the pages just written.

        They are mapped a window at a time, not read into buffers of ours (git maps its
        packs too): nothing is copied and no memory is taken afresh (on a VM whose host
        took freed memory back, filling two new 8 MiB buffers cost as much as hashing the
        pack), and a window is unmapped before the next, so the pages count towards this
        process's memory one window at a time. The worker folds each window into the
        CRC32s while this thread hashes it; both let go of the GIL.
        """
        fd, end, pool = self._open_fd(), self._end, self._worker()
        spans = list(self._entries.values())
        crcs = [0] * len(spans)
        cur = 0  # first span not yet complete

        def fold(window: memoryview, offset: int) -> None:
            nonlocal cur
            stop = offset + window.nbytes
            while cur < len(spans) and spans[cur][0] < stop:
                s, e = spans[cur]
                seg = window[max(s, offset) - offset : min(e, stop) - offset]
                crcs[cur] = zlib_ng.crc32(seg, crcs[cur])
                seg.release()
                if e > stop:
                    break
                cur += 1

        h = hashlib.sha1()
        flags, prot = mmap.MAP_SHARED | _POPULATE, mmap.PROT_READ
        for offset in range(0, end, HASH_BLOCK):  # a multiple of mmap's granularity
            size = min(HASH_BLOCK, end - offset)
            with mmap.mmap(fd, size, flags=flags, prot=prot, offset=offset) as pages:
                window = memoryview(pages)
                folding = pool.submit(fold, window, offset)
                try:
                    h.update(window)
                    folding.result()
                finally:
                    wait([folding])  # its slices must go before the map can
                    window.release()
        return h.digest(), crcs

    def finish(self) -> Path | None:
        """Complete the pack and its idx and move both into place; None if nothing was added."""
        if not self._entries:
            self.abort()
            return None
        fd = self._open_fd()
        try:
            self._release()
            stream = self._stream if len(self._entries) == self._expected else None
            if stream is None:  # the header's count was a guess, or none: hash the pack now
                self._pwritev([struct.pack(">I", len(self._entries))], 8)
            # Start writeback now: it overlaps with hashing, and the fsync below only has the tail.
            if self._writeback is not None:
                self._writeback.result()
            syncing = self._worker().submit(writeout.sync, fd)
            if stream is not None:
                digest, crcs = stream.digest(), self._crcs
            else:
                digest, crcs = self._digest_and_crcs()
            syncing.result()
            self._pwritev([digest], self._end)
            os.fsync(fd)
            os.fchmod(fd, 0o444)
            self._close()
            offsets = (start for start, _ in self._entries.values())
            idx = encode_idx(zip(self._entries, offsets, crcs, strict=True), digest)
            ifd, name = tempfile.mkstemp(prefix="tmp_idx_", dir=self._dir)
            self._tmp_idx = Path(name)
            with os.fdopen(ifd, "wb") as f:
                f.write(idx)
                f.flush()
                os.fsync(f.fileno())
                os.fchmod(f.fileno(), 0o444)
            final = self._dir / f"pack-{digest.hex()}"
            pack_path = final.with_suffix(".pack")
            os.replace(self._tmp_pack, pack_path)  # pack first: git only looks for packs via idx
            self._tmp_pack = None
            keep.mark(pack_path)  # before git can see it: out of git gc --auto's repacks
            os.replace(self._tmp_idx, final.with_suffix(".idx"))
            self._tmp_idx = None
            dfd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except BaseException:
            self.abort()
            raise
        midx.refresh(self._dir.parent)  # kept packs pile up: one index over them all
        return pack_path

    def _close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def abort(self) -> None:
        """Discard the pack; safe to call more than once."""
        self._held = []
        self._close()
        for tmp in (self._tmp_pack, self._tmp_idx):
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        self._tmp_pack = self._tmp_idx = None
