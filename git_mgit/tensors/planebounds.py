"""What the top k byte planes of a float say about its value: bounds, per element.

Reading k of an element's byte planes learns some of its bits (which ones:
`known_bits`, from the byte-plane layout) and leaves the others unknown.
For IEEE-like floats (F16, BF16, F32, F64) the magnitude's bit pattern,
read as an unsigned integer, orders the same way as the magnitude itself,
so the unknown bits all zero give the smallest magnitude the element can
have and all ones the largest; an unknown sign mirrors that range around
zero. These are the tightest bounds the known bits allow, so they shrink as
k grows and meet at the value once every plane is read.

A magnitude whose pattern could be a NaN (exponent all ones, mantissa not
known to be zero) gets (-inf, +inf): no interval holds a NaN, and a reader
must not treat such an element as bounded. An exactly known infinity is
its own bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from git_mgit.codecs import planes
from git_mgit.tensors.dtypes import DTYPES

# dtype -> (unsigned word, float type the word is) after BF16 is widened to F32's layout
_WORDS = {
    "F16": (np.uint16, np.float16),
    "BF16": (np.uint32, np.float32),
    "F32": (np.uint32, np.float32),
    "F64": (np.uint64, np.float64),
}
FLOAT_DTYPES = tuple(_WORDS)


def known_bits(width: int, sign_at: int | None, k: int) -> int:
    """The bits of a `width`-byte element that its top k planes hold, as a mask."""
    rows = [b"\xff" if p < k else b"\0" for p in range(width)]
    out = memoryview(bytearray(width))
    planes.join(out, rows, width, sign_at)
    return int.from_bytes(out, "little")


@dataclass(frozen=True)
class Bounded:
    """Truncated values (unknown bits zero) and the per-element bounds on the true ones."""

    value: np.ndarray  # the dtype's own numpy type; float32 for BF16
    low: np.ndarray  # float64
    high: np.ndarray  # float64


def bounds(dtype: str, words: np.ndarray, mask: int) -> Bounded:
    """Bounds on elements of which only the bits in `mask` are known (`words`: their bits).

    `words` are the elements' bit patterns as unsigned integers of the
    dtype's width; bits outside `mask` are ignored.
    """
    uint, ftype = _WORDS[dtype]
    info = DTYPES[dtype]
    bits = 8 * np.dtype(uint).itemsize
    w = words.astype(uint)
    if dtype == "BF16":  # the top half of an F32 whose low half is known zeros
        w <<= uint(16)
        mask = mask << 16 | 0xFFFF
    top = 1 << (bits - 1)
    magnitude = top - 1
    unknown = uint(~mask & magnitude)
    t = w & uint(mask)
    lo = t & uint(magnitude)
    hi = lo | unknown
    inf = ((1 << info.exponent_bits) - 1) << (bits - 1 - info.exponent_bits)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns: handled below
        lo_f = lo.view(ftype).astype(np.float64)
        hi_f = hi.view(ftype).astype(np.float64)
    if mask & top:
        negative = (t & uint(top)) != 0
        low = np.where(negative, -hi_f, lo_f)
        high = np.where(negative, -lo_f, hi_f)
    else:
        low, high = -hi_f, hi_f
    maybe_nan = hi > uint(inf)
    low[maybe_nan] = -np.inf
    high[maybe_nan] = np.inf
    return Bounded(t.view(ftype), low, high)
