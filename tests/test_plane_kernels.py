"""The C kernels and the numpy definition of the byte-plane layout give the same bytes.

Both sign positions objects use are covered: just below the exponent (format
version 2) and bit 0 (version 1, a rotation left by one bit), which must
still decode.
"""

from __future__ import annotations

import shutil
import sysconfig
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_mgit import codecs, hashing
from git_mgit.codecs import codec, numpy_planes, planes
from git_mgit.codecs.objectformat import FLAG_SIGN_BELOW_EXPONENT, Codec, parse_header
from git_mgit.codecs.planes import Op
from git_mgit.errors import ObjectCorrupt
from git_mgit.tensors import dtypes

try:
    from git_mgit.codecs import _native
except ImportError:
    _native = None


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


def test_kernels_are_built_where_a_compiler_is() -> None:
    # pip builds the extension as optional: a failed build must not go unnoticed here.
    if _compiler() is not None:
        assert _native is not None, "a C compiler is here but git_mgit.codecs._native was not built"
        assert planes.native()


KERNELS = [numpy_planes] + ([_native] if _native is not None else [])


FLOATS = ["F16", "BF16", "F32", "F64"]


@st.composite
def layouts(draw: st.DrawFn) -> tuple[int, int]:
    """(width, sign_at): -1 keeps the sign, 0 is the version 1 rotation, any other bit too."""
    width = draw(st.sampled_from(planes.WIDTHS))
    floats = [dtypes.sign_below_exponent(d) for d in FLOATS if codec.layout(d, 8)[0] == width]
    return width, draw(st.sampled_from([-1, 0, *floats]) | st.integers(-1, 8 * width - 1))


@given(
    layout=layouts(),
    op=st.sampled_from(list(Op)),
    n=st.integers(0, 3000),
    seed=st.binary(min_size=8, max_size=8),
)
@settings(max_examples=200, deadline=None)
def test_split_and_join_agree_and_invert(
    layout: tuple[int, int], op: Op, n: int, seed: bytes
) -> None:
    width, sign_at = layout
    raw = hashing.digest(seed + b"raw") * (n * width // 32 + 1)
    raw = raw[: n * width]
    base = None if op == Op.NONE else (hashing.digest(seed) * (n * width // 32 + 1))[: n * width]
    results = []
    for kernels in KERNELS:
        dst = memoryview(bytearray(len(raw)))
        kernels.split(raw, dst, width, sign_at, op, base)
        results.append(bytes(dst))
    assert all(r == results[0] for r in results)
    rows = [results[0][p * n : (p + 1) * n] for p in range(width)]
    for kernels in KERNELS:
        out = memoryview(bytearray(len(raw)))
        kernels.join(out, rows, width, sign_at, op, base)
        assert bytes(out) == raw


def _moved(x: int, bits: int, p: int) -> int:
    """The layout's definition, one element in Python integers."""
    low, high = (1 << p) - 1, ((1 << bits) - 1) & ~((1 << (p + 1)) - 1)
    return ((x << 1) & high) | ((x >> (bits - 1)) << p) | (x & low)


@pytest.mark.parametrize("dtype", FLOATS)
def test_the_sign_sits_just_below_the_exponent(dtype: str) -> None:
    info = dtypes.DTYPES[dtype]
    width, sign_at = codec.layout(dtype, 8)
    assert sign_at == info.mantissa_bits  # the exponent shifts up one bit, onto the top
    xs = [0, 1, 1 << (info.bits - 1), 0x3C00, 0x3F80, 0x3F800000, (1 << info.bits) - 1, 12345]
    xs = [x & ((1 << info.bits) - 1) for x in xs]
    rows = planes.split(b"".join(x.to_bytes(width, "little") for x in xs), width, sign_at)
    for i, x in enumerate(xs):
        y = int.from_bytes(bytes(r[i] for r in rows), "big")
        assert y == _moved(x, info.bits, sign_at)
        exponent = (x >> info.mantissa_bits) & ((1 << info.exponent_bits) - 1)
        assert y >> (info.bits - info.exponent_bits) == exponent
        assert (y >> sign_at) & 1 == x >> (info.bits - 1)


@pytest.mark.parametrize("width", [2, 4, 8])
def test_sign_at_zero_is_the_version_1_rotation(width: int) -> None:
    bits = 8 * width
    xs = np.random.default_rng(width).integers(0, 1 << 64, 500, dtype=np.uint64)
    xs = xs.astype(numpy_planes.UINT[width])
    rows = planes.split(xs.tobytes(), width, 0)
    for i, x in enumerate(xs.tolist()):
        rotated = ((x << 1) | (x >> (bits - 1))) & ((1 << bits) - 1)
        assert int.from_bytes(bytes(r[i] for r in rows), "big") == rotated


def legacy_blob(raw: bytes, dtype: str, codec_: Codec, base: codecs.Base | None) -> bytes:
    """An object as format version 1 wrote it: the sign rotated to bit 0, version byte 1."""
    width, _ = codec.layout(dtype, len(raw))
    enc = codec._encode_as(codec_, memoryview(raw), dtype, width, 0, hashing.digest(raw), base)
    blob = bytearray(b"".join(bytes(p) for p in enc.parts))
    hdr = parse_header(blob)
    assert hdr.rotate and not hdr.sign_below_exponent
    blob[4] = 1  # the version byte
    return bytes(blob)


@pytest.mark.parametrize("dtype", FLOATS)
def test_version_1_objects_still_decode(dtype: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1 << 14) * 0.02
    raw = dtypes_bytes(x, dtype)
    child = dtypes_bytes(x + rng.standard_normal(x.size) * 1e-3, dtype)
    old = legacy_blob(raw, dtype, Codec.PLANES, None)
    assert codecs.decode(old, expected_hash=hashing.digest(raw)) == raw
    base = codecs.Base(raw, hashing.digest(raw), 0)
    old_delta = legacy_blob(child, dtype, Codec.XOR, base)
    assert codecs.decode(old_delta, lambda _h: bytearray(raw)) == child
    # a new delta on a version 1 base: each level decodes with its own layout
    width, sign_at = codec.layout(dtype, len(child))
    h_child = hashing.digest(child)
    new = codec._encode_as(Codec.XOR, memoryview(child), dtype, width, sign_at, h_child, base)
    assert new.header.sign_below_exponent
    levels = [codecs.Level(codecs.BytesSource(b)) for b in (old, b"".join(map(bytes, new.parts)))]
    assert codecs.decode_all(codecs.ChunkDecoder(levels)) == child


def dtypes_bytes(x: np.ndarray, dtype: str) -> bytes:
    if dtype == "BF16":
        return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return x.astype({"F16": np.float16, "F32": np.float32, "F64": np.float64}[dtype]).tobytes()


def test_new_float_objects_carry_the_flag_and_unknown_flags_are_refused() -> None:
    raw = dtypes_bytes(np.random.default_rng(4).standard_normal(4096), "F32")
    blob = bytearray(
        b"".join(bytes(p) for p in codecs.encode(raw, "F32", hashing.digest(raw)).parts)
    )
    assert blob[4] == 2 and blob[7] & FLAG_SIGN_BELOW_EXPONENT
    assert parse_header(blob).sign_at == 23
    blob[7] |= 0x80
    with pytest.raises(ObjectCorrupt, match="not one this git-mgit reads"):
        parse_header(blob)


@pytest.mark.parametrize("encoder", KERNELS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
@pytest.mark.parametrize("decoder", KERNELS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_objects_decode_whichever_kernels_wrote_them(
    monkeypatch: pytest.MonkeyPatch, encoder: ModuleType, decoder: ModuleType
) -> None:
    base_raw = bytes(range(256)) * 4096
    cur = bytearray(base_raw)
    cur[1000:1010] = b"\xff" * 10
    base = codecs.Base(base_raw, hashing.digest(base_raw), 0)
    for dtype in ("F32", "BF16", "I64", "U8"):
        monkeypatch.setattr(planes, "_kernels", encoder)
        enc = codecs.encode(bytes(cur), dtype, hashing.digest(cur), base)
        assert enc.header.codec.is_delta
        blob = b"".join(bytes(p) for p in enc.parts)
        monkeypatch.setattr(planes, "_kernels", decoder)
        assert codecs.decode(blob, lambda _h: bytearray(base_raw)) == cur


@pytest.mark.skipif(_native is None, reason="the C kernels are not built (see the test above)")
def test_native_rejects_mismatched_buffers() -> None:
    with pytest.raises(ValueError, match="width"):
        _native.split(b"1234", bytearray(4), 3, -1, 0, None)
    with pytest.raises(ValueError, match="sign_at"):
        _native.split(b"1234", bytearray(4), 4, 32, 0, None)
    with pytest.raises(ValueError, match="base"):
        _native.split(b"1234", bytearray(4), 4, -1, 1, None)
    with pytest.raises(ValueError, match="length"):
        _native.join(bytearray(8), [b"ab"] * 4, 4, -1, 1, b"123")
    with pytest.raises(ValueError, match="plane"):
        _native.join(bytearray(8), [b"ab"] * 3, 4, -1, 0, None)
    with pytest.raises(TypeError):
        _native.join(b"read-only", [b"ab"] * 4, 4, -1, 0, None)
