"""The lossy `qdelta` codec: decode gives exactly the reconstruction, within the error bound."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_mgit import codecs, hashing
from git_mgit.codecs import codec, qdelta
from git_mgit.codecs.decoder import BytesSource, ChunkDecoder, Level, decode_all
from git_mgit.codecs.objectformat import Codec, parse_header
from git_mgit.errors import ObjectCorrupt
from git_mgit.tensors import numerics
from git_mgit.tensors.dtypes import DTYPES

FLOATS = ["F16", "BF16", "F32", "F64"]
STEP = qdelta.step_for(1e-4)


def as_dtype(dtype: str, values: np.ndarray) -> bytes:
    return numerics.from_float64(dtype, np.asarray(values, dtype=np.float64))


def weights(dtype: str, n: int, seed: int, scale: float = 0.05) -> tuple[bytes, bytes]:
    """(parent, child): weights and a fine-tune of them, with -0.0, zeros and subnormals."""
    rng = np.random.default_rng(seed)
    parent = rng.standard_normal(n) * scale
    special = [0.0, -0.0, 1e-40, -3e-8]
    parent[: len(special)] = special[:n]
    child = parent + rng.standard_normal(n) * scale / 20
    child[:2] = [-0.0, 0.0][:n]
    return as_dtype(dtype, parent), as_dtype(dtype, child)


def stored(dtype: str, child: bytes, parent: bytes, step: float = STEP) -> tuple[bytes, bytearray]:
    """(the qdelta object, the reconstruction it must decode to)."""
    q = qdelta.quantize(dtype, child, parent, step)
    assert q is not None
    base = codecs.Base(parent, hashing.digest(parent), 0)
    enc = qdelta.encode(dtype, q, step, hashing.digest(q.recon), base)
    return b"".join(bytes(p) for p in enc.parts), q.recon


def decode(obj: bytes, parent: bytes) -> bytearray:
    return codecs.decode(obj, lambda h: parent if h == hashing.digest(parent) else None)


def half_ulp(dtype: str, x: np.ndarray) -> np.ndarray:
    """Half a unit in the last place of the dtype at x (the rounding to the dtype)."""
    d = DTYPES[dtype]
    _, e = np.frexp(np.abs(x))
    min_exponent = 2 - (1 << (d.exponent_bits - 1))
    return np.ldexp(1.0, np.maximum(e - 1, min_exponent) - d.mantissa_bits) / 2


@pytest.mark.parametrize("dtype", FLOATS)
def test_decode_is_the_reconstruction_within_the_error_bound(dtype: str) -> None:
    parent, child = weights(dtype, 50_001, seed=1)
    obj, recon = stored(dtype, child, parent)
    assert decode(obj, parent) == recon
    hdr = parse_header(obj)
    assert (hdr.codec, hdr.dtype, hdr.step) == (Codec.QDELTA, dtype, STEP)
    assert hdr.base_hash == hashing.digest(parent) and hdr.depth == 1
    got, want = numerics.to_float64(dtype, recon), numerics.to_float64(dtype, child)
    bound = STEP / 2 * (1 + 1e-9) + half_ulp(dtype, np.maximum(np.abs(got), np.abs(want)))
    assert np.all(np.abs(got - want) <= bound)
    assert len(obj) < len(child) / 2  # small deltas: one byte plane, mostly zeros


@given(
    dtype=st.sampled_from(FLOATS),
    n=st.integers(1, 3000),
    scale=st.sampled_from([1e-3, 0.05, 3.0, 1000.0]),
    eps=st.sampled_from([1e-6, 1e-4, 1e-2]),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_any_quantizable_chunk_round_trips(
    dtype: str, n: int, scale: float, eps: float, seed: int
) -> None:
    parent, child = weights(dtype, n, seed, scale)
    step = qdelta.step_for(eps)
    q = qdelta.quantize(dtype, child, parent, step)
    if q is None:  # a difference of 2**31 steps or more: stays lossless
        assert scale / eps > 1e6
        return
    obj, recon = stored(dtype, child, parent, step)
    assert decode(obj, parent) == recon == q.recon
    again = qdelta.quantize(dtype, recon, parent, step)  # compressing twice changes nothing
    assert again is not None and again.recon == recon


def test_the_narrowest_integer_width_holds_the_steps() -> None:
    parent = as_dtype("F32", np.zeros(1000))
    for largest, width in ((60, 1), (200, 2), (40_000, 4)):  # zigzag doubles them
        child = as_dtype("F32", np.linspace(-largest, largest, 1000) * STEP)
        obj, recon = stored("F32", child, parent)
        assert parse_header(obj).width == width
        assert decode(obj, parent) == recon


def test_an_unchanged_chunk_is_its_parent_and_costs_almost_nothing() -> None:
    parent, _ = weights("BF16", 100_000, seed=2)
    obj, recon = stored("BF16", parent, parent)
    assert recon == parent
    assert len(obj) < 300


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["child", "parent"])
def test_non_finite_values_are_not_quantized(dtype: str, bad: float, where: str) -> None:
    values = np.linspace(-1, 1, 100)
    broken = values.copy()
    broken[37] = bad
    child, parent = (broken, values) if where == "child" else (values, broken)
    assert qdelta.quantize(dtype, as_dtype(dtype, child), as_dtype(dtype, parent), STEP) is None


def test_differences_beyond_int32_steps_or_overflowing_the_dtype_are_not_quantized() -> None:
    zeros = as_dtype("F32", np.zeros(10))
    assert qdelta.quantize("F32", as_dtype("F32", np.full(10, 1e6)), zeros, STEP) is None
    # 65504 (F16's largest) in steps of 65520 rounds up to 65520: infinity in F16
    top, zero = as_dtype("F16", [65504.0]), as_dtype("F16", [0.0])
    assert qdelta.quantize("F16", top, zero, 65520.0) is None
    assert qdelta.quantize("F16", top, zero, 65504.0) is not None


def test_only_floats_of_equal_length_are_quantized() -> None:
    ints = np.arange(10, dtype=np.int32).tobytes()
    assert not qdelta.supports("I32") and qdelta.quantize("I32", ints, ints, STEP) is None
    floats = as_dtype("F32", np.ones(10))
    assert qdelta.quantize("F32", floats, floats[:-4], STEP) is None
    assert qdelta.quantize("F32", b"", b"", STEP) is None
    with pytest.raises(ValueError, match="positive"):
        qdelta.step_for(0.0)


def test_a_lossless_delta_on_top_of_a_qdelta_chain_decodes_block_by_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Frames count elements: a 1-byte qdelta level under an F32 `xor` level lines up."""
    monkeypatch.setattr(codec, "FRAME_SIZE", 1000)
    monkeypatch.setattr(qdelta, "FRAME_SIZE", 1000)
    parent, child = weights("F32", 25_003, seed=3)
    obj, recon = stored("F32", child, parent)
    grand = bytearray(recon)
    grand[100:140] = bytes(40)  # a later, lossless edit of the reconstruction
    top = codecs.encode(
        grand, "F32", hashing.digest(grand), codecs.Base(recon, hashing.digest(recon), 1)
    )
    assert top.header.codec.is_delta
    levels = [Level(BytesSource(obj)), Level(BytesSource(b"".join(bytes(p) for p in top.parts)))]
    chunk = ChunkDecoder(levels, parent)
    assert chunk.blocks == 26
    assert decode_all(chunk) == grand
    for i in (25, 3, 0):
        a, b = chunk.span(i)
        assert [bytes(x) for x in chunk.decode_block(i)] == [recon[a:b], grand[a:b]]


def _step_offset(obj: bytes) -> int:
    hdr = parse_header(obj)
    return obj.index(struct.pack("<d", hdr.step), 0, hdr.header_len)


def test_corrupt_objects_raise_object_corrupt() -> None:
    parent, child = weights("F32", 20_000, seed=4)
    obj, _ = stored("F32", child, parent)
    hdr = parse_header(obj)
    payload = bytearray(obj)
    payload[hdr.header_len + 10] ^= 0x40  # one stored integer off: decodes, but wrongly
    with pytest.raises(ObjectCorrupt):
        decode(bytes(payload), parent)
    at = _step_offset(obj)
    for step in (0.0, -STEP, float("nan"), float("inf")):
        bad = obj[:at] + struct.pack("<d", step) + obj[at + 8 :]
        with pytest.raises(ObjectCorrupt, match="qdelta"):
            parse_header(bad)
    stepped = obj[:at] + struct.pack("<d", STEP * 2) + obj[at + 8 :]  # a valid but wrong step
    with pytest.raises(ObjectCorrupt, match="does not decode"):
        decode(stepped, parent)
    with pytest.raises(ObjectCorrupt):
        parse_header(obj[: hdr.header_len - 3])
    with pytest.raises(ObjectCorrupt, match="without a base"):
        codecs.decode(obj)
    wrong_parent = bytearray(parent)
    wrong_parent[0] ^= 1
    with pytest.raises(ObjectCorrupt, match="does not decode"):
        codecs.decode(obj, lambda h: wrong_parent)
