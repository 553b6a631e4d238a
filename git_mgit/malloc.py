"""Let the filter reuse freed chunk buffers instead of returning them to the OS.

glibc maps every large allocation afresh and unmaps it on free, so each
64 MiB chunk buffer costs ~16k page faults to touch: half a second per
512 MiB checked out on a VM. Keeping freed memory in the heap lets the next
chunk reuse it; peak memory is unchanged because the filter's working set
is a fixed number of chunks. A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes

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
