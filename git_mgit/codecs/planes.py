"""Byte-plane transforms: the layout that makes float weights compressible.

A float's exponent byte is highly repetitive while its low mantissa bytes are
noise. Moving each element's sign bit from the top to just below the
exponent (`sign_at`, from dtypes.sign_below_exponent) shifts the exponent up
one bit, so the top byte plane is the whole exponent (fp32, bf16) and
compresses ~3x, the mantissa planes are stored raw, and the sign is the top
bit of the second plane. Planes are ordered most significant first, so a
reader of the top k planes learns sign, exponent and the high mantissa bits:
values within known bounds. Objects written before format version 2 moved the
sign to bit 0 instead (a rotation left by one bit, `sign_at` 0): the same
transform, still decoded. A delta codec transforms each element against its
base element first (`Op`); the sign move is a bit permutation, so an `xor`
delta still splits plane by plane.

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


def _kernel_sign_at(sign_at: int | None) -> int:
    return -1 if sign_at is None else sign_at


def split(
    raw: Buffer,
    width: int,
    sign_at: int | None = None,
    op: Op = Op.NONE,
    base: Buffer | None = None,
) -> list[memoryview]:
    """The elements' byte planes, most significant first (each n bytes for n elements).

    Each element is first transformed against its base element by `op`, then
    its top (sign) bit moved down to bit `sign_at` (None: left in place).
    """
    src = memoryview(raw).cast("B")
    n = len(src) // width
    if width == 1 and op == Op.NONE and sign_at is None:
        return [src]
    out = memoryview(bytearray(len(src)))
    _kernels.split(src, out, width, _kernel_sign_at(sign_at), op, base)
    return [out[p * n : (p + 1) * n] for p in range(width)]


def join(
    dst: memoryview,
    planes: Sequence[Buffer],
    width: int,
    sign_at: int | None,
    op: Op = Op.NONE,
    base: Buffer | None = None,
) -> None:
    """Fill `dst` (len(planes[p]) * width bytes) from the planes: split's inverse."""
    _kernels.join(dst, planes, width, _kernel_sign_at(sign_at), op, base)
