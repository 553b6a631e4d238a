"""`qdelta`: a chunk stored as its quantized difference from a base chunk (lossy, opt-in).

MGit's delta compression (paper section 4 and Algorithm 3, after Delta-DNN):
with an error bound eps, step = 2 ln(1 + eps), and each element's difference
from its base element becomes the integer

    q = floor((float64(child) - float64(base)) / step + 0.5)

The chunk decodes to

    value = base                                       where q == 0
            to_dtype(float64(base) + float64(q) * step)  elsewhere

rounded to nearest, ties to even (numerics.from_float64): plain IEEE float64
arithmetic, one multiply and one add per element, which every machine
computes alike. An element within half a step of its base keeps the base's
exact bits (-0.0 included), so an unchanged chunk decodes to its base. What is stored and hashed is that reconstruction, never the
original: `git mgit compress --lossy` rewrites the working file to exactly
these bytes, and quantize() and the decoder share reconstruct() to make them.
Each reconstructed value lies within step / 2 of the original, plus the
rounding to the dtype (and float64's own rounding of the sum).

Object bytes (objectformat.py): codec 4; `dtype` the chunk's float type (F16,
BF16, F32 or F64); `width` the byte width of the stored integers, the
narrowest of 1, 2 or 4 that holds every zigzag(q) = (q << 1) ^ (q >> 63); no
rotate flag; `base_hash` the base chunk's content hash; `step` (f64) after
it. The payload is zigzag(q) as `width` byte planes, most significant first,
in zstd frames of FRAME_SIZE elements, exactly as `planes` stores its planes
(codec.py compresses them), one plane element per chunk element.

A chunk with NaN or infinity in it or its base, a difference of 2**31 steps
or more, or a reconstruction that overflows the dtype cannot be stored so:
quantize() returns None for it and the chunk stays lossless.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from git_mgit.codecs import planes
from git_mgit.codecs.codec import FRAME_SIZE, Base, Encoded, _compress_planes
from git_mgit.codecs.objectformat import QDELTA_DTYPES, Codec, ObjectHeader
from git_mgit.codecs.planes import Buffer
from git_mgit.tensors import numerics
from git_mgit.tensors.dtypes import DTYPES

_Q_MAX = (1 << 31) - 1
_WIDTHS = ((0xFF, 1), (0xFFFF, 2), (0xFFFF_FFFF, 4))


def step_for(eps: float) -> float:
    """MGit's quantization step for an error bound eps: 2 ln(1 + eps)."""
    if not 0 < eps < math.inf:
        raise ValueError(f"the error bound must be a positive number, not {eps}")
    return 2 * math.log1p(eps)


def supports(dtype: str) -> bool:
    """Whether chunks of this dtype can be stored as `qdelta`."""
    return dtype in QDELTA_DTYPES


def reconstruct(dtype: str, base: Buffer, q: np.ndarray, step: float) -> bytes:
    """The stored bytes of base + q * step: the one function encoder and decoder share."""
    start = numerics.to_float64(dtype, base)
    assert start is not None
    with np.errstate(over="ignore", invalid="ignore"):  # quantize() rejects what overflows
        value = np.where(q == 0, start, start + q.astype(np.float64) * step)
    return numerics.from_float64(dtype, value)


@dataclass
class Quantized:
    """One chunk, quantized: its integers and the reconstruction they decode to."""

    q: np.ndarray  # int32, one per element
    recon: bytearray


def quantize(
    dtype: str, raw: Buffer, base: Buffer, step: float, window: int = numerics.WINDOW
) -> Quantized | None:
    """The chunk `raw` as integer steps from `base`; None where qdelta cannot hold it."""
    if not supports(dtype):
        return None
    raw, base = memoryview(raw).cast("B"), memoryview(base).cast("B")
    size = DTYPES[dtype].bits // 8
    n = len(raw) // size
    if len(base) != len(raw) or n == 0:
        return None
    q = np.empty(n, dtype=np.int32)
    recon = bytearray(len(raw))
    for lo in range(0, n, window):
        hi = min(n, lo + window)
        child = numerics.to_float64(dtype, raw[lo * size : hi * size])
        parent = numerics.to_float64(dtype, base[lo * size : hi * size])
        assert child is not None and parent is not None
        if not (np.isfinite(child).all() and np.isfinite(parent).all()):
            return None
        steps = np.floor((child - parent) / step + 0.5)
        if np.abs(steps).max() > _Q_MAX:
            return None
        q[lo:hi] = steps
        part = reconstruct(dtype, base[lo * size : hi * size], q[lo:hi], step)
        back = numerics.to_float64(dtype, part)
        assert back is not None
        if not np.isfinite(back).all():
            return None  # base + q * step overflows the dtype
        recon[lo * size : hi * size] = part
    return Quantized(q, recon)


def _zigzag(q: np.ndarray) -> np.ndarray:
    wide = q.astype(np.int64)
    return ((wide << 1) ^ (wide >> 63)).astype(np.uint32)


def encode(
    dtype: str, quantized: Quantized, step: float, content_hash: bytes, base: Base
) -> Encoded:
    """The `qdelta` object of a quantized chunk whose reconstruction hashes to content_hash."""
    zz = _zigzag(quantized.q)
    top = int(zz.max())
    width = next(w for limit, w in _WIDTHS if top <= limit)
    ints = zz.astype(f"<u{width}")
    hdr = ObjectHeader(
        codec=Codec.QDELTA,
        dtype=dtype,
        width=width,
        rotate=False,
        raw_len=len(quantized.recon),
        content_hash=content_hash,
        depth=base.depth + 1,
        base_hash=base.content_hash,
        frame_size=FRAME_SIZE,
        step=step,
    )
    hdr.frames, payload = _compress_planes(planes.split(ints, width, None))
    return Encoded(hdr, [hdr.pack(), *payload])


def decode_into(
    dst: memoryview, rows: Sequence[Buffer], hdr: ObjectHeader, base: Buffer, scratch: memoryview
) -> None:
    """Fill dst (a block of the chunk) from the block's planes and the same bytes of the base.

    `scratch` holds the block's integers (len(rows[0]) * hdr.width bytes).
    """
    planes.join(scratch, rows, hdr.width, None)
    zz = np.frombuffer(scratch, dtype=f"<u{hdr.width}").astype(np.int64)
    q = (zz >> 1) ^ -(zz & 1)
    dst[:] = reconstruct(hdr.dtype, base, q, hdr.step)
