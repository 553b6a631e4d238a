"""`git mgit diff`: tensor-level differences, streamed from objects, checked against numpy."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from git_mgit.cli import main
from git_mgit.gitcmd import find_repo
from git_mgit.lineage import contents
from git_mgit.lineage import diff as model_diff
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import diff_manifests, natural_key
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.numerics import to_float64
from tests.gitsandbox import commit_files, run_git
from tests.mgitrepo import init_mgit_repo, mgit

RNG = np.random.default_rng(7)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = init_mgit_repo(tmp_path / "work")
    run_git("config", "mgit.chunkSize", "4096", cwd=root)  # several chunks per tensor
    monkeypatch.chdir(root)
    return root


def expected(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """numpy's answer on the whole arrays: bit-level changed share, max |b-a|, rel L2."""
    fa, fb = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    bits = f"u{a.itemsize}"
    return (
        float(np.mean(a.ravel().view(bits) != b.ravel().view(bits))),
        float(np.max(np.abs(fb - fa))),
        float(np.linalg.norm(fb - fa) / np.linalg.norm(fa)),
    )


def diff(ref_a: str, ref_b: str, *flags: str) -> dict[str, dict]:
    """`git mgit diff --json` in this process (the CLI tests below run the real command)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["diff", ref_a, ref_b, "--all", "--json", *flags]) == 0
    return {(c["new_name"] or c["old_name"]): c for c in json.loads(out.getvalue())["changes"]}


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (truncation), as uint16."""
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_file(bits: np.ndarray) -> bytes:
    """A safetensors file with one BF16 tensor (numpy has no bfloat16: write the header by hand)."""
    header = json.dumps(
        {"t": {"dtype": "BF16", "shape": [bits.size], "data_offsets": [0, bits.nbytes]}}
    )
    header += " " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header.encode() + bits.astype("<u2").tobytes()


def test_exact_statistics_per_dtype(repo: Path) -> None:
    w = RNG.standard_normal((40, 64)).astype(np.float32)  # 10 KiB: three 4 KiB chunks
    h = RNG.standard_normal((50, 30)).astype(np.float16)
    i = RNG.integers(-1000, 1000, (3000,), dtype=np.int32)
    w2 = w.copy()
    w2[5:9] += np.float32(1e-3)  # only the first chunk changes
    h2 = (h * np.float16(1.01)).astype(np.float16)
    i2 = i.copy()
    i2[::7] += 3
    commit_files(repo, {"m.safetensors": save({"w": w, "h": h, "i": i})}, "a")
    commit_files(repo, {"m.safetensors": save({"w": w2, "h": h2, "i": i2})}, "b")
    got = diff("HEAD~1:m.safetensors", "HEAD:m.safetensors")
    for name, (a, b) in {"w": (w, w2), "h": (h, h2), "i": (i, i2)}.items():
        frac, mx, rel = expected(a, b)
        assert got[name]["status"] == "changed"
        assert got[name]["elements"] == a.size
        assert got[name]["changed_fraction"] == frac
        assert got[name]["max_abs"] == pytest.approx(mx, rel=1e-12)
        assert got[name]["rel_l2"] == pytest.approx(rel, rel=1e-9)


def test_bf16_nan_payloads_negative_zero_and_infinities(repo: Path) -> None:
    t = bf16(RNG.standard_normal(3000))  # 6000 bytes: two chunks
    t2 = t.copy()
    t2[:100] ^= 0x8000  # sign flips
    z = np.array([0.0, 1.0, np.nan, np.inf], dtype=np.float32)
    z2 = np.array([-0.0, 1.0, np.nan, np.inf], dtype=np.float32)
    z2.view(np.uint32)[2] ^= 1  # another NaN payload
    zero, grown = np.zeros(4, np.float32), np.array([0, 0, 3, 0], np.float32)
    finite, overflow = np.array([1.0, 2.0], np.float32), np.array([1.0, np.inf], np.float32)
    files = {
        "a.safetensors": bf16_file(t),
        "b.safetensors": bf16_file(t2),
        "za.safetensors": save({"z": z, "b": zero, "o": finite}),
        "zb.safetensors": save({"z": z2, "b": grown, "o": overflow}),
    }
    files["mgit.toml"] = '[checks]\nallow-nonfinite = ["*.safetensors"]\n'  # NaN is the point
    commit_files(repo, files, "bf16 and special values")
    a = (t.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    b = (t2.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    got = diff("a.safetensors", "b.safetensors")["t"]
    assert got["changed_fraction"] == np.mean(t != t2)
    assert got["max_abs"] == pytest.approx(np.max(np.abs(b - a)), rel=1e-12)
    assert got["rel_l2"] == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a), rel=1e-9)
    got = diff("za.safetensors", "zb.safetensors")
    # bits differ at -0.0 and at the NaN; neither is a numeric difference
    assert got["z"]["changed_fraction"] == 2 / 4
    assert got["z"]["max_abs"] == 0.0 and got["z"]["rel_l2"] == 0.0
    assert got["b"]["rel_l2"] == "inf" and got["b"]["max_abs"] == 3.0  # from zeros: strict JSON
    assert got["o"]["max_abs"] == "inf" and got["o"]["changed_fraction"] == 0.5


def test_added_removed_renamed_reshaped_retyped_and_matched_by_structure(repo: Path) -> None:
    a = RNG.standard_normal((16, 16)).astype(np.float32)
    old = {
        "enc.0.w": a,
        "enc.1.w": a + 1,
        "gone": np.zeros(3, np.float32),
        "shape": np.zeros((4, 4), np.float32),
        "cast": a,
        "bert.layer.2.w": np.ones((8, 3), np.float32),
    }
    new = {
        "enc.0.w": a,
        "encoder.1.weight": a + 1,  # same content, new name: renamed
        "added": np.zeros(5, np.float32),
        "shape": np.zeros((2, 8), np.float32),
        "cast": a.astype(np.float16),
        "roberta.layer.2.w": np.full((8, 3), 2, np.float32),  # different name, same structure
    }
    commit_files(repo, {"old.safetensors": save(old), "new.safetensors": save(new)}, "two")
    got = diff("old.safetensors", "new.safetensors")  # across paths
    assert got["enc.0.w"]["status"] == "unchanged"
    assert got["encoder.1.weight"]["status"] == "renamed"
    assert got["encoder.1.weight"]["old_name"] == "enc.1.w"
    assert got["encoder.1.weight"]["rel_l2"] == 0.0
    assert got["gone"]["status"] == "removed" and got["added"]["status"] == "added"
    assert got["shape"]["status"] == "changed" and got["shape"]["new_shape"] == [2, 8]
    assert got["shape"]["max_abs"] == 0.0  # same bytes, new shape
    cast = got["cast"]
    assert cast["new_dtype"] == "F16" and cast["status"] == "changed"
    f16 = a.astype(np.float16).astype(np.float64)
    assert cast["max_abs"] == pytest.approx(np.max(np.abs(f16 - a)), rel=1e-12)
    assert cast["changed_fraction"] == np.mean(f16 != a)  # by value across dtypes
    matched = got["roberta.layer.2.w"]
    assert matched["status"] == "matched" and matched["old_name"] == "bert.layer.2.w"
    assert matched["rel_l2"] == pytest.approx(1.0)
    text = mgit("diff", "old.safetensors", "new.safetensors", cwd=repo).stdout
    assert "enc.1.w -> encoder.1.weight" in text and "enc.0.w" not in text
    assert "bert.layer.2.w -> roberta.layer.2.w  matched" in text
    assert text.splitlines()[0].split() == [
        "tensor", "status", "dtype", "shape", "changed", "max", "|diff|", "rel", "L2",
    ]  # fmt: skip
    assert (
        text.splitlines()[-1] == "2 changed, 1 added, 1 removed, 1 renamed, 1 matched, 1 unchanged"
    )
    stat = diff("old.safetensors", "new.safetensors", "--stat")
    assert stat["cast"]["max_abs"] is None and stat["enc.0.w"]["max_abs"] == 0.0


def test_lcs_matches_other_architectures_in_natural_order(repo: Path) -> None:
    """A 12-layer and a 3-layer model: layer.10 follows layer.9; shapes decide the pairs."""
    deep = {f"h.{i}.w": np.full((4, 4), i, np.float32) for i in range(12)}
    deep |= {f"h.{i}.b": np.full(4, i, np.float32) for i in range(12)}
    shallow = {f"blocks.{i}.weight": np.full((4, 4), i + 0.5, np.float32) for i in (0, 1, 2)}
    shallow["blocks.0.bias"] = np.full(4, 0.5, np.float32)
    shallow["head"] = np.zeros((2, 2), np.float32)
    commit_files(repo, {"a.safetensors": save(deep), "b.safetensors": save(shallow)}, "two")
    got = diff("a.safetensors", "b.safetensors")
    assert [got[f"blocks.{i}.weight"]["old_name"] for i in range(3)] == ["h.0.w", "h.1.w", "h.2.w"]
    assert got["blocks.0.bias"]["old_name"] == "h.0.b"
    assert {got[f"blocks.{i}.weight"]["status"] for i in range(3)} == {"matched"}
    assert got["head"]["status"] == "added"
    assert sum(c["status"] == "removed" for c in got.values()) == 24 - 4
    assert sorted(["h.10.w", "h.9.w", "h.2.w"], key=natural_key) == ["h.2.w", "h.9.w", "h.10.w"]


def test_identical_chunks_are_not_read_and_deltas_decode_against_a(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = RNG.standard_normal((64, 64)).astype(np.float32)  # 16 KiB: four chunks
    w2 = w.copy()
    w2[-1, -1] += 1  # last chunk only
    commit_files(repo, {"m.safetensors": save({"w": w})}, "a")
    commit_files(repo, {"m.safetensors": save({"w": w2})}, "b")
    lin = Lineage(find_repo(repo))
    store = ChunkStore(lin.repo)
    old = contents.manifests(lin.repo, store.reader, lin.resolve("HEAD~1:m.safetensors").id, "file")
    new = contents.manifests(lin.repo, store.reader, lin.resolve("HEAD:m.safetensors").id, "file")
    a_hashes, b_hashes = old[""].tensors()["w"].hashes, new[""].tensors()["w"].hashes
    assert b_hashes[:3] == a_hashes[:3] and b_hashes[3] != a_hashes[3]
    assert store.chain_of(b_hashes[3])[0] == a_hashes[3]  # stored as a delta of A's chunk
    reads: list[bytes] = []
    real = store.source
    monkeypatch.setattr(store, "source", lambda h, oid=None: reads.append(h) or real(h, oid))
    monkeypatch.setattr(model_diff, "WINDOW", 300)  # windows that straddle nothing
    d = diff_manifests(store, old, new)
    frac, mx, rel = expected(w, w2)
    assert d.changes[0].changed_fraction == frac == 1 / w.size
    assert d.changes[0].max_abs == pytest.approx(mx, rel=1e-12)
    assert d.changes[0].rel_l2 == pytest.approx(rel, rel=1e-9)
    # A's four chunks (||A||), B's changed one; its base (A's last chunk) is not read again
    assert reads == [*a_hashes, b_hashes[3]]
    monkeypatch.setattr(store, "source", lambda *a: pytest.fail("--stat reads no objects"))
    assert diff_manifests(store, old, new, values=False).counts() == {"changed": 1}
    store.close()


def test_folder_models_and_a_file_against_a_folder(repo: Path) -> None:
    w = {f"layer.{i}": RNG.standard_normal((8, 8)).astype(np.float32) for i in range(4)}
    index = json.dumps({"weight_map": {}})
    first, second = (
        {k: w[k] for k in ("layer.0", "layer.1")},
        {k: w[k] for k in ("layer.2", "layer.3")},
    )
    files = {
        "ckpt/model.safetensors.index.json": index,
        "ckpt/model-1.safetensors": save(first),
        "ckpt/model-2.safetensors": save(second),
        "single.safetensors": save(w),
        "dup/model.safetensors.index.json": index,
        "dup/model-1.safetensors": save(first),
        "dup/model-2.safetensors": save({"layer.0": w["layer.0"]}),
    }
    commit_files(repo, files, "sharded and single")
    assert Lineage().resolve("ckpt").kind == "folder"
    same = diff("single.safetensors", "ckpt")
    assert {c["status"] for c in same.values()} == {"unchanged"} and len(same) == 4
    second["layer.3"] = w["layer.3"] * 2
    commit_files(repo, {"ckpt/model-2.safetensors": save(second)}, "layer.3 doubled")
    got = diff("HEAD~1:ckpt", "ckpt")
    assert got["layer.3"]["status"] == "changed" and got["layer.3"]["rel_l2"] == pytest.approx(1)
    proc = mgit("diff", "single.safetensors", "dup", cwd=repo, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "git-mgit: tensor 'layer.0' is in two shards of the model (second: model-2.safetensors)"
    )


def test_missing_objects_are_fetched_else_a_one_line_error(repo: Path, tmp_path: Path) -> None:
    a, b = (RNG.standard_normal(2000).astype(np.float32) for _ in range(2))
    commit_files(repo, {"a.safetensors": save({"w": a}), "b.safetensors": save({"w": b})}, "ab")
    clone = tmp_path / "clone"  # a clone that checked nothing out: manifests, no tensor objects
    run_git("clone", "-q", "--no-checkout", str(repo), str(clone), cwd=tmp_path)
    stat = mgit("diff", "HEAD:a.safetensors", "HEAD:b.safetensors", "--stat", cwd=clone)
    assert stat.stdout.splitlines()[-1] == "1 changed"  # --stat reads manifests only
    assert not run_git("for-each-ref", "refs/mgit/", cwd=clone).stdout
    run_git("remote", "rename", "origin", "gone", cwd=clone)
    run_git("remote", "set-url", "gone", str(tmp_path / "nowhere"), cwd=clone)
    proc = mgit("diff", "HEAD:a.safetensors", "HEAD:b.safetensors", cwd=clone, check=False)
    assert proc.returncode == 2
    assert "a.safetensors" in proc.stderr and "gone could not be reached" in proc.stderr
    assert "git mgit fetch gone" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    run_git("remote", "set-url", "gone", str(repo), cwd=clone)
    full = mgit("diff", "HEAD:a.safetensors", "HEAD:b.safetensors", cwd=clone)  # fetched now
    assert full.stdout.splitlines()[-1] == "1 changed"


@pytest.mark.parametrize(
    ("dtype", "code", "value"),
    [
        ("F8_E4M3", 0x38, 1.0),
        ("F8_E4M3", 0x7E, 448.0),  # the largest E4M3FN value
        ("F8_E4M3", 0x01, 2.0**-9),  # smallest subnormal
        ("F8_E4M3", 0xB8, -1.0),
        ("F8_E5M2", 0x3C, 1.0),
        ("F8_E5M2", 0x7B, 57344.0),
        ("F8_E5M2", 0x7C, np.inf),
        ("F8_E5M2", 0x01, 2.0**-16),
        ("F8_E4M3FNUZ", 0x40, 1.0),
        ("F8_E5M2FNUZ", 0x40, 1.0),
        ("F8_E8M0", 127, 1.0),
    ],
)
def test_f8_values(dtype: str, code: int, value: float) -> None:
    assert to_float64(dtype, bytes([code]))[0] == value


@pytest.mark.parametrize(
    ("dtype", "code"),
    [
        ("F8_E4M3", 0x7F),
        ("F8_E4M3", 0xFF),
        ("F8_E5M2", 0x7D),
        ("F8_E4M3FNUZ", 0x80),
        ("F8_E8M0", 0xFF),
    ],
)
def test_f8_nans(dtype: str, code: int) -> None:
    assert np.isnan(to_float64(dtype, bytes([code]))[0])
