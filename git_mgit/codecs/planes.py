"""Byte-plane transforms: the layout that makes float weights compressible.

A float's exponent byte is highly repetitive while its low mantissa bytes are
noise. Rotating each element left by one bit moves the sign next to the
mantissa, so the top byte plane is the whole exponent (fp32, bf16) and
compresses ~3x, while the mantissa planes are stored raw. Planes are ordered
most significant first, so a reader can fetch only the top k planes. A delta
codec transforms each element against its base element first (`Op`).

Two implementations compute the same bytes: the C kernels in _native.c (one
memory pass, the GIL released; built at install when a compiler is there)
and numpy_planes.py. With the kernels, the filter process never imports
numpy (a sixth of a second of start-up). MGIT_NATIVE=0 forces numpy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from enum import IntEnum
from types import ModuleType
from typing import Any

Buffer = Any  # bytes, bytearray, memoryview, numpy arrays: anything with the buffer protocol
WIDTHS = (1, 2, 4, 8)


class Op(IntEnum):
    """How an element is stored relative to its base element (the numbers _native.c uses)."""

    NONE = 0
    XOR = 1  # element ^ base
    SUB = 2  # zigzag(element - base), wrapping integer arithmetic on the bit patterns


def _load_kernels() -> ModuleType:
    if os.environ.get("MGIT_NATIVE") != "0":
        try:
            from git_mgit.codecs import _native

            return _native
        except ImportError:  # no compiler at install time: numpy does the same work
            pass
    from git_mgit.codecs import numpy_planes

    return numpy_planes


_kernels = _load_kernels()


def native() -> bool:
    """Whether the C kernels are in use."""
    return _kernels.__name__.endswith("_native")


def split(
    raw: Buffer, width: int, rotate: bool, op: Op = Op.NONE, base: Buffer | None = None
) -> list[memoryview]:
    """The elements' byte planes, most significant first (each n bytes for n elements).

    Each element is first transformed against its base element by `op`, then
    rotated left one bit if `rotate`.
    """
    src = memoryview(raw).cast("B")
    n = len(src) // width
    if width == 1 and op == Op.NONE and not rotate:
        return [src]
    out = memoryview(bytearray(len(src)))
    _kernels.split(src, out, width, rotate, op, base)
    return [out[p * n : (p + 1) * n] for p in range(width)]


def join(
    dst: memoryview,
    planes: Sequence[Buffer],
    width: int,
    rotate: bool,
    op: Op = Op.NONE,
    base: Buffer | None = None,
) -> None:
    """Fill `dst` (len(planes[p]) * width bytes) from the planes: split's inverse."""
    _kernels.join(dst, planes, width, rotate, op, base)
