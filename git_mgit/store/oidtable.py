"""Sorted tables of object ids under a 256-entry fanout: how a pack's .idx and the
multi-pack-index both find an object (gitformat-pack: "Version 2 pack-*.idx files",
"multi-pack-index files")."""

from __future__ import annotations

import struct
from collections.abc import Sequence

FANOUT_BYTES = 256 * 4
OID_BYTES = 20  # SHA-1


def fanout(data: bytes | memoryview, at: int) -> tuple[int, ...]:
    """The fanout table at `at`: entry b counts the ids whose first byte is at most b."""
    return struct.unpack_from(">256I", data, at)


def position(
    data: bytes | memoryview, names_at: int, table: Sequence[int], oid: bytes
) -> int | None:
    """Where `oid` is in the sorted ids at `names_at` (`table` its fanout), or None."""
    lo = table[oid[0] - 1] if oid[0] else 0
    hi = table[oid[0]]
    while lo < hi:
        mid = (lo + hi) // 2
        at = names_at + OID_BYTES * mid
        name = data[at : at + OID_BYTES]
        if name == oid:
            return mid
        if name < oid:
            lo = mid + 1
        else:
            hi = mid
    return None
