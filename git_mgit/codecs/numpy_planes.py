"""The byte-plane layout and the `xor`/`sub` deltas in numpy: the portable definition.

planes.py uses this module only when the C kernels (_native.c) could not be
built; tests hold the two to the same bytes. Work goes a block of elements
at a time so that temporaries stay in cache and memory stays bounded.

Consecutive checkpoints share sign, exponent and high mantissa bits, so the
XOR of bit patterns, or their integer difference, is mostly zero bytes in the
top planes. Never subtract in floating point: it is not reversible.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from git_mgit.codecs.planes import Buffer, Op

UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_BLOCK = 1 << 20


def _words(buf: Buffer, width: int) -> np.ndarray:
    return np.frombuffer(buf, dtype=UINT[width])


def _masks(dtype: np.dtype, sign_at: int) -> tuple[np.unsignedinteger, np.unsignedinteger]:
    """(bits below sign_at, bits above it) as scalars of the word type."""
    t = dtype.type
    low = (1 << sign_at) - 1
    return t(low), t(~(low | (1 << sign_at)) & ((1 << (dtype.itemsize * 8)) - 1))


def _sign_down(a: np.ndarray, sign_at: int, out: np.ndarray) -> np.ndarray:
    """The top (sign) bit moved down to bit sign_at, the bits above it shifted up one."""
    low, high = _masks(a.dtype, sign_at)
    t = a.dtype.type
    np.left_shift(a, t(1), out=out)
    out &= high
    out |= (a >> t(a.dtype.itemsize * 8 - 1)) << t(sign_at)
    out |= a & low
    return out


def _sign_up(a: np.ndarray, sign_at: int) -> None:
    """Undo _sign_down, in place."""
    low, high = _masks(a.dtype, sign_at)
    t = a.dtype.type
    sign = (a >> t(sign_at)) & t(1)
    sign <<= t(a.dtype.itemsize * 8 - 1)
    below = a & low
    a &= high
    a >>= t(1)
    a |= below
    a |= sign


def _forward(op: Op, cur: np.ndarray, base: np.ndarray) -> np.ndarray:
    """The delta of one block of elements against its base (a new array)."""
    if op == Op.XOR:
        return cur ^ base
    bits = cur.dtype.itemsize * 8
    d = cur - base  # wraps modulo 2**bits
    out = np.left_shift(d, 1)
    out ^= (d.view(f"<i{cur.dtype.itemsize}") >> (bits - 1)).view(d.dtype)  # zigzag
    return out


def _inverse(op: Op, enc: np.ndarray, base: np.ndarray) -> None:
    """Undo _forward on one block, in place."""
    if op == Op.XOR:
        enc ^= base
        return
    neg = (enc & 1).astype(enc.dtype)
    enc >>= 1
    enc ^= np.negative(neg)  # -1 is all ones: flips every bit where zigzag marked negative
    enc += base


def split(
    raw: Buffer, dst: memoryview, width: int, sign_at: int, op: Op, base: Buffer | None
) -> None:
    """planes.split's work: dst holds plane p at [p * n, (p + 1) * n); sign_at -1 keeps the sign."""
    src = _words(raw, width)
    n = src.size
    planes = np.frombuffer(dst, dtype=np.uint8).reshape(width, n)
    ref = None if base is None else _words(base, width)
    tmp = np.empty(min(n, _BLOCK), dtype=src.dtype)
    for start in range(0, n, _BLOCK):
        block = src[start : start + _BLOCK]
        if op != Op.NONE:
            assert ref is not None
            block = _forward(op, block, ref[start : start + block.size])
        t = tmp[: block.size]
        if sign_at >= 0:
            _sign_down(block, sign_at, t)
        else:
            t[:] = block
        as_bytes = t.view(np.uint8)
        for k in range(width):
            planes[width - 1 - k, start : start + block.size] = as_bytes[k::width]


def join(
    dst: memoryview,
    planes: Sequence[Buffer],
    width: int,
    sign_at: int,
    op: Op,
    base: Buffer | None,
) -> None:
    """planes.join's work, on one block (the caller keeps blocks cache-sized)."""
    out = np.frombuffer(dst, dtype=np.uint8)
    for p, data in enumerate(planes):
        out[width - 1 - p :: width] = np.frombuffer(data, dtype=np.uint8)
    words = out.view(UINT[width])
    if sign_at >= 0:
        _sign_up(words, sign_at)
    if op != Op.NONE:
        assert base is not None
        _inverse(op, words, _words(base, width))
