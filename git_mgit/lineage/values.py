"""Element bytes to numbers, for comparing tensors: every safetensors dtype numpy can hold.

BF16 is the top half of an F32; the 8-bit floats go through a 256-entry
table computed from their bit layout (dtypes.py); packed 4- and 6-bit types
have no per-element view and return None.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from git_mgit.dtypes import DTYPES

_NUMPY = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "C64": "<c8",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "u1",
}


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


def as_numbers(dtype: str, raw: bytes | bytearray | memoryview) -> np.ndarray | None:
    """The elements as float64 (complex128 for C64); None for packed sub-byte types."""
    if dtype in _NUMPY:
        arr = np.frombuffer(raw, dtype=_NUMPY[dtype])
        return arr.astype(np.complex128 if dtype == "C64" else np.float64)
    if dtype == "BF16":
        halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return halves.view(np.float32).astype(np.float64)
    if dtype.startswith("F8_"):
        return _f8_table(dtype)[np.frombuffer(raw, dtype=np.uint8)]
    return None
