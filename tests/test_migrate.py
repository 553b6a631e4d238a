"""`git mgit migrate`: git-lfs and plain-blob history into git-mgit and back, byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from git_mgit.migrate import matches, rewrite_attributes
from git_mgit.setup import FROM_LFS
from tests.gitsandbox import run_git
from tests.mgitrepo import mgit, model_bytes, status_porcelain, tensors_of

LFS = shutil.which("git-lfs")


@pytest.fixture(autouse=True)
def needs_git_lfs() -> None:
    if LFS is None:  # scripts/test installs it; a missing baseline must fail, not skip
        pytest.fail("git-lfs is not installed: run scripts/test, or apt-get install git-lfs")


def versions() -> list[bytes]:
    first = tensors_of(model_bytes(1, n=512))
    out, current = [], first
    rng = np.random.default_rng(0)
    for i in range(5):
        current = {
            k: (v + rng.standard_normal(v.shape).astype(v.dtype) * np.asarray(1e-3, v.dtype))
            if v.dtype.kind == "f" and i
            else v
            for k, v in current.items()
        }
        out.append(save(current, metadata={"epoch": str(i)}))
    return out


def history(repo: Path, store: str) -> tuple[list[str], list[bytes]]:
    """Five commits of a model (git-lfs or plain blobs), a text file, a tag; returns commits."""
    run_git("init", "-q", str(repo), cwd=repo.parent)
    if store == "lfs":
        run_git("lfs", "install", "--local", cwd=repo)
        run_git("lfs", "track", "*.safetensors", cwd=repo)
    (repo / "README").write_text("models\n")
    run_git("add", "-A", cwd=repo)
    run_git("commit", "-q", "-m", "start", cwd=repo)
    commits, data = [], versions()
    for i, v in enumerate(data):
        (repo / "model.safetensors").write_bytes(v)
        (repo / "README").write_text(f"models, epoch {i}\n")
        run_git("add", "-A", cwd=repo)
        run_git("commit", "-q", "-m", f"epoch {i}", cwd=repo)
        commits.append(run_git("rev-parse", "HEAD", cwd=repo).stdout.strip())
    run_git("tag", "v2", commits[2], cwd=repo)
    return commits, data


def subjects(repo: Path, ref: str = "main") -> list[str]:
    return run_git("log", "--format=%s|%an|%at", ref, cwd=repo).stdout.splitlines()


def check_every_version(repo: Path, data: list[bytes], attr: str) -> None:
    revs = run_git("rev-list", "--reverse", "main", cwd=repo).stdout.split()[1:]
    assert len(revs) == len(data)
    for rev, expected in zip(revs, data, strict=True):
        run_git("checkout", "-q", rev, cwd=repo)
        assert (repo / "model.safetensors").read_bytes() == expected
        assert attr in (repo / ".gitattributes").read_text()
        assert status_porcelain(repo) == ""
    run_git("checkout", "-q", "main", cwd=repo)


@pytest.mark.parametrize("store", ["lfs", "plain"])
def test_import_then_export_round_trips_every_version(tmp_path: Path, store: str) -> None:
    repo = tmp_path / "r"
    mgit("install", cwd=tmp_path)
    before, data = history(repo, store)
    log = subjects(repo)

    info = mgit("migrate", "info", "--everything", cwd=repo).stdout
    assert "would rewrite 6 commit(s)" in info and "5 file version(s)" in info
    assert run_git("rev-parse", "main", cwd=repo).stdout.strip() == before[-1]  # nothing moved

    out = mgit("migrate", "import", "--include", "*.safetensors", "--everything", cwd=repo).stdout
    assert "rewrote 6 commit(s) on main, v2" in out and "saved" in out
    assert "git push --force-with-lease" in out
    head = run_git("cat-file", "blob", "main:model.safetensors", cwd=repo, text=False).stdout
    assert head.startswith(b"mgit-manifest ")
    assert subjects(repo) == log  # messages, authors, dates kept
    assert run_git("show", "v2:README", cwd=repo).stdout == "models, epoch 2\n"
    assert "filter=lfs" not in run_git("show", "main:.gitattributes", cwd=repo).stdout
    check_every_version(repo, data, "filter=mgit")
    mgit("fsck", cwd=repo)

    target = "lfs" if store == "lfs" else "plain"
    out = mgit("migrate", "export", "--to", target, "--everything", cwd=repo).stdout
    assert "rewrote 6 commit(s)" in out
    stored = run_git("cat-file", "blob", "main:model.safetensors", cwd=repo, text=False).stdout
    if target == "lfs":
        assert stored.startswith(b"version https://git-lfs.github.com/spec/v1")
        check_every_version(repo, data, "filter=lfs")
    else:
        assert stored == data[-1]
        check_every_version(repo, data, "")


def test_missing_lfs_objects_are_a_clear_error_and_move_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    mgit("install", cwd=tmp_path)
    commits, _ = history(repo, "lfs")
    shutil.rmtree(repo / ".git" / "lfs" / "objects")
    proc = mgit("migrate", "import", cwd=repo, check=False)
    assert proc.returncode != 0 and "git lfs fetch --all" in proc.stderr
    assert run_git("rev-parse", "main", cwd=repo).stdout.strip() == commits[-1]


def test_attribute_rewriting_and_pattern_matching() -> None:
    lfs = "*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.png binary\n"
    got = rewrite_attributes(lfs, ["*.safetensors"], "import")
    assert got == "*.safetensors filter=mgit diff=mgit merge=mgit -text\n*.png binary\n"
    assert (
        rewrite_attributes("", ["*.bin"], "import")
        == "*.bin filter=mgit diff=mgit merge=mgit -text\n"
    )
    assert rewrite_attributes(got, ["*.safetensors"], "plain") == "*.png binary\n"
    taken = f"{FROM_LFS}*.safetensors filter=lfs diff=lfs merge=lfs -text\n{got}"
    assert rewrite_attributes(taken, ["*.safetensors"], "lfs") == lfs  # track's note goes
    assert rewrite_attributes(taken, ["*.png"], "plain") == taken  # another pattern: it stays
    assert matches("a/b/m.safetensors", ["*.safetensors"])
    assert matches("models/m.bin", ["models/*.bin"]) and not matches(
        "x/models/m.bin", ["models/*.bin"]
    )
