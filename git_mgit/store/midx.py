"""One index over many packs: git's multi-pack-index, written again as packs accumulate.

git-mgit's packs are kept out of git's own repacks (keep.py), so nothing folds them
together until `git mgit gc`: a repository that commits a checkpoint every few minutes
holds thousands of them. A git process opens every pack's .idx the first time it looks
for an object it does not find (2000 packs: 68 ms before `git cat-file -e` answers),
where a multi-pack-index, one sorted table of every pack's object ids, answers at once
(7 ms). git reads it by itself, and so does git-mgit's pack reader (MultiPackIndex);
packs it does not cover are looked up one by one, as before. Once UNINDEXED packs are, it
is written again: `git multi-pack-index write` merges the packs' .idx files and reads no
object. A repack that deletes packs it covers (that of `git mgit gc`) deletes it too.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import subprocess
from pathlib import Path

from git_mgit.store import oidtable

UNINDEXED = 32  # packs the multi-pack-index does not cover before it is written again
NAME = "multi-pack-index"
_COUNTER = "mgit-unindexed"  # in objects/info/: a byte for each pack since the last count
_HEADER = struct.Struct(">4sBBBBI")  # MIDX, version 1, SHA-1 (1), chunks, base files, packs
_CHUNK = struct.Struct(">4sQ")  # id, offset: one per chunk, then a terminating one
_IN_MEMORY = 1 << 20  # a smaller file is read, not mapped


def unindexed(objects_dir: Path) -> int:
    """How many packs the multi-pack-index does not cover (all of them, when there is none):
    the packs there less those its header counts. Names only, no stat of each (at 2000
    packs, 9 ms of every pack an encoder finished). A repack that deletes packs the index
    covers deletes the index too, so no pack it counts is gone."""
    folder = objects_dir / "pack"
    try:
        with (folder / NAME).open("rb") as f:
            magic, *_, covered = _HEADER.unpack(f.read(_HEADER.size))
        covered = covered if magic == b"MIDX" else 0
    except (OSError, struct.error):
        covered = 0
    try:
        with os.scandir(folder) as entries:
            return max(0, sum(1 for e in entries if e.name.endswith(".idx")) - covered)
    except FileNotFoundError:
        return 0


def refresh(objects_dir: Path, packs: int = 1) -> None:
    """Count `packs` new ones, and write the multi-pack-index again once UNINDEXED packs
    are not in it. Best effort: another process writing it holds its lock, and git works
    without one.

    The count is a file of one byte a pack (`objects/info/mgit-unindexed`, appended to by
    every process, its size read back), so a pack's end costs no listing of the folder
    (3 ms at 2000 packs, 30 at 20,000); the folder is counted only when that file says 32,
    and the file set to what the index then leaves out."""
    counter = objects_dir / "info" / _COUNTER
    try:
        fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"." * packs)
            if os.fstat(fd).st_size < UNINDEXED:
                return
        finally:
            os.close(fd)
    except OSError:
        pass  # no info folder, read-only: count the folder instead
    left = unindexed(objects_dir)
    if left >= UNINDEXED:
        written = subprocess.run(
            ["git", "multi-pack-index", f"--object-dir={objects_dir}", "write"],  # no tty
            cwd=objects_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        left = left if written.returncode else 0  # a pack that came meanwhile: next time
    with contextlib.suppress(OSError):
        os.truncate(counter, left)


Stamp = tuple[int, int, int]  # inode, mtime, size: git writes a new file and renames it


def stamp(objects_dir: Path) -> Stamp | None:
    """What tells one multi-pack-index file from the next; None when there is none."""
    try:
        st = (objects_dir / "pack" / NAME).stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class MultiPackIndex:
    """git's multi-pack-index, read: the pack (its .idx name) that holds an object, and
    the object's offset there. One binary search, however many packs it covers."""

    def __init__(self, data: bytes | mmap.mmap, chunks: dict[bytes, int], packs: int) -> None:
        self._data = data
        start = chunks[b"PNAM"]
        end = min(o for o in chunks.values() if o > start)  # where the next chunk begins
        names = bytes(data[start:end]).split(b"\0")
        self.names = [n.decode("utf-8", "surrogateescape") for n in names if n][:packs]
        self._fanout = oidtable.fanout(data, chunks[b"OIDF"])
        self._names_at = chunks[b"OIDL"]
        self._offsets_at = chunks[b"OOFF"]
        self._large_at = chunks.get(b"LOFF")

    @classmethod
    def read(cls, objects_dir: Path) -> MultiPackIndex | None:
        """The directory's multi-pack-index; None where there is none, or one this reader
        leaves to git (another version, SHA-256 ids, a chain of incremental files)."""
        try:
            with (objects_dir / "pack" / NAME).open("rb") as f:
                if os.fstat(f.fileno()).st_size <= _IN_MEMORY:
                    data: bytes | mmap.mmap = f.read()
                else:
                    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        try:
            magic, version, oids, count, bases, packs = _HEADER.unpack_from(data, 0)
            if (magic, version, oids, bases) != (b"MIDX", 1, 1, 0):
                raise ValueError("not a multi-pack-index this reader knows")
            chunks = {}
            for i in range(count + 1):
                ident, offset = _CHUNK.unpack_from(data, _HEADER.size + _CHUNK.size * i)
                chunks[ident] = offset
            if not {b"PNAM", b"OIDF", b"OIDL", b"OOFF"} <= chunks.keys():
                raise ValueError("a chunk is missing")
            return cls(data, chunks, packs)
        except (struct.error, ValueError):
            if isinstance(data, mmap.mmap):
                data.close()
            return None

    def find(self, oid: bytes) -> tuple[str, int] | None:
        """(the .idx name of the pack holding `oid`, its offset there), or None."""
        at = oidtable.position(self._data, self._names_at, self._fanout, oid)
        if at is None:
            return None
        pack, offset = struct.unpack_from(">II", self._data, self._offsets_at + 8 * at)
        if offset & 0x80000000 and self._large_at is not None:  # else offsets fit 32 bits
            large = self._large_at + 8 * (offset & 0x7FFFFFFF)
            (offset,) = struct.unpack_from(">Q", self._data, large)
        return (self.names[pack], offset) if pack < len(self.names) else None

    def close(self) -> None:
        if isinstance(self._data, mmap.mmap):
            self._data.close()
