"""Every element type a safetensors header may name, with its bit layout.

The table exists for the codecs: they need each element's width to split a
tensor into byte planes, and a float's layout (sign, exponent, mantissa
bits) to rotate the sign bit next to the mantissa so that one byte plane is
the whole exponent, which is the plane that compresses. It also gives the
parser the exact byte length a dtype and shape require.

Source of truth: the `Dtype` enum and `Dtype::bitsize` of the safetensors
crate (`safetensors/src/tensor.rs`) as compiled into the installed
`safetensors` 0.8.0 wheel: 22 variants, checked against that wheel, which
accepts exactly these names and rejects any other (the names are
case-sensitive). The float layouts are those of the formats the enum's doc
comments cite: IEEE 754 (F16, F32, F64), bfloat16, FP8 (arXiv 2209.05433,
E4M3 and E5M2, plus their FNUZ variants) and the OCP Microscaling spec (F4
is MXFP4 E2M1, F6_E2M3 / F6_E3M2 are MXFP6, F8_E8M0 is the unsigned
exponent-only scale type, with no sign bit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Kind = Literal["float", "int", "uint", "bool", "complex"]

U64_MAX = 2**64 - 1
"""The reference implementation counts elements and bits in u64 (usize)."""


@dataclass(frozen=True)
class DType:
    """One safetensors element type.

    For floats, `exponent_bits` and `mantissa_bits` give the layout and
    `signed` says whether a sign bit sits on top; for complex types they
    describe each of the two float parts (real then imaginary), each
    `bits // 2` wide. Integers and bools have no exponent or mantissa.
    """

    name: str
    bits: int
    kind: Kind
    signed: bool
    exponent_bits: int = 0
    mantissa_bits: int = 0

    @property
    def itemsize(self) -> int | None:
        """Bytes per element; None for packed sub-byte types (F4, F6_*)."""
        return self.bits // 8 if self.bits % 8 == 0 else None


def _float(name: str, exponent: int, mantissa: int, *, signed: bool = True) -> DType:
    return DType(name, int(signed) + exponent + mantissa, "float", signed, exponent, mantissa)


# In the order of the reference enum (increasing alignment).
DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("BOOL", 8, "bool", False),
        _float("F4", 2, 1),
        _float("F6_E2M3", 2, 3),
        _float("F6_E3M2", 3, 2),
        DType("U8", 8, "uint", False),
        DType("I8", 8, "int", True),
        _float("F8_E5M2", 5, 2),
        _float("F8_E4M3", 4, 3),
        _float("F8_E8M0", 8, 0, signed=False),
        _float("F8_E4M3FNUZ", 4, 3),
        _float("F8_E5M2FNUZ", 5, 2),
        DType("I16", 16, "int", True),
        DType("U16", 16, "uint", False),
        _float("F16", 5, 10),
        _float("BF16", 8, 7),
        DType("I32", 32, "int", True),
        DType("U32", 32, "uint", False),
        _float("F32", 8, 23),
        DType("C64", 64, "complex", True, 8, 23),
        _float("F64", 11, 52),
        DType("I64", 64, "int", True),
        DType("U64", 64, "uint", False),
    )
}


def sign_below_exponent(name: str) -> int | None:
    """The bit just below the exponent of one float (of each part of a complex), else None.

    The byte-plane layout moves the sign bit there (codecs/planes.py), so the
    top plane of an fp32 or bf16 element is its whole exponent and the sign
    is the top bit of the next plane. None for types without a sign bit or
    exponent (integers, bools, F8_E8M0).
    """
    d = DTYPES.get(name)
    if d is None or d.kind not in ("float", "complex") or not d.signed:
        return None
    bits = d.bits // 2 if d.kind == "complex" else d.bits
    return bits - 1 - d.exponent_bits


def nbytes(dtype: str | DType, shape: Sequence[int]) -> int:
    """The exact data length safetensors requires for `dtype` and `shape`.

    Mirrors the reference `Metadata::validate`: the element count is folded
    left to right in u64 and any partial product above 2**64 - 1 is an
    overflow (so `[2**63, 4, 0]` is rejected while `[0, 2**63, 4]` is a
    valid empty tensor); the bit count must fit in u64 too; and a packed
    sub-byte tensor must fill a whole number of bytes (an F4 tensor needs an
    even element count, an F6 one a multiple of 4, a 0-d F4 is invalid).
    Raises ValueError for an unknown dtype, a negative dimension, an
    overflow or a partial byte.
    """
    info = dtype if isinstance(dtype, DType) else DTYPES.get(dtype)
    if info is None:
        raise ValueError(f"unknown dtype {dtype!r}")
    count = 1
    for dim in shape:
        if dim < 0:
            raise ValueError(f"negative dimension {dim}")
        count *= dim
        if count > U64_MAX:
            raise ValueError(f"element count of shape {tuple(shape)} overflows 64 bits")
    bits = count * info.bits
    if bits > U64_MAX:
        raise ValueError(f"size of {info.name} shape {tuple(shape)} overflows 64 bits")
    if bits % 8:
        raise ValueError(f"{info.name} shape {tuple(shape)} holds {bits} bits, not whole bytes")
    return bits // 8


# The same element types in numpy (little-endian type codes) and torch (attribute names of
# the `torch` module); the tables the codecs, merges, `commit_model` and the runtime share.
NUMPY: dict[str, str] = {
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
    "BOOL": "?",
}
TORCH: dict[str, str] = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "C64": "complex64",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
}
