"""Host memory that a rank's encoder processes read in place: a memfd, mapped shared.

An arena made here is ordinary memory to the rank (torch copies into it,
CUDA may register it as pinned) and a file to its encoder processes, which
open it as /proc/<rank's pid>/fd/<fd> and map it read-only: a checkpoint's
bytes are never copied between processes. The space is reserved when the
arena is made (posix_fallocate), so a full tmpfs fails there with an error
rather than with SIGBUS when a page is first touched. Linux only; elsewhere,
and where memfds cannot be made, arenas are private memory and the
encoders get each chunk's bytes through their pipe instead.
"""

from __future__ import annotations

import itertools
import mmap
import os
import weakref
from dataclasses import dataclass

_serial = itertools.count()


@dataclass(frozen=True)
class Where:
    """How another process finds an arena: its path, and a name no other arena has had."""

    path: str
    ident: str


class SharedBuffer:
    """`nbytes` of memory in a memfd, mapped shared and read-write, pages resident."""

    def __init__(self, nbytes: int) -> None:
        fd = os.memfd_create("git-mgit-arena", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, nbytes)
            os.posix_fallocate(fd, 0, nbytes)
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self.map = mmap.mmap(fd, nbytes, flags=flags)
        except BaseException:
            os.close(fd)
            raise
        self.where = Where(f"/proc/{os.getpid()}/fd/{fd}", f"{os.getpid()}.{next(_serial)}")
        weakref.finalize(self, os.close, fd)


def make(nbytes: int) -> SharedBuffer | None:
    """A shared buffer, or None where this system cannot make one."""
    if not hasattr(os, "memfd_create"):
        return None
    try:
        return SharedBuffer(max(nbytes, 1))
    except OSError:
        return None


class Mapped:
    """The arenas an encoder process has mapped, by ident (the few most recent)."""

    KEEP = 4  # arenas a rank may have: its pending sets, and one replaced by a larger

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}

    def view(self, where: Where, offset: int, length: int) -> memoryview:
        m = self._maps.get(where.ident)
        if m is None:
            with open(where.path, "rb") as f:
                m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            self._maps[where.ident] = m
            while len(self._maps) > self.KEEP:
                del self._maps[next(iter(self._maps))]  # dropped, not closed: views may remain
        return memoryview(m)[offset : offset + length]
