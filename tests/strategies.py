"""Hypothesis strategies for safetensors files, valid and not.

Shared by every byte-exact round-trip test: `safetensors_files()` covers
every dtype the format knows, 0-d and empty tensors, odd sizes, float
special values (NaN payloads, -0.0, denormals, infinities), optional
metadata, awkward tensor names, JSON key order that differs from file
order, non-canonical JSON spacing and header padding. Sizes stay at a few
KB so that hundreds of examples run in seconds.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

from git_mgit.tensors.dtypes import DTYPES, DType, nbytes

TensorSpec = tuple[str, str, Sequence[int], bytes]
"""(name, dtype, shape, raw little-endian data) as build_safetensors takes them."""

FIELDS = ("dtype", "shape", "data_offsets")


def build_safetensors(
    tensors: Sequence[TensorSpec],
    metadata: dict[str, str] | None = None,
    order: Sequence[int] | None = None,
    pad: int = 0,
    *,
    separators: tuple[str, str] = (",", ":"),
    fields: Sequence[str] = FIELDS,
    ensure_ascii: bool = False,
) -> bytes:
    """A safetensors file with the data laid out in `tensors` order.

    `order` lists indices into `tensors` in the order their keys appear in
    the JSON (default: data order); `pad` appends that many spaces to the
    header, as writers do to align the data. The keyword arguments vary the
    JSON's spelling without changing its meaning. Offsets follow the data
    lengths given, so a `data` of the wrong size makes a header that lies.
    """
    item, key = separators

    def dump(value: object) -> str:
        return json.dumps(value, separators=separators, ensure_ascii=ensure_ascii)

    offsets, at = [], 0
    for _, _, _, data in tensors:
        offsets.append((at, at + len(data)))
        at += len(data)
    members = [] if metadata is None else [f'"__metadata__"{key}{dump(metadata)}']
    for i in range(len(tensors)) if order is None else order:
        name, dtype, shape, _ = tensors[i]
        values = {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets[i])}
        entry = item.join(f"{dump(f)}{key}{dump(values[f])}" for f in fields)
        members.append(f"{dump(name)}{key}{{{entry}}}")
    header = ("{" + item.join(members) + "}").encode() + b" " * pad
    return struct.pack("<Q", len(header)) + header + b"".join(t[3] for t in tensors)


def float_bit_patterns(dtype: DType) -> list[int]:
    """Bit patterns of the values codecs get wrong: signed zeros, denormals, inf, NaN payloads.

    Built from the layout alone, so they exist for every float width (for
    complex types, for each float part). Formats without infinities (the
    FNUZ and MX types) read some of these as NaN or large finite values:
    the bits are what matters, not the value.
    """
    e, m = dtype.exponent_bits, dtype.mantissa_bits
    top = ((1 << e) - 1) << m
    mant = (1 << m) - 1
    sign = 1 << (e + m) if dtype.signed else 0
    patterns = {0, sign, 1, mant, 1 << m, top, top | 1, top | mant, sign | top | mant}
    patterns |= {top | (1 << (m - 1)), sign | top | (1 << (m - 1)) | 1} if m else set()
    patterns |= {(top - (1 << m)) | mant, sign | 1}
    return sorted(patterns)


@st.composite
def shapes(draw: st.DrawFn, dtype: str, max_dims: int = 3, max_side: int = 7) -> tuple[int, ...]:
    """A small shape (0-d, empty and odd sides included) that fills whole bytes for `dtype`."""
    shape = tuple(draw(st.lists(st.integers(0, max_side), max_size=max_dims)))
    try:
        nbytes(dtype, shape)
    except ValueError:  # packed sub-byte types: 2 F4 or 4 F6 elements per whole byte run
        shape += (8 // math.gcd(DTYPES[dtype].bits, 8),)
    return shape


@st.composite
def tensor_data(draw: st.DrawFn, dtype: str, shape: Sequence[int]) -> bytes:
    """Random bytes of the right length, with float special values planted among them."""
    info = DTYPES[dtype]
    raw = bytearray(draw(st.binary(min_size=nbytes(dtype, shape), max_size=nbytes(dtype, shape))))
    if info.kind in ("float", "complex") and info.itemsize and raw:
        width = info.itemsize // 2 if info.kind == "complex" else info.itemsize
        view = np.frombuffer(raw, dtype=f"<u{width}")
        plants = st.tuples(st.integers(0, len(view) - 1), st.sampled_from(float_bit_patterns(info)))
        for index, bits in draw(st.lists(plants, max_size=8)):
            view[index] = bits
    return bytes(raw)


tensor_names = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "model.layers.0.self_attn.q_proj.weight",
            "with space",
            " ",
            "",
            "ü.名前.🙂",
            "a\nb",
            '"q"',
            "\\",
            "__metadata",
        ]
    ),
).filter(lambda n: n != "__metadata__")

metadata_maps = st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=4)


@st.composite
def tensor_specs(draw: st.DrawFn, max_tensors: int = 6) -> list[TensorSpec]:
    """Tensors in data order: unique names, any dtype, a valid shape and data for each."""
    names = draw(st.lists(tensor_names, max_size=max_tensors, unique=True))
    specs: list[TensorSpec] = []
    for name in names:
        dtype = draw(st.sampled_from(sorted(DTYPES)))
        shape = draw(shapes(dtype))
        specs.append((name, dtype, shape, draw(tensor_data(dtype, shape))))
    return specs


@st.composite
def safetensors_files(draw: st.DrawFn, max_tensors: int = 6) -> bytes:
    """Complete, valid safetensors file bytes (see the module docstring for what varies)."""
    specs = draw(tensor_specs(max_tensors))
    order = draw(st.permutations(range(len(specs))))
    spelling = draw(
        st.sampled_from([{}, {"separators": (", ", ": ")}, {"separators": (",\n ", " :\t")}])
    )
    return build_safetensors(
        specs,
        metadata=draw(metadata_maps),
        order=order,
        pad=draw(st.integers(0, 9)),
        fields=draw(st.sampled_from([FIELDS, FIELDS[::-1]])),
        ensure_ascii=draw(st.booleans()),
        **spelling,
    )


@st.composite
def _truncated(draw: st.DrawFn) -> bytes:
    blob = draw(safetensors_files())
    return blob[: draw(st.integers(0, len(blob) - 1))]


@st.composite
def _lying_length(draw: st.DrawFn) -> bytes:
    """The 8-byte prefix claims a header a little shorter or longer than it is."""
    blob = draw(safetensors_files())
    n = struct.unpack("<Q", blob[:8])[0]
    wrong = draw(st.integers(1, n + 16).filter(lambda k: k != n))
    return struct.pack("<Q", wrong) + blob[8:]


@st.composite
def _lying_offsets(draw: st.DrawFn) -> bytes:
    """One tensor's begin or end moved: its length no longer matches its dtype and shape."""
    specs = draw(tensor_specs().filter(bool))
    blob = build_safetensors(specs)
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + n])
    name = draw(st.sampled_from(sorted(header)))
    side = draw(st.integers(0, 1))
    moved = header[name]["data_offsets"][side] + draw(st.integers(-3, 3).filter(bool))
    header[name]["data_offsets"][side] = moved
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + blob[8 + n :]


@st.composite
def _wrong_data_length(draw: st.DrawFn) -> bytes:
    """A valid header followed by too much data."""
    return draw(safetensors_files()) + draw(st.binary(min_size=1, max_size=16))


def non_safetensors_bytes() -> st.SearchStrategy[bytes]:
    """Bytes that are not one complete, valid safetensors file.

    Either `parse_header` rejects them or their header implies a different
    file size (a truncated file, trailing bytes): the file must be stored
    opaque either way. Random blobs, text, truncated files, a length prefix
    that lies, offsets that lie, trailing data.
    """
    return st.one_of(
        st.binary(max_size=64),
        st.text(max_size=64).map(str.encode),
        st.sampled_from(
            [b"PK\x03\x04" + bytes(60), b"\x80\x02}q\x00.", b'{"a": 1}', b"GGUF\x03\x00"]
        ),
        _truncated(),
        _lying_length(),
        _lying_offsets(),
        _wrong_data_length(),
    )
