"""Multi-resolution reads: the top k planes bound every float, and read about k/width of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import git_mgit
from git_mgit import codecs, hashing
from git_mgit.codecs import codec
from git_mgit.codecs.decoder import BytesSource, ChunkDecoder, Level
from git_mgit.codecs.objectformat import Codec
from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo
from git_mgit.lineage import contents
from git_mgit.lineage.diff import tensors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.dtypes import DTYPES
from git_mgit.tensors.multires import read_chunk
from git_mgit.tensors.numerics import to_float64
from git_mgit.tensors.planebounds import FLOAT_DTYPES, bounds, known_bits
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo
from tests.strategies import build_safetensors, float_bit_patterns

WORDS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def weights(dtype: str, n: int, scale: float, seed: int) -> np.ndarray:
    """Normal weights as the dtype's bit patterns (compressible: the `planes` codec keeps them)."""
    x = np.random.default_rng(seed).standard_normal(n) * scale
    if dtype == "BF16":
        return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    ftype = {"F16": np.float16, "F32": np.float32, "F64": np.float64}[dtype]
    with np.errstate(over="ignore"):  # a large scale overflows F16 to inf, as meant
        return x.astype(ftype).view(WORDS[np.dtype(ftype).itemsize])


def blob(encoded: codecs.Encoded) -> bytes:
    return b"".join(bytes(p) for p in encoded.parts)


def encode_as(which: Codec, words: np.ndarray, dtype: str, base: bytes | None = None) -> bytes:
    raw = words.tobytes()
    width, sign_at = codec.layout(dtype, len(raw))
    b = None if base is None else codecs.Base(base, hashing.digest(base), 0)
    return blob(
        codec._encode_as(which, memoryview(raw), dtype, width, sign_at, hashing.digest(raw), b)
    )


def read(blobs: list[bytes], dtype: str, k: int) -> tuple[np.ndarray, bool]:
    """The chain's elements as its top k planes give them; whether only those were read."""
    chunk = ChunkDecoder([Level(BytesSource(b)) for b in blobs])
    out = bytearray(chunk.size)
    planewise = read_chunk(chunk, dtype, k, memoryview(out))
    return np.frombuffer(out, WORDS[codec.layout(dtype, chunk.size)[0]]), planewise


@st.composite
def float_chunks(draw: st.DrawFn) -> tuple[str, np.ndarray]:
    """Normal weights at any scale, with -0.0, denormals, huge values, NaN and inf planted."""
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    scale = 2.0 ** draw(st.integers(-30, 14))
    words = weights(dtype, 4096, scale, draw(st.integers(0, 2**32 - 1)))
    info = DTYPES[dtype]
    specials = float_bit_patterns(info)
    specials += [(1 << (info.bits - 1)) | p for p in float_bit_patterns(info)]  # their negatives
    plants = st.tuples(st.integers(0, words.size - 1), st.sampled_from(specials))
    for i, bits in draw(st.lists(plants, max_size=40)):
        words[i] = bits & ((1 << info.bits) - 1)
    return dtype, words


@given(chunk=float_chunks())
@settings(max_examples=60, deadline=None)
def test_every_plane_count_bounds_the_true_values(chunk: tuple[str, np.ndarray]) -> None:
    dtype, words = chunk
    with np.errstate(invalid="ignore"):  # signalling NaNs
        true = to_float64(dtype, words.tobytes())
    width, sign_at = codec.layout(dtype, words.nbytes)
    planes_blob, raw_blob = (
        encode_as(Codec.PLANES, words, dtype),
        encode_as(Codec.RAW, words, dtype),
    )
    nan = np.isnan(true)
    prev = None
    for k in range(1, width + 1):
        got, planewise = read([planes_blob], dtype, k)
        assert planewise == (k < width)
        whole, planewise = read([raw_blob], dtype, k)
        assert not planewise  # `raw`: decoded whole, then truncated to the same bits
        mask = known_bits(width, sign_at, k)
        assert np.array_equal(got & WORDS[width](mask), whole & WORDS[width](mask))
        b = bounds(dtype, got, mask)
        assert np.all(b.low[~nan] <= true[~nan]) and np.all(true[~nan] <= b.high[~nan])
        assert np.all(b.low[nan] == -np.inf) and np.all(b.high[nan] == np.inf)
        if prev is not None:  # nested: more planes never widen a bound
            assert np.all(b.low >= prev.low) and np.all(b.high <= prev.high)
        prev = b
    exact = ~nan
    assert np.array_equal(prev.low[exact], true[exact])
    assert np.array_equal(prev.high[exact], true[exact])


def test_the_sign_and_exponent_come_with_the_top_two_planes() -> None:
    # F32 and BF16: plane 1 is the exponent, plane 2 adds the sign and 7 mantissa bits.
    for dtype, width in (("F32", 4), ("BF16", 2)):
        sign_at = codec.layout(dtype, 8)[1]
        bits = 8 * width
        exponent = ((1 << 8) - 1) << (bits - 9)
        assert known_bits(width, sign_at, 1) == exponent
        assert known_bits(width, sign_at, 2) == exponent | (1 << (bits - 1)) | (0x7F << (bits - 16))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_an_xor_chain_reads_plane_by_plane(dtype: str) -> None:
    base = weights(dtype, 1 << 14, 0.02, 1)
    child = base.copy()
    child[::3] ^= WORDS[child.itemsize](0x5)  # low mantissa bits flipped: an xor delta
    child[::7] ^= WORDS[child.itemsize](1 << (8 * child.itemsize - 1))  # and some signs
    blobs = [
        encode_as(Codec.PLANES, base, dtype),
        encode_as(Codec.XOR, child, dtype, base.tobytes()),
    ]
    width, sign_at = codec.layout(dtype, base.nbytes)
    true = to_float64(dtype, child.tobytes())
    for k in range(1, width):
        got, planewise = read(blobs, dtype, k)
        assert planewise
        mask = WORDS[width](known_bits(width, sign_at, k))
        assert np.array_equal(got, child & mask)
        b = bounds(dtype, got, int(mask))
        assert np.all((b.low <= true) & (true <= b.high))


# -- through a repository ----------------------------------------------------------------


def model_file(tensors: dict[str, tuple[str, np.ndarray]]) -> bytes:
    return build_safetensors([(n, d, w.shape, w.tobytes()) for n, (d, w) in tensors.items()])


def commit(repo: Path, data: bytes, message: str) -> None:
    (repo / "model.safetensors").write_bytes(data)
    run_git("add", "model.safetensors", cwd=repo)
    run_git("commit", "-q", "-m", message, cwd=repo)


def top_codecs(repo: Path, tensor: str) -> set[str]:
    """The codecs of the objects holding a committed tensor's chunks."""
    store = ChunkStore(find_repo(repo))
    try:
        oid = run_git("rev-parse", "HEAD:model.safetensors", cwd=repo).stdout.strip()
        t = tensors(contents.manifests(store.repo, store.reader, oid, "file"))[tensor]
        return {store.decoder(h).levels[-1].header.codec.name for h in t.hashes}
    finally:
        store.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_mgit_repo(tmp_path / "repo")


def base_tensors() -> dict[str, tuple[str, np.ndarray]]:
    return {
        "big": ("F32", weights("F32", 1 << 20, 0.02, 2)),  # 4 MiB
        "half": ("F16", weights("F16", 1 << 16, 0.02, 3)),
        "brain": ("BF16", weights("BF16", 1 << 16, 0.02, 4)),
        "double": ("F64", weights("F64", 1 << 14, 0.02, 5)),
        "steps": ("I64", np.array([3, -(2**62) - 1, 2**53 + 1], dtype=np.int64)),
        "mask": ("U8", np.arange(7, dtype=np.uint8)),
    }


def check_model(repo: Path, tensors: dict[str, tuple[str, np.ndarray]], rev: str | None) -> None:
    previous: dict[str, object] = {}
    for k in (1, 2, 3, 4, 8, None):
        model = git_mgit.load("model.safetensors", rev=rev, planes=k, repo=repo)
        assert set(model) == set(tensors)
        for name, (dtype, words) in tensors.items():
            t = model[name]
            true = to_float64(dtype, words.tobytes())
            width = words.itemsize
            whole = k is None or dtype not in FLOAT_DTYPES
            assert t.dtype == dtype and t.planes == (width if whole else min(k, width))
            assert np.all((t.low <= true) & (true <= t.high))
            if t.planes == width and dtype in FLOAT_DTYPES:
                assert np.array_equal(t.value.astype(np.float64), true)
                assert np.array_equal(t.low, true) and np.array_equal(t.high, true)
            elif t.planes == width:
                assert np.array_equal(t.value, words)
            if name in previous:
                lo, hi = previous[name]
                assert np.all(t.low >= lo) and np.all(t.high <= hi)
            previous[name] = (t.low, t.high)
        assert model["brain"].value.dtype == np.float32 and model["half"].value.dtype == np.float16


def test_load_bounds_every_tensor_and_reads_a_fraction(repo: Path) -> None:
    tensors = base_tensors()
    commit(repo, model_file(tensors), "v1")
    check_model(repo, tensors, None)
    one = git_mgit.load("model.safetensors", planes=1, repo=repo)
    full = git_mgit.load("model.safetensors", repo=repo)
    assert full.bytes_full == one.bytes_full
    assert full.bytes_read >= full.bytes_full  # every object whole (and its header peeked first)
    assert one.bytes_read < 0.25 * full.bytes_full
    assert np.array_equal(full["steps"].value, tensors["steps"][1])
    # an int64 beyond 2**53 is not exact in float64: its bounds widen to hold it
    assert full["steps"].low[2] < full["steps"].high[2]


def test_xor_chains_read_planewise_and_sub_chains_fall_back(repo: Path) -> None:
    v1 = base_tensors()
    commit(repo, model_file(v1), "v1")
    v2 = {n: (d, w.copy()) for n, (d, w) in v1.items()}
    for dtype, w in v2.values():
        if dtype in FLOAT_DTYPES:
            w[::5] ^= w.dtype.type(1 << (8 * w.itemsize - 1))  # flipped signs: xor deltas
    commit(repo, model_file(v2), "v2: xor")
    assert top_codecs(repo, "big") == {"XOR"}
    check_model(repo, v2, None)
    check_model(repo, v1, "HEAD~1")
    xor_one = git_mgit.load("model.safetensors", planes=1, repo=repo)
    v3 = {n: (d, w.copy()) for n, (d, w) in v2.items()}
    for dtype, w in v3.values():
        if dtype in FLOAT_DTYPES:
            w += w.dtype.type(1)  # one unit in the last place everywhere: sub deltas
    commit(repo, model_file(v3), "v3: sub")
    assert top_codecs(repo, "big") == {"SUB"}
    check_model(repo, v3, None)
    sub_one = git_mgit.load("model.safetensors", planes=1, repo=repo)
    assert xor_one.bytes_read < 0.25 * xor_one.bytes_full  # both levels, top plane only
    assert sub_one.bytes_read >= sub_one.bytes_full  # decoded whole


def test_bad_arguments_are_one_line_errors(repo: Path) -> None:
    commit(repo, model_file({"w": ("F32", weights("F32", 16, 1.0, 0))}), "v1")
    with pytest.raises(MgitError, match="at least 1"):
        git_mgit.load("model.safetensors", planes=0, repo=repo)
    with pytest.raises(MgitError, match="leave out rev"):
        git_mgit.load("HEAD:model.safetensors", rev="HEAD", repo=repo)
    with pytest.raises(MgitError, match="unknown model"):
        git_mgit.load("nothing.safetensors", repo=repo)
