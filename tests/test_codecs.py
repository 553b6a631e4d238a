"""Codecs: exact round trips, codec choice, and corruption detection."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_mgit import codecs, hashing
from git_mgit.codecs.objectformat import Codec, parse_header
from git_mgit.errors import ObjectCorrupt

DTYPES = ["F64", "F32", "F16", "BF16", "F8_E4M3", "I64", "I32", "I16", "I8", "U8", "BOOL", "bytes"]


def roundtrip(raw: bytes, dtype: str, base: codecs.Base | None = None) -> codecs.Encoded:
    h = hashing.digest(raw)
    enc = codecs.encode(raw, dtype, h, base)
    blob = b"".join(bytes(p) for p in enc.parts)
    assert len(blob) == enc.size
    out = codecs.decode(
        blob, lambda bh: bytearray(base.raw) if base and bh == base.content_hash else None, h
    )
    assert bytes(out) == raw
    return enc


@given(dtype=st.sampled_from(DTYPES), data=st.binary(max_size=4096))
@settings(max_examples=200, deadline=None)
def test_any_bytes_round_trip(dtype: str, data: bytes) -> None:
    roundtrip(data, dtype)


@given(
    dtype=st.sampled_from(DTYPES),
    data=st.binary(min_size=8, max_size=2048),
    flips=st.integers(0, 50),
)
@settings(max_examples=100, deadline=None)
def test_delta_round_trip(dtype: str, data: bytes, flips: int) -> None:
    base = codecs.Base(data, hashing.digest(data), 0)
    roundtrip(flipped(data, flips), dtype, base)


def flipped(data: bytes, flips: int) -> bytes:
    """`data` with `flips` random bytes changed (a training step's worth of difference)."""
    cur = bytearray(data)
    rng = np.random.default_rng(flips)
    for i in rng.integers(0, len(cur), flips):
        cur[i] ^= int(rng.integers(1, 256))
    return bytes(cur)


def special_floats(dtype: str) -> bytes:
    """NaN payloads, signed zeros, denormals and infinities as exact bit patterns."""
    if dtype == "F32":
        bits = [0x7FC00001, 0xFFC12345, 0x80000000, 0, 1, 0x807FFFFF, 0x7F800000, 0xFF800000]
        return np.array(bits * 100, dtype=np.uint32).tobytes()
    bits = [0x7FC1, 0xFFFF, 0x8000, 0, 1, 0x807F, 0x7F80, 0xFF80]
    return np.array(bits * 100, dtype=np.uint16).tobytes()


@pytest.mark.parametrize("dtype", ["F32", "BF16", "F16"])
def test_special_float_bit_patterns_survive(dtype: str) -> None:
    roundtrip(special_floats(dtype), dtype)


def normal_weights(n: int, dtype: str, seed: int = 0) -> bytes:
    x = np.random.default_rng(seed).standard_normal(n, dtype=np.float32) * 0.02
    if dtype == "BF16":
        return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return x.tobytes()


@pytest.mark.parametrize(("dtype", "min_ratio"), [("BF16", 1.4), ("F32", 1.15)])
def test_planes_compress_normal_weights(dtype: str, min_ratio: float) -> None:
    raw = normal_weights(1 << 20, dtype)
    enc = roundtrip(raw, dtype)
    assert enc.header.codec == Codec.PLANES
    assert len(raw) / enc.size >= min_ratio


def test_incompressible_bytes_use_raw_codec() -> None:
    raw = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    assert roundtrip(raw, "U8").header.codec == Codec.RAW


def test_fine_tune_delta_is_chosen_and_smaller() -> None:
    base_raw = normal_weights(1 << 18, "F32")
    x = np.frombuffer(base_raw, dtype=np.float32)
    child = (
        x + np.random.default_rng(2).standard_normal(x.size, dtype=np.float32) * 1e-5
    ).tobytes()
    base = codecs.Base(base_raw, hashing.digest(base_raw), 3)
    enc = roundtrip(child, "F32", base)
    alone = codecs.encode(child, "F32", hashing.digest(child))
    assert enc.header.codec in (Codec.XOR, Codec.SUB)
    assert enc.header.depth == 4 and enc.header.base_hash == base.content_hash
    assert enc.size < alone.size * codecs.DELTA_GAIN


def test_unrelated_base_is_not_used() -> None:
    a, b = normal_weights(1 << 16, "F32", 1), normal_weights(1 << 16, "F32", 2)
    enc = roundtrip(a, "F32", codecs.Base(b, hashing.digest(b), 0))
    assert enc.header.codec == Codec.PLANES


def test_chain_depth_cap_forces_standalone() -> None:
    base_raw = normal_weights(1 << 14, "F32")
    child = bytearray(base_raw)
    child[0] ^= 1
    enc = codecs.encode(
        bytes(child),
        "F32",
        hashing.digest(child),
        codecs.Base(base_raw, b"\1" * 32, 8),
        max_depth=8,
    )
    assert not enc.header.codec.is_delta


def encoded_blob(raw: bytes, dtype: str) -> bytearray:
    enc = codecs.encode(raw, dtype, hashing.digest(raw))
    return bytearray(b"".join(bytes(p) for p in enc.parts))


@pytest.mark.parametrize("where", ["payload_end", "payload_start", "magic", "hash"])
def test_corruption_is_detected(where: str) -> None:
    raw = normal_weights(1 << 16, "F32")
    blob = encoded_blob(raw, "F32")
    hdr = parse_header(blob)
    pos = {"payload_end": len(blob) - 1, "payload_start": hdr.header_len, "magic": 0, "hash": 20}[
        where
    ]
    blob[pos] ^= 0x40
    with pytest.raises(ObjectCorrupt):
        codecs.decode(blob, expected_hash=hashing.digest(raw))


def test_truncated_object_is_detected() -> None:
    raw = normal_weights(1 << 12, "F32")
    blob = encoded_blob(raw, "F32")
    for cut in (3, 30, len(blob) - 1):
        with pytest.raises(ObjectCorrupt):
            codecs.decode(blob[:cut])


def test_misfiled_object_is_detected() -> None:
    raw = normal_weights(1 << 10, "F32")
    with pytest.raises(ObjectCorrupt, match="filed as"):
        codecs.decode(encoded_blob(raw, "F32"), expected_hash=b"\0" * 32)


@given(
    dtype=st.sampled_from(DTYPES),
    data=st.binary(min_size=8, max_size=4096),
    flips=st.integers(1, 50),
)
@settings(max_examples=100, deadline=None)
def test_a_reversed_xor_delta_decodes_to_its_base(dtype: str, data: bytes, flips: int) -> None:
    """B stored as `xor` of A, reversed: A as `xor` of B, the same payload, exact both ways."""
    a, b = data, flipped(data, flips)
    ha, hb = hashing.digest(a), hashing.digest(b)
    forward = codecs.encode_as(Codec.XOR, b, dtype, hb, codecs.Base(a, ha, 2))
    blob = b"".join(bytes(p) for p in forward.parts)
    back = codecs.reversed_xor(blob, depth=1)
    assert back is not None and back.header.content_hash == ha and back.header.base_hash == hb
    assert back.header.depth == 1 and back.parts[1:] and bytes(back.parts[-1]) in blob
    reversed_blob = b"".join(bytes(p) for p in back.parts)
    out = codecs.decode(reversed_blob, lambda h: bytearray(b) if h == hb else None, ha)
    assert bytes(out) == a
    whole = b"".join(bytes(p) for p in codecs.encode(a, dtype, ha).parts)
    assert codecs.reversed_xor(whole, depth=1) is None  # only xor objects reverse
