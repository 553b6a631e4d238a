"""Checkpoints in a real repository, from one process: open_run, load_checkpoint, restore.

This is the API a replay or a hand-written launcher uses without `git mgit
train`: commits land on `runs/NAME` without touching the checkout, and any
of them restores a run that continues exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model
from git_mgit.lineage.graph import PROVENANCE, VERSION
from git_mgit.runtime.training import CheckpointError, fit, load_checkpoint, open_run, restore
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo
from tests.test_training_checkpointer import step_fn


def setup(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer, object, DataLoader]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Dropout(0.1), torch.nn.Linear(5, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)
    x = torch.randn(24, 3, generator=torch.Generator().manual_seed(2))
    data = TensorDataset(x, (x[:, 1] > 0).long())
    sampler = DistributedSampler(data, num_replicas=1, rank=0, seed=5)
    return model, opt, sched, DataLoader(data, batch_size=6, sampler=sampler)


def run_epochs(ckpt, model, opt, sched, loader, epochs: int) -> None:
    def end(epoch: int) -> dict:
        sched.step()
        return {"epoch_lr": sched.get_last_lr()[0]}

    fit(ckpt, loader, step_fn(model, opt), epochs, end)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = init_mgit_repo(tmp_path / "repo")
    (repo / "notes.txt").write_text("code\n")
    run_git("add", "notes.txt", cwd=repo)
    run_git("commit", "-q", "-m", "code", cwd=repo)
    return repo


def test_checkpoints_commit_to_the_run_branch_and_restore_exactly(repo: Path) -> None:
    model, opt, sched, loader = setup()
    lin = Lineage(find_repo(repo))
    start = commit_model(
        model.state_dict(),
        repo / "models/init.safetensors",
        "init",
        name="init",
        type="mlp",
        lineage=lin,
    )
    head = run_git("rev-parse", "HEAD", cwd=repo).stdout
    with open_run(
        model, opt, sched, run="solo", repo=repo, start="init", mode="sync", config={"lr": 0.1}
    ) as ckpt:
        run_epochs(ckpt, model, opt, sched, loader, 3)
    assert len(ckpt.commits) == 3
    log = run_git("log", "--format=%s", "runs/solo", cwd=repo).stdout.splitlines()
    assert log[:3] == [
        f"runs/solo: epoch {e} end (global step {4 * (e + 1)}) epoch_lr={0.1 * 0.9 ** (e + 1):.6g} "
        f"loss={ckpt.commits[e].info.metrics['loss']:.6g}"
        for e in (2, 1, 0)
    ]
    assert run_git("rev-parse", "runs/solo~3", cwd=repo).stdout == head  # branched at the code
    assert run_git("rev-parse", "HEAD", cwd=repo).stdout == head
    assert run_git("status", "--porcelain", cwd=repo).stdout == ""

    lin.reload()
    v = [c.model for c in ckpt.commits]
    assert [e.parent for e in lin.graph.in_edges(v[0], (PROVENANCE,))] == [start.version]
    assert v[0] in lin.graph.parents(v[1], (VERSION,)) and v[1] in lin.graph.parents(
        v[2], (VERSION,)
    )
    assert lin.graph.nodes[v[2]].type == "mlp"

    # a fresh process restores the epoch-1 checkpoint and trains the last epoch again
    model2, opt2, sched2, loader2 = setup(seed=9)
    resumed = load_checkpoint(repo, "runs/solo~1")
    assert resumed.info.position.epoch == 1 and resumed.info.config == {"lr": 0.1}
    assert resumed.info.start == start.version and resumed.model == v[1]
    again = open_run(model2, opt2, sched2, run="solo", repo=repo, mode="off", resume_from=resumed)
    run_epochs(again, model2, opt2, sched2, loader2, 3)
    for name, t in model.state_dict().items():
        assert torch.equal(t, model2.state_dict()[name]), name
    assert again.position == ckpt.position


def test_restore_alone_puts_back_model_optimizer_and_scheduler(repo: Path) -> None:
    model, opt, sched, loader = setup()
    with open_run(model, opt, sched, run="r", repo=repo, mode="background") as ckpt:
        run_epochs(ckpt, model, opt, sched, loader, 1)
    model2, opt2, sched2, _ = setup(seed=4)
    restored = restore(load_checkpoint(repo, "runs/r"), model2, opt2, sched2)
    assert restored.rng_epoch is not None  # the helpers recorded the loader's start
    for name, t in model.state_dict().items():
        assert torch.equal(t, model2.state_dict()[name])
    assert sched2.state_dict() == sched.state_dict()
    buf = opt2.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(buf, opt.state_dict()["state"][0]["momentum_buffer"])


def test_a_commit_that_is_no_checkpoint_is_refused(repo: Path) -> None:
    with pytest.raises(
        CheckpointError, match=r"'HEAD' \([0-9a-f]{10}\) is not a checkpoint commit"
    ):
        load_checkpoint(repo, "HEAD")
    with pytest.raises(CheckpointError, match="'runs/nothing' is not a commit"):
        load_checkpoint(repo, "runs/nothing")
