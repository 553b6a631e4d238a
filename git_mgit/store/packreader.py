"""Reads chunk objects straight out of git's pack files, whole or any byte range.

Checkout reads every chunk object once. Through `git cat-file` each byte is
inflated by git, copied through a pipe and copied again into our buffer: about
450 MB/s, on the checkout's critical path and competing with git for the CPU.
Our pack writer stores payloads as zlib *stored* blocks, and git keeps them so
when it repacks or sends them (it reuses pack data). Opening such a blob walks
its block headers once (through a mapping: 5 bytes per 64 KiB block) and keeps where
each block's bytes lie; after that any byte range is one preadv straight into
the caller's buffer, so a decoder can fetch just the frames it needs, and the
whole blob is also a list of views into the mapped pack (pieces): hashing and
uploading an object then copies none of it (a copy into fresh memory costs
about as much as a SHA-256 on a small VM).

Anything else (a loose object, a deltified or compressed entry, an object in
an alternate) answers None and the caller asks git. The zlib adler32 is not
checked here: callers only read chunk objects this way, and every chunk is
verified by the BLAKE3 of what it decodes to, a strictly stronger check.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
import threading
import time
from pathlib import Path
from typing import NamedTuple

from git_mgit.store import midx, oidtable
from git_mgit.store.midx import MultiPackIndex

_IDX_MAGIC = b"\xfftOc\x00\x00\x00\x02"
_FANOUT = 8
_NAMES = _FANOUT + oidtable.FANOUT_BYTES
_OBJ_BLOB = 3
_STORED_HEADER = 5  # BFINAL/BTYPE byte (byte-aligned in a run of stored blocks), LEN, NLEN
_FAULT_AROUND = 64 << 10  # Linux's fault_around_bytes: a read fault maps this much
_ENTRY_PEEK = 32  # entry header (type, size varint) plus the 2-byte zlib header
IOV_BATCH = 1024  # iovecs per preadv (Linux's UIO_MAXIOV)
_IDX_IN_MEMORY = 1 << 20  # a smaller idx (some 37,000 objects) is read, not mapped
_RACY_NS = 2_000_000_000  # file system clocks tick coarsely (a jiffy; a second on some)


class _Pack:
    """One pack: its idx (28 bytes an object) in memory, or mapped when large, unless the
    multi-pack-index covers it; the pack itself opened at its first read, then read with
    pread.

    A descriptor is held only for the packs read from (and for large indexes): a mapping
    holds one too (CPython dups it), and git-mgit's packs are kept apart until `git mgit
    gc` (keep.py), so a repository can hold more of them than a process may open files
    (1024 by default on Linux, 256 on macOS). Holding two a pack, a reader of 500 packs
    left its process none: no socket, no pipe for git.
    """

    def __init__(self, idx_path: Path, indexed: bool = True) -> None:
        """`indexed`: read its .idx to look objects up (else the multi-pack-index does)."""
        self.name = idx_path.name
        self._path = idx_path.with_suffix(".pack")
        self._fd: int | None = None
        self._mmap: mmap.mmap | None = None
        self._idx: bytes | mmap.mmap = b""
        if not indexed:
            return
        with idx_path.open("rb") as f:
            if os.fstat(f.fileno()).st_size <= _IDX_IN_MEMORY:
                self._idx: bytes | mmap.mmap = f.read()
            else:
                self._idx = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self._idx[:8] != _IDX_MAGIC:
            self._close_idx()
            raise ValueError(f"{idx_path} is not a version 2 pack index")
        self._fanout = oidtable.fanout(self._idx, _FANOUT)
        self._count = self._fanout[255]

    @property
    def fd(self) -> int:
        """The pack, opened at its first read; FileNotFoundError if a repack deleted it
        since its idx was read (once open, it stays readable until close())."""
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDONLY)
        return self._fd

    def mapped(self) -> memoryview:
        """The whole pack, mapped read-only (once; packs never change). Views of it keep the
        mapping alive after close()."""
        if self._mmap is None:
            self._mmap = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)
        return memoryview(self._mmap)

    def forget(self, start: int, end: int) -> None:
        """Let the mapping's pages in [start, end) go from this process's memory: the file's
        bytes stay in the page cache, and a later read maps them again."""
        start = max(0, start - start % mmap.PAGESIZE)
        if self._mmap is not None and hasattr(mmap, "MADV_DONTNEED") and end > start:
            self._mmap.madvise(mmap.MADV_DONTNEED, start, min(end, len(self._mmap)) - start)

    def offset(self, oid: bytes) -> int | None:
        if not self._idx:  # the multi-pack-index looks its objects up
            return None
        at = oidtable.position(self._idx, _NAMES, self._fanout, oid)
        return None if at is None else self._offset_at(at)

    def _offset_at(self, i: int) -> int:
        offsets = _NAMES + 24 * self._count  # after the names and the CRC32s
        (small,) = struct.unpack_from(">I", self._idx, offsets + 4 * i)
        if not small & 0x80000000:
            return small
        large = offsets + 4 * self._count + 8 * (small & 0x7FFFFFFF)
        return struct.unpack_from(">Q", self._idx, large)[0]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._close_idx()
        self._mmap = None  # unmapped when the last piece handed out is gone

    def _close_idx(self) -> None:
        if isinstance(self._idx, mmap.mmap):
            self._idx.close()


class Blocks(NamedTuple):
    """Where the bytes of a blob stored as zlib stored blocks lie in its pack."""

    size: int
    starts: list[int]  # content offset where each block begins
    positions: list[int]  # pack offset of each block's first byte


class Walk(NamedTuple):
    """What walking a pack entry's block headers found."""

    blocks: Blocks | None  # None: not a blob of stored blocks only
    end: int  # how far into the pack the walk read


class StoredBlob:
    """A blob in a pack whose zlib stream is stored blocks only: random access by byte range."""

    def __init__(self, fd: int, blocks: Blocks) -> None:
        self.fd = fd
        self.size = blocks.size
        self._starts = blocks.starts
        self._positions = blocks.positions

    def read_into(self, pos: int, dst: memoryview) -> None:
        """Fill dst with the blob's bytes from pos on; ValueError if that runs past the end."""
        if pos < 0 or pos + len(dst) > self.size:
            raise ValueError(f"bytes {pos}..{pos + len(dst)} of a {self.size}-byte blob")
        k = bisect.bisect_right(self._starts, pos) - 1
        done = 0
        while done < len(dst):
            # One preadv reads a run of blocks; the headers between them (checked
            # at open) land in scratch buffers.
            at = self._positions[k] + (pos + done - self._starts[k])
            iov: list[memoryview | bytearray] = []
            while True:
                end = self._starts[k + 1] if k + 1 < len(self._starts) else self.size
                take = min(end - (pos + done), len(dst) - done)
                iov.append(dst[done : done + take])
                done += take
                if done == len(dst) or len(iov) + 2 > IOV_BATCH:  # room for a gap and a block
                    break
                gap = self._positions[k + 1] - (self._positions[k] + end - self._starts[k])
                iov.append(bytearray(gap))
                k += 1
            if _pread_into(self.fd, iov, at) != sum(len(b) for b in iov):
                raise OSError(f"the pack ends inside a blob (offset {at})")
            if done < len(dst) and pos + done == end:
                k += 1  # the batch ended exactly at a block boundary

    def pieces(self, mapped: memoryview) -> list[memoryview]:
        """The blob's bytes in order, as views of its pack mapped whole (`_Pack.mapped`)."""
        ends = [*self._starts[1:], self.size][: len(self._starts)]  # an empty blob has none
        return [
            mapped[at : at + end - start]
            for at, start, end in zip(self._positions, self._starts, ends, strict=True)
        ]

    def view(self, pos: int, n: int, scratch: memoryview | None = None) -> memoryview:
        """Bytes [pos, pos + n), read into scratch (at least n bytes) or a new buffer."""
        dst = memoryview(bytearray(n)) if scratch is None else scratch[:n]
        self.read_into(pos, dst)
        return dst


class PackReader:
    """Whole blobs stored as zlib stored blocks, read from the packs of one object directory.

    Thread-safe. Packs that appear later (a fetch, another filter's batch) are
    found on the next miss; a pack that `git gc` deletes stays readable
    through its open descriptor until close().
    """

    def __init__(self, objects_dir: Path) -> None:
        self._objects = Path(objects_dir)
        self._dir = self._objects / "pack"
        self._packs: dict[str, _Pack] = {}  # by .idx name
        self._probed: list[_Pack] = []  # those looked up by their own .idx
        self._midx: MultiPackIndex | None = None  # the others
        self._midx_stamp: midx.Stamp | None = None
        self._listed = (-1, 0)  # the folder's mtime at the last listing, and when that was
        self._kept: dict[str, tuple[_Pack, tuple[int, int]]] = {}  # pieces() not yet forgotten
        self._lock = threading.Lock()
        self.enabled = hasattr(os, "preadv")

    def open(self, oid: str) -> StoredBlob | None:
        """Random access to a stored-block blob in a known pack; None for anything else."""
        found = self._locate(oid)
        if found is None:
            return None
        pack, _, span, blob = found
        pack.forget(*span)  # the header walk's pages: they count as this process's memory
        return blob

    def pieces(self, oid: str) -> list[memoryview] | None:
        """The whole blob as views of its mapped pack (no copy); None as for open(). Its
        pages stay mapped (they are hashed and sent next) until forget(oid)."""
        found = self._locate(oid)
        if found is None:
            return None
        pack, mapped, span, blob = found
        with self._lock:
            self._kept[oid] = (pack, span)
        return blob.pieces(mapped)

    def forget(self, oid: str) -> None:
        """Let the pages pieces(oid) mapped go from this process's memory (they count as
        its memory: a push of a 1 GiB model held 0.96 GB of them); nothing if none are."""
        with self._lock:
            kept = self._kept.pop(oid, None)
        if kept is not None:
            pack, span = kept
            pack.forget(*span)

    def _locate(self, oid: str) -> tuple[_Pack, memoryview, tuple[int, int], StoredBlob] | None:
        """The blob's pack, that pack mapped, the span of pages its header walk mapped (the
        kernel maps the 64 KiB around each fault: the whole blob), and its block map."""
        if not self.enabled or len(oid) != 40:
            return None
        try:
            key = bytes.fromhex(oid)
        except ValueError:
            return None
        found = self._mapped(key)
        if found is None:
            return None
        pack, offset, mapped = found
        walk = _stored_blocks(mapped, offset)
        span = (offset - _FAULT_AROUND, walk.end + _FAULT_AROUND)
        if walk.blocks is None:
            pack.forget(*span)
            return None
        return pack, mapped, span, StoredBlob(pack.fd, walk.blocks)

    def read(self, oid: str) -> bytearray | None:
        """The whole blob, or None when it is not a stored-block blob in a known pack."""
        blob = self.open(oid)
        return None if blob is None else blob.view(0, blob.size).obj  # type: ignore[return-value]

    def _find(self, oid: bytes) -> tuple[_Pack, int] | None:
        with self._lock:
            for rescan in (False, True):
                if rescan and not self._rescan():
                    return None
                if self._midx is not None and (hit := self._midx.find(oid)) is not None:
                    name, offset = hit
                    pack = self._packs.get(name)
                    if pack is None:
                        pack = self._packs[name] = _Pack(self._dir / name, indexed=False)
                    return pack, offset
                for pack in self._probed:
                    offset = pack.offset(oid)
                    if offset is not None:
                        return pack, offset
        return None

    def _mapped(self, oid: bytes) -> tuple[_Pack, int, memoryview] | None:
        """The object's pack, its offset there, and the pack mapped; a pack repacked away
        before its first read is forgotten, and the object looked for again."""
        for _ in range(2):
            found = self._find(oid)
            if found is None:
                return None
            pack, offset = found
            with self._lock:
                try:
                    return pack, offset, pack.mapped()
                except FileNotFoundError:
                    self._forget(pack)
        return None

    def _forget(self, pack: _Pack) -> None:
        """A pack repacked away (unless another thread forgot it already)."""
        if self._packs.pop(pack.name, None) is not None:
            if pack in self._probed:
                self._probed.remove(pack)
            pack.close()

    def _rescan(self) -> bool:
        """Read a new multi-pack-index and the .idx of packs neither it nor an earlier scan
        covers; True if there were any.

        The folder is listed again only if its mtime moved since the last listing (every
        pack or index added, renamed in or deleted moves it): listing 2000 packs takes 3 ms,
        each time an object is not found in them. An mtime within _RACY_NS of the last
        listing may hide a change made in the same tick of the file system's clock: then it
        is listed anyway.
        """
        try:
            mtime = os.stat(self._dir).st_mtime_ns
        except OSError:
            return False
        if mtime == self._listed[0] and mtime < self._listed[1] - _RACY_NS:
            return False
        listed_at = time.time_ns()
        try:
            names = [n for n in os.listdir(self._dir) if n.endswith(".idx")]
        except OSError:
            return False
        self._listed = (mtime, listed_at)
        added = False
        if (now := midx.stamp(self._objects)) != self._midx_stamp:
            if self._midx is not None:
                self._midx.close()
            self._midx, self._midx_stamp = MultiPackIndex.read(self._objects), now
            added = self._midx is not None
        covered = set(self._midx.names) if self._midx is not None else set()
        self._probed = [p for p in self._probed if p.name not in covered]  # the index has them
        for name in names:
            if name not in self._packs and name not in covered:
                try:
                    pack = self._packs[name] = _Pack(self._dir / name)
                except (OSError, ValueError):
                    continue  # half-written or foreign: git can still read through cat-file
                self._probed.append(pack)
                added = True
        return added

    def close(self) -> None:
        with self._lock:
            for pack in self._packs.values():
                pack.close()
            self._packs.clear()
            self._probed.clear()
            self._kept.clear()
            if self._midx is not None:
                self._midx.close()
            self._midx = self._midx_stamp = None
            self._listed = (-1, 0)


def _stored_blocks(data: memoryview, at: int) -> Walk:
    """The blocks of the blob entry at `at` in the pack `data`, if its zlib stream is
    stored blocks only, and how far into `data` that took.

    The block headers (one every 64 KiB) are read through the pack's mapping, not with a
    pread each: a pread lets go of the GIL, and a thread doing that beside threads
    running Python waits its turn each time (the 203 blobs of an 851 MiB pack: 15 ms
    alone, 18 s beside two threads counting in Python).
    """
    peek = bytes(data[at : at + _ENTRY_PEEK])
    if not peek:
        return Walk(None, at)
    byte = peek[0]
    if (byte >> 4) & 7 != _OBJ_BLOB:
        return Walk(None, at + len(peek))  # a delta or another kind: git resolves those
    size, shift, i = byte & 0x0F, 4, 1
    while byte & 0x80:
        if i >= len(peek):
            return Walk(None, at + len(peek))
        byte = peek[i]
        size |= (byte & 0x7F) << shift
        shift += 7
        i += 1
    cmf_flg = peek[i : i + 2]
    if (
        len(cmf_flg) < 2
        or cmf_flg[0] & 0x0F != 8
        or cmf_flg[1] & 0x20
        or int.from_bytes(cmf_flg, "big") % 31
    ):
        return Walk(None, at + len(peek))
    starts, positions = [], []
    pos, got = at + i + 2, 0
    while True:
        header = data[pos : pos + _STORED_HEADER]
        if len(header) != _STORED_HEADER:
            return Walk(None, pos)
        btype, final = (header[0] >> 1) & 3, header[0] & 1
        length, nlength = struct.unpack_from("<HH", header, 1)
        if btype != 0 or length ^ nlength != 0xFFFF or got + length > size:
            return Walk(None, pos + _STORED_HEADER)
        if length:
            starts.append(got)
            positions.append(pos + _STORED_HEADER)
        got += length
        pos += _STORED_HEADER + length
        if final:
            break
    return Walk(Blocks(size, starts, positions) if got == size else None, pos)


def _pread_into(fd: int, bufs: list, offset: int) -> int:
    """preadv until bufs are full or the file ends; returns the bytes read."""
    want = sum(len(b) for b in bufs)
    total = 0
    while total < want:
        n = os.preadv(fd, bufs, offset + total)
        if n <= 0:
            break
        total += n
        while bufs and n >= len(bufs[0]):
            n -= len(bufs[0])
            bufs = bufs[1:]
        if n:
            bufs = [memoryview(bufs[0])[n:], *bufs[1:]]
    return total
