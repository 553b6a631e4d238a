"""`git mgit diff`: tensor-level differences, streamed from objects, checked against numpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import diff_manifests
from git_mgit.lineage.values import as_numbers
from git_mgit.store.chunkstore import ChunkStore
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
    fa, fb = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    changed = np.mean(
        a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1), axis=1
    )
    return (
        float(np.mean(changed > 0)),
        float(np.max(np.abs(fb - fa))),
        float(np.linalg.norm(fb - fa) / np.linalg.norm(fa)),
    )


def diff(ref_a: str, ref_b: str) -> dict[str, dict]:
    out = mgit("diff", ref_a, ref_b, "--all", "--json", cwd=Path.cwd()).stdout
    return {(c["new_name"] or c["old_name"]): c for c in json.loads(out)}


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
        assert got[name]["changed_fraction"] == pytest.approx(frac, rel=0, abs=0)
        assert got[name]["max_abs"] == pytest.approx(mx, rel=1e-12)
        assert got[name]["rel_l2"] == pytest.approx(rel, rel=1e-9)


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


def test_bf16_and_nan_payloads_and_negative_zero(repo: Path) -> None:
    t = bf16(RNG.standard_normal(3000))
    t2 = t.copy()
    t2[:100] ^= 0x8000  # sign flips
    commit_files(repo, {"m.safetensors": bf16_file(t)}, "a")
    commit_files(repo, {"m.safetensors": bf16_file(t2)}, "b")
    a = (t.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    b = (t2.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    got = diff("HEAD~1:m.safetensors", "HEAD:m.safetensors")["t"]
    assert got["changed_fraction"] == pytest.approx(np.mean(t != t2))
    assert got["max_abs"] == pytest.approx(np.max(np.abs(b - a)), rel=1e-12)
    assert got["rel_l2"] == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a), rel=1e-9)
    zeros = np.array([0.0, 1.0, np.nan], dtype=np.float32)
    other = np.array([-0.0, 1.0, np.nan], dtype=np.float32)
    other.view(np.uint32)[2] ^= 1  # another NaN payload
    commit_files(repo, {"z.safetensors": save({"z": zeros})}, "z")
    commit_files(repo, {"z.safetensors": save({"z": other})}, "z2")
    z = diff("HEAD~1:z.safetensors", "HEAD:z.safetensors")["z"]
    assert z["changed_fraction"] == pytest.approx(2 / 3)  # bits differ at -0.0 and the NaN
    assert z["max_abs"] == 0.0


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
    assert got["gone"]["status"] == "removed" and got["added"]["status"] == "added"
    assert got["shape"]["status"] == "changed" and got["shape"]["new_shape"] == [2, 8]
    assert got["cast"]["new_dtype"] == "F16"
    assert got["cast"]["max_abs"] == pytest.approx(np.max(np.abs(a.astype(np.float16) - a)))
    matched = got["roberta.layer.2.w"]
    assert matched["status"] == "matched" and matched["old_name"] == "bert.layer.2.w"
    assert matched["rel_l2"] == pytest.approx(1.0)
    text = mgit("diff", "old.safetensors", "new.safetensors", cwd=repo).stdout
    assert "enc.1.w -> encoder.1.weight" in text and "enc.0.w" not in text
    assert (
        text.splitlines()[-1] == "2 changed, 1 added, 1 removed, 1 renamed, 1 matched, 1 unchanged"
    )


def test_identical_chunks_of_the_new_side_are_not_read(repo: Path) -> None:
    w = RNG.standard_normal((64, 64)).astype(np.float32)  # 16 KiB: four chunks
    w2 = w.copy()
    w2[-1, -1] += 1  # last chunk only
    commit_files(repo, {"m.safetensors": save({"w": w})}, "a")
    commit_files(repo, {"m.safetensors": save({"w": w2})}, "b")
    lin = Lineage(find_repo(repo))
    store = ChunkStore(lin.repo)
    reads: list[bytes] = []
    real = store.get_raw
    store.get_raw = lambda h, *a: reads.append(h) or real(h, *a)  # type: ignore[method-assign]
    old = contents.manifests(lin.repo, store.reader, lin.resolve("HEAD~1:m.safetensors").id, "file")
    new = contents.manifests(lin.repo, store.reader, lin.resolve("HEAD:m.safetensors").id, "file")
    d = diff_manifests(store, old, new)
    store.close()
    assert d.changes[0].changed_fraction == pytest.approx(1 / w.size)
    new_hashes = new[""].tensors()["w"].hashes
    assert sum(h in new_hashes for h in reads) == 1 + 3  # A's four chunks (norm) share 3 with B
    assert len(reads) == 5  # A: 4 chunks; B: only the changed one
    store2 = ChunkStore(lin.repo)
    store2.get_raw = lambda *a: pytest.fail("--stat must read no objects")  # type: ignore[method-assign]
    assert diff_manifests(store2, old, new, values=False).counts() == {"changed": 1}
    store2.close()


def test_missing_object_is_a_one_line_error(repo: Path, tmp_path: Path) -> None:
    commit_files(
        repo, {"m.safetensors": save({"w": RNG.standard_normal(2000).astype(np.float32)})}, "a"
    )
    commit_files(
        repo, {"m.safetensors": save({"w": RNG.standard_normal(2000).astype(np.float32)})}, "b"
    )
    clone = tmp_path / "clone"
    run_git("clone", "-q", "--no-checkout", str(repo), str(clone), cwd=tmp_path)
    proc = mgit("diff", "HEAD~1:m.safetensors", "HEAD:m.safetensors", cwd=clone, check=False)
    assert proc.returncode == 2
    assert "git mgit fetch" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


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
    assert as_numbers(dtype, bytes([code]))[0] == value


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
    assert np.isnan(as_numbers(dtype, bytes([code]))[0])
