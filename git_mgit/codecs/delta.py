"""Exactly reversible deltas between a chunk and its base chunk.

Consecutive checkpoints share sign, exponent and high mantissa bits, so the
XOR of bit patterns, or their integer difference, is mostly zero bytes in the
top planes. Never subtract in floating point: it is not reversible.
"""

from __future__ import annotations

import numpy as np

from git_mgit.codecs.planes import INT

_BLOCK = 1 << 20


def xor_into(target: np.ndarray, base: np.ndarray) -> None:
    """target ^= base: decodes an `xor` delta in place."""
    np.bitwise_xor(target, base, out=target)


def zigzag_sub(cur: np.ndarray, base: np.ndarray) -> np.ndarray:
    """zigzag(cur - base) with wrapping integer arithmetic on bit patterns (one block)."""
    bits = cur.dtype.itemsize * 8
    d = cur - base  # wraps modulo 2**bits
    out = np.left_shift(d, 1)
    out ^= (d.view(INT[cur.dtype.itemsize]) >> (bits - 1)).view(d.dtype)
    return out


def sub_decode_inplace(enc: np.ndarray, base: np.ndarray) -> None:
    """enc := unzigzag(enc) + base, in place."""
    for s in range(0, enc.size, _BLOCK):
        e = enc[s : s + _BLOCK]
        neg = (e & 1).astype(e.dtype)
        e >>= 1
        e ^= np.negative(neg)  # -1 is all ones: flips every bit where zigzag marked negative
        e += base[s : s + _BLOCK]
