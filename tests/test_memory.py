"""The filter's memory stays at a few chunks, whatever the file size."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from git_mgit import config
from git_mgit.gitcmd import find_repo
from git_mgit.modelfile.clean import ManifestBuilder, clean
from git_mgit.resources import malloc
from git_mgit.store.chunkstore import ChunkStore
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


def test_clean_takes_chunk_buffers_once_per_process_and_one_for_an_unchanged_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh pages cost a fault each: a second file reuses the first one's chunk buffers,
    and a file whose chunks are all stored keeps reading into the same idle buffer."""
    repo = init_mgit_repo(tmp_path / "r")
    run_git("config", "mgit.chunkSize", str(CHUNK), cwd=repo)
    store = ChunkStore(find_repo(repo))
    settings = config.load(find_repo(repo))
    model = tmp_path / "m.safetensors"
    big_model(model, 64)  # 8 tensors of 8 MiB: 16 chunks
    data = model.read_bytes()
    fresh: list[memoryview] = []
    slots: list[int] = []
    take, pick = malloc.take_buffer, ManifestBuilder._buffer
    monkeypatch.setattr(malloc, "_spare", {})

    def counting_take(size: int) -> memoryview:
        buffer = take(size)
        fresh.append(buffer)
        return buffer

    def recording_pick(self: ManifestBuilder, size: int) -> tuple[int, memoryview]:
        slot, view = pick(self, size)
        slots.append(slot)
        return slot, view

    monkeypatch.setattr(malloc, "take_buffer", counting_take)
    monkeypatch.setattr(ManifestBuilder, "_buffer", recording_pick)
    first = clean(io.BytesIO(data), "m.safetensors", store, settings)
    taken = len(fresh)
    assert 1 <= taken <= 2 and len(slots) == 17  # the header, then 16 chunks
    slots.clear()
    again = clean(io.BytesIO(data), "m.safetensors", store, settings)
    assert again == first
    assert slots == [0] * 17, "an unchanged file should read every chunk into one buffer"
    assert len(fresh) == taken + 1 and any(fresh[-1] is b for b in fresh[:taken])
    store.close()
