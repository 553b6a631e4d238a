"""Strategy results: exactly the float64 formula, rounded once to the dtype (checked element by element)."""

from __future__ import annotations

import io
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_mgit import config
from git_mgit.gitcmd import find_repo
from git_mgit.merge import merge_manifests, views
from git_mgit.merge.strategy import Rules, Strategy
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.clean import clean
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.numerics import from_float64, to_float64
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo
from tests.test_numerics import reference, same

DTYPES = ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I32", "I8"]


def safetensors_bytes(tensors: dict[str, tuple[str, tuple[int, ...], bytes]], meta=None) -> bytes:
    """A minimal writer, independent of the code under test."""
    doc: dict = {"__metadata__": meta} if meta else {}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        doc[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    head = json.dumps(doc).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(d for _, _, d in tensors.values())


@pytest.fixture
def store(tmp_path: Path):
    repo = init_mgit_repo(tmp_path / "r")
    run_git("config", "mgit.chunkSize", "4096", cwd=repo)  # tensors span several chunks
    s = ChunkStore(find_repo(repo))
    yield s, config.load(find_repo(repo))
    s.close()


def stored(store, data: bytes, path: str = "m.safetensors") -> mf.Manifest:
    s, cfg = store
    return mf.parse(clean(io.BytesIO(data), "", s, cfg))


def values(dtype: str, rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    if dtype.startswith("I"):
        return rng.integers(-40, 40, n).astype(np.float64)
    x = rng.standard_normal(n) * scale
    x[rng.random(n) < 0.05] = 0.0
    return x


def decoded(store, m: mf.Manifest, name: str) -> bytes:
    s, _ = store
    return b"".join(bytes(s.get_raw(h)) for h in m.tensors()[name].hashes)


def expected(strategy: Strategy, dtype: str, b: bytes, o: bytes, t: bytes) -> np.ndarray:
    xb, xo, xt = (to_float64(dtype, x) for x in (b, o, t))
    exact = strategy.combine(xb, xo, xt)  # the float64 formula
    if dtype.startswith("I"):
        return np.rint(exact) + 0.0  # integers have no negative zero
    return np.array([reference(dtype, float(v)) for v in exact])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("strategy", ["average", "average:0.3", "task-arithmetic"])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000))
@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_arithmetic_matches_float64_then_one_rounding(
    store, monkeypatch: pytest.MonkeyPatch, dtype: str, strategy: str, seed: int, n: int
) -> None:
    monkeypatch.setattr(views, "WINDOW", 7)  # windows straddle chunk boundaries
    rng = np.random.default_rng(seed)
    scale = 100.0 if dtype.startswith("F8") else 1.0
    base = values(dtype, rng, n, scale)
    versions = [
        base,
        base + values(dtype, rng, n, scale * 0.1),
        base + values(dtype, rng, n, scale * 0.1),
    ]
    raw = [from_float64(dtype, v) for v in versions]
    keep = {"other": ("F32", (2,), np.array([1.0, 2.0], "<f4").tobytes())}
    b, o, t = (stored(store, safetensors_bytes({"w": (dtype, (n,), r), **keep})) for r in raw)
    s = Strategy.parse(strategy)
    out = merge_manifests(b, o, t, *store, Rules((("*", s),)))
    conflict = raw[1] != raw[0] and raw[2] != raw[0] and raw[1] != raw[2]
    assert not out.conflicts and [name for name, _ in out.settled] == (["w"] if conflict else [])
    got = to_float64(dtype, decoded(store, out.manifest, "w"))
    if conflict:
        want = expected(s, dtype, *raw)
    else:  # rounding to the dtype undid a side's change: the plain three-way rule
        want = to_float64(dtype, raw[1] if raw[1] == raw[2] or raw[2] == raw[0] else raw[2])
    assert all(same(float(x), float(y)) for x, y in zip(got, want, strict=True))


def test_layout_changes_merge_and_the_manifest_is_what_clean_gives(store) -> None:
    w = {f"w{i}": ("F32", (300,), np.full(300, i, "<f4").tobytes()) for i in range(4)}
    base = stored(store, safetensors_bytes(w, {"epoch": "1"}))
    ours_t = {**w, "w1": ("F32", (300,), np.full(300, 10, "<f4").tobytes())}
    del ours_t["w3"]  # removed on ours only
    ours = stored(store, safetensors_bytes(ours_t, {"epoch": "1", "by": "ours"}))
    theirs_t = {**w, "new": ("BF16", (3,), b"\x80\x3f" * 3), "w2": ("F16", (2,), b"\x00\x3c" * 2)}
    theirs = stored(store, safetensors_bytes(theirs_t, {"epoch": "2"}))
    out = merge_manifests(base, ours, theirs, *store)
    assert not out.conflicts
    names = [s.name for s in out.manifest.segments if s.kind == "tensor"]
    assert names == ["w0", "w1", "w2", "new"]  # ours' order, then what only theirs has
    assert out.manifest.tensors()["w1"].hashes == ours.tensors()["w1"].hashes
    assert out.manifest.tensors()["w2"].dtype == "F16"
    assert out.dependent == (["w1", "w3"], ["new", "w2"])
    # smudge the merged file and clean it again: the same manifest, so `git status` stays clean
    s, _ = store
    data = b"".join(bytes(s.get_raw(h)) for seg in out.manifest.segments for h in seg.hashes)
    assert stored(store, data) == out.manifest
    header = json.loads(data[8 : 8 + struct.unpack("<Q", data[:8])[0]])
    assert header["__metadata__"] == {"epoch": "2", "by": "ours"}


def test_a_conflict_keeps_ours_and_names_the_tensor(store) -> None:
    def model(v: float) -> bytes:
        return safetensors_bytes({"w": ("F32", (8,), np.full(8, v, "<f4").tobytes())})

    base, ours, theirs = (stored(store, model(v)) for v in (1.0, 2.0, 3.0))
    out = merge_manifests(base, ours, theirs, *store)
    assert [(c.name, c.ours, c.theirs) for c in out.conflicts] == [("w", "changed", "changed")]
    assert out.manifest == ours
    assert math.isclose(
        float(to_float64("F32", decoded(store, merge_manifests(
            base, ours, theirs, *store, Rules.from_command_line([], "average")).manifest, "w"))[0]),
        2.5,
    )  # fmt: skip
