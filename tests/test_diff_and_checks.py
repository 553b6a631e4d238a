"""diff.mgit (tensor summaries in git diff / log -p / show) and the pre-commit checks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from git_mgit.tensors.stats import collect, nonfinite
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes, tensors_of

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_mgit_repo(tmp_path / "work")


def write(repo: Path, tensors: dict, name: str = "model.safetensors") -> None:
    (repo / name).write_bytes(save(tensors, metadata={"seed": "1"}))


def changed_lines(diff: str) -> list[str]:
    return [
        ln for ln in diff.splitlines() if ln[:1] in ("+", "-") and not ln.startswith(("+++", "---"))
    ]


def test_git_diff_log_and_show_print_tensor_summaries(repo: Path) -> None:
    base = tensors_of(model_bytes(1))
    write(repo, base)
    run_git("add", "model.safetensors", cwd=repo)
    run_git("commit", "-q", "-m", "v1", cwd=repo)
    bias = base["layer.0.bias"] + np.float32(0.5)
    write(repo, {**base, "layer.0.bias": bias})
    diff = run_git("diff", cwd=repo).stdout  # working tree against the index
    lines = changed_lines(diff)
    assert len(lines) == 2 and all("layer.0.bias  F32[64]" in ln for ln in lines)
    assert "mean 0.5" in lines[1] and "mean 0 " in lines[0]
    stat = run_git("diff", "--stat", cwd=repo).stdout
    assert re.search(r"model\.safetensors \| 2 \+-", stat)  # one tensor changed
    run_git("commit", "-q", "-am", "v2", cwd=repo)
    log = run_git("log", "-p", "-1", cwd=repo).stdout
    assert changed_lines(log) == lines  # stored objects and the working file describe alike
    assert changed_lines(run_git("show", "HEAD", cwd=repo).stdout) == lines


def test_textconv_names_missing_objects_instead_of_guessing(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "m").write_text(
        "mgit-manifest 1\nkind opaque\nsize 3\nchunk 67108864\nbytes 0 3 b3:" + "ab" * 32 + "\n"
    )
    proc = mgit("textconv", str(tmp_path / "m"), cwd=repo, check=False)
    assert proc.returncode != 0 and "git mgit fetch" in proc.stderr


def commit(repo: Path, *paths: str, check: bool = True):
    run_git("add", *paths, cwd=repo)
    return run_git("commit", "-q", "-m", "c", cwd=repo, check=check)


def test_untracked_model_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    repo = tmp_path / "plain"
    run_git("init", "-q", str(repo), cwd=tmp_path)
    mgit("install", cwd=repo)  # hooks, but nothing tracked
    (repo / "m.safetensors").write_bytes(model_bytes(1))
    proc = commit(repo, "m.safetensors", check=False)
    assert proc.returncode != 0 and "git mgit track '*.safetensors'" in proc.stderr
    mgit("track", "*.safetensors", cwd=repo)
    commit(repo, ".gitattributes", "m.safetensors")


def test_non_finite_values_are_refused_unless_allowed(repo: Path) -> None:
    t = tensors_of(model_bytes(1))
    t["layer.0.weight"][3, 3] = np.nan
    t["layer.0.weight"][4, 4] = np.inf
    write(repo, t)
    proc = commit(repo, "model.safetensors", check=False)
    assert proc.returncode != 0
    assert "'layer.0.weight' holds 1 NaN and 1 infinite" in proc.stderr
    (repo / "mgit.toml").write_text('[checks]\nallow-nonfinite = ["model.safetensors"]\n')
    commit(repo, "mgit.toml", "model.safetensors")


@pytest.mark.parametrize("dtype", ["F64", "F32", "F16", "BF16", "F8_E5M2", "F8_E4M3"])
def test_non_finite_values_are_counted_from_the_bits_as_the_statistics_count_them(
    dtype: str,
) -> None:
    """The check's fast count (integer masks) against the statistics' (float64), on
    values split between pieces at every odd place, signs, payloads and all."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal(5000) * 1e4
    values[rng.choice(5000, 40, replace=False)] = np.nan
    values[rng.choice(5000, 30, replace=False)] = np.inf
    values[rng.choice(5000, 20, replace=False)] = -np.inf
    values[:3] = [-np.nan, 65504.0, 3e38]  # a negative NaN; the largest finite F16; F16 overflow
    if dtype == "BF16":
        raw = (values.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    elif dtype.startswith("F8_"):
        raw = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()  # every code, specials too
    else:
        with np.errstate(over="ignore"):  # beyond the format's range: infinite, on purpose
            raw = values.astype({"F64": "<f8", "F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
    cuts = sorted(rng.choice(len(raw), 25, replace=False))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    stats = collect(dtype, [raw])
    assert nonfinite(dtype, pieces) == (stats.nan, stats.inf)
    assert stats.nan + stats.inf > 0


def test_invalid_header_and_corrupt_objects_are_refused(repo: Path) -> None:
    (repo / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    proc = commit(repo, "bad.safetensors", check=False)
    assert proc.returncode != 0 and "bad.safetensors: not a valid safetensors file" in proc.stderr
    run_git("rm", "-q", "--cached", "bad.safetensors", cwd=repo)
    write(repo, tensors_of(model_bytes(2, n=4096)))
    run_git("add", "model.safetensors", cwd=repo)
    for pack in (repo / ".git" / "objects" / "pack").glob("*.pack"):
        data = bytearray(pack.read_bytes())
        at = data.rfind(b"MGOB")
        if at > 0:
            data[at + 300] ^= 0xFF
            pack.chmod(0o644)
            pack.write_bytes(bytes(data))
    proc = run_git("commit", "-q", "-m", "c", cwd=repo, check=False)
    assert proc.returncode != 0 and "does not decode" in proc.stderr


def test_a_git_lfs_pointer_is_named_as_one_with_the_fix(repo: Path) -> None:
    """A model git-lfs has not downloaded (its pointer in place of the file) is stored byte
    for byte, with a warning that says so and what to run; the pre-commit check refuses it."""
    pointer = (
        b"version https://git-lfs.github.com/spec/v1\n"
        b"oid sha256:" + b"ab" * 32 + b"\nsize 90868376\n"
    )
    (repo / "model.safetensors").write_bytes(pointer)
    added = run_git("add", "model.safetensors", cwd=repo)
    fix = "a Git LFS pointer, not the model: run `git lfs pull` to download it, then add it again"
    assert f"model.safetensors: not a valid safetensors file ({fix})" in added.stderr
    assert run_git("cat-file", "blob", ":model.safetensors", cwd=repo).stdout != ""
    (repo / "model.safetensors").unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == pointer  # stored as it was
    proc = run_git("commit", "-q", "-m", "pointer", cwd=repo, check=False)
    assert proc.returncode != 0 and fix in proc.stderr


def test_a_users_own_pre_commit_hook_still_runs(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    run_git("init", "-q", str(repo), cwd=tmp_path)
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text('#!/bin/sh\necho mine >> "$(git rev-parse --git-dir)/ran"\n')
    hook.chmod(0o755)
    mgit("install", cwd=repo)
    mgit("track", "*.safetensors", cwd=repo)
    commit(repo, ".gitattributes")
    assert (repo / ".git" / "ran").read_text() == "mine\n"


def test_pre_commit_framework_hooks_run_the_same_checks(repo: Path) -> None:
    spec = (ROOT / ".pre-commit-hooks.yaml").read_text()
    entries = dict(re.findall(r"- id: (\S+)\n(?:.*\n)*?  entry: (.+)", spec))
    assert set(entries) == {"mgit-tracked", "mgit-header", "mgit-finite", "mgit-objects"}
    t = tensors_of(model_bytes(1))
    t["embed.weight"][0, 0] = np.nan
    write(repo, t, "bad.safetensors")
    write(repo, tensors_of(model_bytes(1)), "good.safetensors")
    run_git("add", "good.safetensors", "bad.safetensors", cwd=repo)
    for hook_id, entry in entries.items():
        argv = entry.split()
        assert argv[:2] == ["git-mgit", "check"]
        ok = mgit(*argv[1:], "good.safetensors", cwd=repo, check=False)
        assert ok.returncode == 0, (hook_id, ok.stderr)
    bad = mgit("check", "finite", "bad.safetensors", cwd=repo, check=False)
    assert bad.returncode == 1 and "'embed.weight' holds 1 NaN" in bad.stderr
