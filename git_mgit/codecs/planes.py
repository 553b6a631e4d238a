"""Byte-plane transforms: the layout that makes float weights compressible.

A float's exponent byte is highly repetitive while its low mantissa bytes are
noise. Rotating each element left by one bit moves the sign next to the
mantissa, so the top byte plane is the whole exponent (fp32, bf16) and
compresses ~3x, while the mantissa planes are stored raw. Planes are ordered
most significant first, so a reader can fetch only the top k planes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
# Elements per block: keeps temporaries in cache and memory bounded.
_BLOCK = 1 << 20


def as_uint(buf: memoryview | bytes | bytearray, width: int) -> np.ndarray:
    return np.frombuffer(buf, dtype=UINT[width])


def rotl1(a: np.ndarray, out: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    np.left_shift(a, 1, out=out)
    out |= a >> (bits - 1)
    return out


def rotr1(a: np.ndarray) -> None:
    """Rotate right by one bit, in place."""
    bits = a.dtype.itemsize * 8
    low = a & 1
    a >>= 1
    low <<= bits - 1
    a |= low


def split(
    raw: memoryview | bytes | bytearray,
    width: int,
    rotate: bool,
    transform: Callable[[int, np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Return a (width, n) uint8 array; row 0 is the most significant plane.

    `transform(start, block)` maps each block of elements first (a delta
    against the base), so no chunk-sized temporary is ever allocated.
    """
    src = as_uint(raw, width)
    n = src.size
    if width == 1 and transform is None:
        return src.reshape(1, -1)
    planes = np.empty((width, n), dtype=np.uint8)
    tmp = np.empty(min(n, _BLOCK), dtype=src.dtype)
    for start in range(0, n, _BLOCK):
        block = src[start : start + _BLOCK]
        if transform is not None:
            block = transform(start, block)
        t = tmp[: block.size]
        if rotate:
            rotl1(block, t)
        else:
            t[:] = block
        as_bytes = t.view(np.uint8)
        for k in range(width):
            planes[width - 1 - k, start : start + block.size] = as_bytes[k::width]
    return planes
