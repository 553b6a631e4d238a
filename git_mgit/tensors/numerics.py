"""Tensor elements as float64 and back, correctly rounded, for every safetensors dtype numpy can hold.

to_float64 is exact for every type (float64 holds every value of F32, F16,
BF16 and the 8-bit floats; integers up to 2**53). from_float64 rounds to
nearest, ties to even, from the float64 value directly (never through an
intermediate format: rounding twice can differ by one unit in the last
place). Overflow follows each format: IEEE-like formats (F16, BF16, F8_E5M2)
become infinite; formats without infinities (F8_E4M3, which is E4M3FN, and
the FNUZ formats) become NaN. Integers are rounded half to even and must fit.

BF16 is the top half of an F32; the 8-bit floats go through a 256-entry
table computed from their bit layout (dtypes.py). Packed 4- and 6-bit types
and F8_E8M0 (a bare power-of-two scale) have no arithmetic here: None / ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from git_mgit.tensors.dtypes import DTYPES, NUMPY

WINDOW = 1 << 20  # elements converted to float64 at a time (diffs, merges, statistics)

# A bool's byte may hold any value in a file: read it as the byte it is.
_NUMPY = {**NUMPY, "BOOL": "u1"}


@cache
def _f8_table(name: str) -> np.ndarray:
    """Every one of the 256 codes of an 8-bit float format, as float64."""
    d = DTYPES[name]
    e_bits, m_bits = d.exponent_bits, d.mantissa_bits
    fnuz = name.endswith("FNUZ")
    bias = (1 << (e_bits - 1)) - 1 + int(fnuz)
    out = np.empty(256, dtype=np.float64)
    for code in range(256):
        if not d.signed:  # E8M0: a bare power of two, 0xFF is NaN
            out[code] = np.nan if code == 0xFF else 2.0 ** (code - 127)
            continue
        sign = -1.0 if code & 0x80 else 1.0
        exp = (code >> m_bits) & ((1 << e_bits) - 1)
        man = code & ((1 << m_bits) - 1)
        if fnuz and code == 0x80:
            out[code] = np.nan
        elif name == "F8_E4M3" and exp == 15 and man == 7:
            out[code] = np.nan  # E4M3FN: no infinities, one NaN pattern per sign
        elif name == "F8_E5M2" and exp == 31:
            out[code] = sign * np.inf if man == 0 else np.nan
        elif exp == 0:
            out[code] = sign * man * 2.0 ** (1 - bias - m_bits)
        else:
            out[code] = sign * (1 + man / (1 << m_bits)) * 2.0 ** (exp - bias)
    return out


def element_width(dtype: str) -> int | None:
    d = DTYPES.get(dtype)
    return d.itemsize if d is not None else None


def to_float64(dtype: str, raw: bytes | bytearray | memoryview) -> np.ndarray | None:
    """The elements as float64 (complex128 for C64); None for packed sub-byte types."""
    if dtype in _NUMPY:
        arr = np.frombuffer(raw, dtype=_NUMPY[dtype])
        return arr.astype(np.complex128 if dtype == "C64" else np.float64)
    if dtype == "BF16":
        halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        with np.errstate(invalid="ignore"):  # signalling NaN payloads stay NaN: fine here
            return halves.view(np.float32).astype(np.float64)
    if dtype.startswith("F8_"):
        return _f8_table(dtype)[np.frombuffer(raw, dtype=np.uint8)]
    return None


_F8 = ("F8_E5M2", "F8_E4M3", "F8_E4M3FNUZ", "F8_E5M2FNUZ")


@dataclass(frozen=True)
class _Grid:
    """A small float format's rounding grid: precision, range and its special codes."""

    mantissa_bits: int
    min_exponent: int  # of the smallest normal number (subnormals share its quantum)
    max_finite: float
    overflow_code: int  # +inf, or NaN for formats without infinities
    nan_code: int
    sign_bit: int
    negative_zero: bool
    magnitudes: np.ndarray  # sorted finite magnitudes >= 0 ...
    codes: np.ndarray  # ... and their codes
    f32_shift: int | None = None  # the format is float32's top bits: code = f32 bits >> this


@cache
def _grid(dtype: str) -> _Grid:
    d = DTYPES[dtype]
    if dtype == "BF16":
        codes = np.arange(0x7F81, dtype=np.uint32)  # 0 .. +inf
        values = (codes << 16).view(np.float32).astype(np.float64)
        finite = np.isfinite(values)
        return _Grid(
            7, -126, float(values[finite][-1]), 0x7F80, 0x7FC0, 0x8000, True,
            values[finite], codes[finite].astype(np.uint16), 16,
        )  # fmt: skip
    table = _f8_table(dtype)
    positive = np.arange(0x80)
    finite = np.isfinite(table[positive])
    fnuz = dtype.endswith("FNUZ")
    bias = (1 << (d.exponent_bits - 1)) - 1 + int(fnuz)
    has_inf = dtype == "F8_E5M2"
    nan_code = 0x80 if fnuz else (0x7E if has_inf else 0x7F)
    return _Grid(
        d.mantissa_bits, 1 - bias, float(table[positive][finite].max()),
        0x7C if has_inf else nan_code, nan_code, 0x80, not fnuz,
        table[positive][finite], positive[finite].astype(np.uint8),
    )  # fmt: skip


def _round_to_grid(x: np.ndarray, g: _Grid) -> np.ndarray:
    """Codes of x rounded to nearest, ties to even, on the format's grid."""
    a = np.abs(x)
    _, e = np.frexp(a)  # a = f * 2**e with 0.5 <= f < 1: the leading bit is 2**(e - 1)
    quantum = np.ldexp(1.0, np.maximum(e - 1, g.min_exponent) - g.mantissa_bits)
    with np.errstate(invalid="ignore", over="ignore"):  # inf and NaN are handled below
        y = np.rint(a / quantum) * quantum  # exact: scaling by powers of two, rint ties to even
    over = ~(y <= g.max_finite)  # also NaN and inf inputs
    finite = np.where(over, 0.0, y)
    if g.f32_shift is not None:  # y is exact in float32: its top bits are the code (6x faster)
        codes = finite.astype(np.float32).view(np.uint32) >> np.uint32(g.f32_shift)
    else:
        idx = np.searchsorted(g.magnitudes, finite)
        codes = g.codes[np.minimum(idx, len(g.codes) - 1)].astype(np.uint32)
    codes = np.where(over, g.overflow_code, codes)
    negative = np.signbit(x) & (g.negative_zero | (codes != 0))
    codes = np.where(negative & (codes != g.nan_code), codes | g.sign_bit, codes)
    return np.where(np.isnan(x), g.nan_code, codes)


def can_compute(dtype: str) -> bool:
    """Whether from_float64 can store results in this dtype (arithmetic merges need it)."""
    return (dtype in _NUMPY and dtype != "BOOL") or dtype == "BF16" or dtype in _F8


def from_float64(dtype: str, x: np.ndarray) -> bytes:
    """The float64 (complex128 for C64) values stored as `dtype`, correctly rounded.

    ValueError for an integer out of the dtype's range, and for dtypes that
    have no arithmetic (BOOL, packed types, F8_E8M0).
    """
    if not can_compute(dtype):
        raise ValueError(f"{dtype} tensors cannot hold computed values")
    if dtype in ("F64", "F32", "F16", "C64"):
        with np.errstate(over="ignore"):  # overflow to inf is the IEEE result
            return x.astype(_NUMPY[dtype]).tobytes()
    if dtype == "BF16":
        return _round_to_grid(x, _grid(dtype)).astype("<u2").tobytes()
    if dtype in _F8:
        return _round_to_grid(x, _grid(dtype)).astype(np.uint8).tobytes()
    info = np.iinfo(np.dtype(_NUMPY[dtype]))
    r = np.rint(x)
    # Both bounds are powers of two, exact in float64 (info.max itself may not be).
    low, high = float(info.min), float(info.max + 1)
    if r.size and not (np.all(r >= low) and np.all(r < high)):  # NaN fails both
        raise ValueError(f"a computed value does not fit in {dtype} ({info.min}..{info.max})")
    return r.astype(_NUMPY[dtype]).tobytes()
