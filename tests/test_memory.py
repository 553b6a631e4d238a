"""The filter's memory stays at a few chunks, whatever the file size."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo

CHUNK = 4 << 20
# Python, numpy and zstd, plus three chunks in flight and git cat-file's pack windows.
BUDGET_KIB = (3 * CHUNK + 150 * 2**20) // 1024


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    repo = init_mgit_repo(tmp_path / "work")
    run_git("config", "mgit.chunkSize", str(CHUNK), cwd=repo)
    wrapper = Path(__file__).with_name("rss_filter.py")
    run_git("config", "filter.mgit.process", f"{sys.executable} {wrapper}", cwd=repo)
    monkeypatch.setenv("MGIT_TEST_RSS_LOG", str(tmp_path / "rss.log"))
    return repo


def big_model(path: Path, mib: int) -> None:
    rng = np.random.default_rng(0)
    n = (mib << 20) // 4 // 8
    save_file(
        {f"w{i}": rng.standard_normal(n, dtype=np.float32) * 0.02 for i in range(8)}, str(path)
    )


def test_add_and_checkout_of_a_file_many_times_the_budget(repo: Path, tmp_path: Path) -> None:
    model = repo / "model.safetensors"
    big_model(model, 384)  # 96 chunks, over twice the whole memory budget
    data = model.read_bytes()
    run_git("add", "model.safetensors", cwd=repo)
    run_git("commit", "-q", "-m", "big", cwd=repo)
    model.unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert model.read_bytes() == data
    peaks = [int(x) for x in (tmp_path / "rss.log").read_text().split()]
    assert len(peaks) >= 2 and len(data) // 1024 > 2 * BUDGET_KIB
    assert max(peaks) < BUDGET_KIB, f"filter peak RSS {max(peaks)} KiB over {BUDGET_KIB} KiB"
