"""Starting the disk on a file's new bytes without waiting for it (Linux's sync_file_range).

A pack being written is flushed as it grows so that the fsync at its end has
only a tail to wait for. An fdatasync every 64 MiB did that, but it waits
for the disk and a journal commit each time, one at a time per pack, so up
to 64 MiB a pack was left for the end: on an H200 host, 15 encoders' packs
took 0.4-0.9 s to become durable after their last object. sync_file_range
(SYNC_FILE_RANGE_WRITE) only queues the pages for writeback, so the disk
streams behind the writer and the final fdatasync waits for what is in
flight. Elsewhere (macOS, a libc without it) an fdatasync does the job.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import sys
from collections.abc import Callable

_SYNC_FILE_RANGE_WRITE = 2
# what a file system that cannot queue writeback answers (then it is synced instead)
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ESPIPE}
_DATASYNC = getattr(os, "fdatasync", os.fsync)  # the file's data, not its times


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def queued() -> bool:
    """Whether start() only queues the bytes (True) or waits for them (an fdatasync)."""
    return _sync_file_range() is not None


def start(fd: int, offset: int, length: int) -> None:
    """Have the disk start writing bytes [offset, offset + length) of fd (queued where the
    platform allows; else, or where the file system refuses to queue, the file's data is
    synced, which waits)."""
    fn = _sync_file_range()
    if fn is not None and fn(fd, offset, length, _SYNC_FILE_RANGE_WRITE) == 0:
        return
    if fn is not None:
        err = ctypes.get_errno()
        if err not in _UNSUPPORTED:
            raise OSError(err, os.strerror(err))
    _DATASYNC(fd)


def sync(fd: int) -> None:
    """Wait until the file's data is on disk."""
    _DATASYNC(fd)
