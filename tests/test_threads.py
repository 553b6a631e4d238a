"""Bit-identical results need the same intra-op thread count on both sides, whatever the machine.

torch splits a reduction among its threads (MKL's sgemm on two threads sums
each half of a batch and adds the two sums), so the weight gradient of a
Linear layer over 512 rows differs in its last bits between 1 and 2 threads.
The first test shows it in this process. Then a `git mgit train` run on one
thread is resumed with OMP_NUM_THREADS=2, and replayed with it unset (every
core): only the count its checkpoints record makes them match the
uninterrupted run and the recording.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from git_mgit.runtime.training import load_checkpoint, threads
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo

SUMS = """
import torch

X = torch.randn(512, 8, generator=torch.Generator().manual_seed(0))
Y = X @ torch.randn(8, 1, generator=torch.Generator().manual_seed(1))


def main(ctx):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = ctx.checkpointer(model, opt)
    for epoch in ckpt.epochs(int(ctx.args[0])):
        for _ in ckpt.batches(range(5)):
            loss = (model(X) - Y).abs().mean()  # full batch: the gradient sums 512 rows
            opt.zero_grad()
            loss.backward()
            opt.step()
            ckpt.step()
        ckpt.save({"loss": loss})
"""


def gradient(count: int) -> torch.Tensor:
    """SUMS's first weight gradient, computed on `count` threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = torch.nn.Linear(8, 1)
        x = torch.randn(512, 8, generator=torch.Generator().manual_seed(0))
        y = x @ torch.randn(8, 1, generator=torch.Generator().manual_seed(1))
        (model(x) - y).abs().mean().backward()
        assert model.weight.grad is not None
        return model.weight.grad
    finally:
        torch.set_num_threads(before)


def needs_thread_dependent_sums() -> None:
    if torch.equal(gradient(1), gradient(2)):
        pytest.skip("this CPU's kernels sum 512 rows alike on 1 and 2 threads")


def test_a_batch_sum_differs_by_thread_count() -> None:
    needs_thread_dependent_sums()
    one, two = gradient(1), gradient(2)
    assert not torch.equal(one, two)
    assert torch.allclose(one, two, rtol=1e-5)  # the same sum, rounded in another order


def test_which_count_a_run_uses() -> None:
    cores = os.cpu_count() or 1
    assert threads.for_new_run(1, {}) == cores
    assert threads.for_new_run(cores * 2, {}) == 1
    assert threads.for_new_run(2, {"OMP_NUM_THREADS": "3"}) == 3
    assert threads.for_new_run(2, {"OMP_NUM_THREADS": "x"}) == max(1, cores // 2)
    assert threads.for_recorded(5, 1, {"OMP_NUM_THREADS": "2"}) == 5  # resume, replay: recorded
    assert threads.for_recorded(None, 1, {}) == cores  # checkpoints from before they were
    said = threads.override(5, 2)  # `git mgit train --resume --threads 2`
    assert said and "training on 2 thread(s) per process, not the 5" in said
    assert threads.override(5, 5) is None and threads.override(None, 2) is None


def git_mgit(repo: Path, *args: str, omp: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    done = subprocess.run(
        ["git", "mgit", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done


def test_resume_and_replay_use_the_recorded_thread_count(tmp_path: Path) -> None:
    needs_thread_dependent_sums()
    repo = init_mgit_repo(tmp_path / "repo")
    (repo / "sums.py").write_text(SUMS)
    run_git("add", "sums.py", cwd=repo)
    run_git("commit", "-q", "-m", "sums", cwd=repo)
    git_mgit(repo, "train", "--name", "whole", "sums:main", "--", "2", omp="1")
    git_mgit(repo, "train", "--name", "part", "sums:main", "--", "1", omp="1")
    git_mgit(repo, "train", "--resume", "runs/part", "sums:main", "--", "2", omp="2")
    whole, part = (load_checkpoint(repo, f"runs/{r}") for r in ("whole", "part"))
    assert (whole.info.threads, part.info.threads) == (1, 1)
    assert whole.snapshot is not None and part.snapshot is not None
    for name, tensor in whole.snapshot.model.items():
        assert torch.equal(part.snapshot.model[name], tensor), name

    replayed = git_mgit(repo, "replay", "whole", "--jobs", "1", "--json", omp=None)
    epochs = json.loads(replayed.stdout)["epochs"]
    assert [e["identical"] for e in epochs] == [True, True], epochs

    told = git_mgit(
        repo, "train", "--resume", "runs/whole~1", "--checkpoint", "off", "--threads", "2",
        omp=None,
    )  # fmt: skip
    assert "training on 2 thread(s) per process, not the 1 the checkpoint" in told.stderr
