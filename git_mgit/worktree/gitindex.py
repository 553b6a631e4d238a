"""Record stat data of files written behind git's back in git's index, in place.

Index format: gitformat-index(5). Each entry starts with ten 32-bit stat
fields at fixed offsets, so patching them moves no byte: entry offsets, and
with them every extension (including the offset tables of EOIE/IEOT), stay
valid; only the trailing checksum is recomputed. An entry is patched only
when it is stage 0 and still names the blob that was written.

Racy git: an entry whose mtime is not older than the index file may have
changed after its stat data was taken. Writing the index anew makes the file
newer, so, as git does when it writes an index, every such entry is
"smudged" (its size set to 0) so that git compares its content next time.
A split index (the `link` extension) is left alone: git refreshes it itself.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from collections.abc import Mapping
from pathlib import Path

_STAT = struct.Struct(">10I")  # ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size
_HEADER = struct.Struct(">4sII")
_MASK = 0xFFFFFFFF
_LOCK_WAIT = 2.0


class IndexBusy(Exception):
    """Another process holds index.lock."""


def record_stats(
    index: Path, written: Mapping[str, tuple[str, os.stat_result]], hash_len: int = 20
) -> set[str]:
    """Set the stat data of `written` (path -> (blob hex, stat)) in `index`; the paths set.

    Raises IndexBusy when index.lock stays taken for a couple of seconds.
    """
    if not written:
        return set()
    lock = index.with_name(index.name + ".lock")
    fd = _lock(lock)
    try:
        try:
            data = bytearray(index.read_bytes())
        except FileNotFoundError:
            return set()
        done = _patch(data, written, hash_len, index.stat().st_mtime_ns)
        if not done:
            return set()
        os.write(fd, data)
        os.close(fd)
        fd = -1
        os.replace(lock, index)
        return done
    finally:
        if fd >= 0:
            os.close(fd)
            lock.unlink(missing_ok=True)


def _lock(lock: Path) -> int:
    deadline = time.monotonic() + _LOCK_WAIT
    while True:
        try:
            return os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            if time.monotonic() > deadline:
                raise IndexBusy(f"{lock} exists") from None
            time.sleep(0.05)


def _patch(
    data: bytearray,
    written: Mapping[str, tuple[str, os.stat_result]],
    hash_len: int,
    index_mtime_ns: int,
) -> set[str]:
    signature, version, count = _HEADER.unpack_from(data)
    if signature != b"DIRC" or version not in (2, 3, 4):
        return set()
    racy_sec = index_mtime_ns // 1_000_000_000
    pos, name, done, racy = _HEADER.size, b"", set(), []
    for _ in range(count):
        start = pos
        fields = _STAT.unpack_from(data, pos)
        pos += _STAT.size
        oid = bytes(data[pos : pos + hash_len])
        (flags,) = struct.unpack_from(">H", data, pos + hash_len)
        pos += hash_len + 2
        if version >= 3 and flags & 0x4000:
            pos += 2
        if version == 4:
            strip, pos = _varint(data, pos)
            end = data.index(0, pos)
            name = name[: len(name) - strip] + bytes(data[pos:end])
            pos = end + 1
        else:
            end = data.index(0, pos)
            name = bytes(data[pos:end])
            pos = start + ((end - start + 8) & ~7)
        path = name.decode("utf-8", "surrogateescape")
        wanted = written.get(path)
        if wanted is not None and (flags >> 12) & 3 == 0 and oid.hex() == wanted[0]:
            st = wanted[1]
            _STAT.pack_into(data, start, *_fields(st, fields[6]))
            done.add(path)
        elif fields[2] >= racy_sec and fields[9]:
            racy.append(start)
    if not done or _split(data, pos, hash_len):
        return set()
    for start in racy:
        struct.pack_into(">I", data, start + 36, 0)  # smudged: git compares content next time
    trailer = len(data) - hash_len
    if any(data[trailer:]):  # index.skipHash leaves it zero
        algo = hashlib.sha1 if hash_len == 20 else hashlib.sha256
        data[trailer:] = algo(memoryview(data)[:trailer]).digest()
    return done


def _fields(st: os.stat_result, mode: int) -> tuple[int, ...]:
    return (
        st.st_ctime_ns // 1_000_000_000 & _MASK,
        st.st_ctime_ns % 1_000_000_000,
        st.st_mtime_ns // 1_000_000_000 & _MASK,
        st.st_mtime_ns % 1_000_000_000,
        st.st_dev & _MASK,
        st.st_ino & _MASK,
        mode,
        st.st_uid & _MASK,
        st.st_gid & _MASK,
        st.st_size & _MASK,
    )


def _varint(data: bytearray, pos: int) -> tuple[int, int]:
    """git's offset varint (varint.c)."""
    c = data[pos]
    pos += 1
    value = c & 127
    while c & 128:
        c = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (c & 127)
    return value, pos


def _split(data: bytearray, pos: int, hash_len: int) -> bool:
    """Whether the extensions from `pos` on include `link`: a split index, not patched here."""
    end = len(data) - hash_len
    while pos + 8 <= end:
        sig, size = struct.unpack_from(">4sI", data, pos)
        if sig == b"link":
            return True
        pos += 8 + size
    return False
