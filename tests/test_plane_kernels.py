"""The C kernels and the numpy definition of the byte-plane layout give the same bytes."""

from __future__ import annotations

import shutil
import sysconfig
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_mgit import codecs, hashing
from git_mgit.codecs import numpy_planes, planes
from git_mgit.codecs.planes import Op

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


@given(
    width=st.sampled_from(planes.WIDTHS),
    rotate=st.booleans(),
    op=st.sampled_from(list(Op)),
    n=st.integers(0, 3000),
    seed=st.binary(min_size=8, max_size=8),
)
@settings(max_examples=150, deadline=None)
def test_split_and_join_agree_and_invert(
    width: int, rotate: bool, op: Op, n: int, seed: bytes
) -> None:
    raw = hashing.digest(seed + b"raw") * (n * width // 32 + 1)
    raw = raw[: n * width]
    base = None if op == Op.NONE else (hashing.digest(seed) * (n * width // 32 + 1))[: n * width]
    results = []
    for kernels in KERNELS:
        dst = memoryview(bytearray(len(raw)))
        kernels.split(raw, dst, width, rotate, op, base)
        results.append(bytes(dst))
    assert all(r == results[0] for r in results)
    rows = [results[0][p * n : (p + 1) * n] for p in range(width)]
    for kernels in KERNELS:
        out = memoryview(bytearray(len(raw)))
        kernels.join(out, rows, width, rotate, op, base)
        assert bytes(out) == raw


def test_top_plane_is_the_exponent() -> None:
    # 1.0f = 0x3F800000: rotated left one bit the top byte is the biased exponent 127.
    one = (0x3F800000).to_bytes(4, "little") * 3
    rows = planes.split(one, 4, rotate=True)
    assert bytes(rows[0]) == bytes([127]) * 3
    assert [bytes(r) for r in rows[1:]] == [b"\0" * 3] * 3


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
        _native.split(b"1234", bytearray(4), 3, False, 0, None)
    with pytest.raises(ValueError, match="base"):
        _native.split(b"1234", bytearray(4), 4, False, 1, None)
    with pytest.raises(ValueError, match="length"):
        _native.join(bytearray(8), [b"ab"] * 4, 4, False, 1, b"123")
    with pytest.raises(ValueError, match="plane"):
        _native.join(bytearray(8), [b"ab"] * 3, 4, False, 0, None)
    with pytest.raises(TypeError):
        _native.join(b"read-only", [b"ab"] * 4, 4, False, 0, None)
