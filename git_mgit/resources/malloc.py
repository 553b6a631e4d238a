"""Chunk-sized memory that is paid for once per process, not once per chunk or file.

glibc maps every large allocation afresh and unmaps it on free, so each
64 MiB chunk buffer costs ~16k page faults to touch: half a second per
512 MiB checked out on a VM. reuse_freed_chunks(), which the `git-mgit`
executable calls for every command, keeps freed memory in the heap, so the
next chunk reuses it; peak memory is unchanged because a command's working
set is a fixed number of chunks (a no-op where the C library is not glibc;
model code runs in worker and torchrun processes of its own). Clean's chunk
buffers come from take_buffer(): private anonymous maps, whose pages the
kernel zeroes on first touch (a bytearray writes every byte when made, so a
64 MiB buffer holding a 4 MiB tensor faulted in all of it), kept after
give_buffer() for the next file.
"""

from __future__ import annotations

import ctypes
import mmap
import threading

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_LIMIT = 1 << 30


def reuse_freed_chunks() -> bool:
    """Tune malloc for the filter's chunk-sized allocations; True if applied."""
    try:
        # The process's own symbols (libc among them): find_library would fork ldconfig.
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    # One or two arenas: freed chunks are then reusable by every thread.
    return bool(
        mallopt(_M_ARENA_MAX, 2)
        and mallopt(_M_MMAP_THRESHOLD, _LIMIT)
        and mallopt(_M_TRIM_THRESHOLD, _LIMIT)
    )


_spare: dict[int, list[memoryview]] = {}
_spare_lock = threading.Lock()


def take_buffer(size: int) -> memoryview:
    """A writable buffer of `size` bytes: one given back earlier, or fresh untouched pages.

    Its content is whatever the last user left there.
    """
    with _spare_lock:
        free = _spare.get(size)
        if free:
            return free.pop()
    anonymous = getattr(mmap, "MAP_ANONYMOUS", None)
    if anonymous is None or size == 0:  # no anonymous maps (Windows): plain memory
        return memoryview(bytearray(size))
    return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | anonymous))


def give_buffer(buffer: memoryview) -> None:
    """Keep a buffer from take_buffer() for the next caller asking for its size."""
    with _spare_lock:
        _spare.setdefault(len(buffer), []).append(buffer)
