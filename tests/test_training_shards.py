"""Every rank writes its own share of a checkpoint, and any number of ranks resumes it.

Real torchrun jobs (`git mgit train`, gloo on the CPU) in real repositories:

- FSDP on 4 ranks: the peak RSS a checkpoint adds to each rank, against that
  rank's share of the state, and against gathering the full state into
  rank 0's memory (what checkpoints did before, through DCP's full state
  dict) measured in the same processes;
- a checkpoint from 4 ranks resumed on 2, and that run's resumed on 4, under
  FSDP and under DDP: the restored state, committed again at once, equals
  the saved one tensor for tensor, and training goes on to the end;
- two nodes of two processes on loopback (two launchers, c10d rendezvous on
  127.0.0.1, each node in its own clone of a bare remote): every commit
  holds every shard, and a run killed and resumed ends bit-identical to an
  uninterrupted one;
- a training function that calls torch.distributed.checkpoint.async_save.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import torch

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage
from git_mgit.runtime import load_state_dict
from git_mgit.runtime.training import layout, runs, storage
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo, mgit
from tests.runtime_repo import isolated_home
from tests.test_training_run import KILLER_OF

SHARDS = '''
"""Training for tests/test_training_shards.py: layers wide enough to be sharded chunk by chunk."""

import os
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(torch.nn.Module):
    def __init__(self, width: int = 768) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(3)))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        return self.head(self.norm(torch.relu(self.body(x))))


def main(ctx):
    epochs = int(ctx.args[0]) if ctx.args else 1
    torch.manual_seed(0)
    np.random.seed(ctx.rank)  # every generator a checkpoint holds starts from a seed
    random.seed(ctx.rank)
    x = torch.randn(96, 768, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, x[:, :4].argmax(dim=1))
    sampler = DistributedSampler(data, num_replicas=ctx.world_size, rank=ctx.rank, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = ctx.wrap(Net())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ckpt = ctx.checkpointer(model, opt, sched)
    if ctx.resumed is not None and os.environ.get("SAVE_RESTORED"):
        ckpt.save()  # what was restored, committed again as it is: the test compares the two
    for epoch in ckpt.epochs(epochs):
        for xb, yb in ckpt.batches(loader):
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ckpt.step({"loss": loss})
        sched.step()
        ckpt.save()
'''

RSS = '''
"""Peak RSS a checkpoint adds to each rank, against gathering the full state into rank 0."""

import json
import os

import torch

from git_mgit.runtime.training import holdings, state
from shards import Net


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_since(mark) -> int:
    """Peak RSS since mark() (VmHWM, reset through /proc/self/clear_refs)."""
    with open("/proc/self/status") as f:
        line = next(l for l in f if l.startswith("VmHWM"))
    return int(line.split()[1]) * 1024


def mark() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main(ctx):
    torch.manual_seed(0)
    model = ctx.wrap(Net(2048))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 2048)).sum().backward()
    opt.step()
    held = holdings.capture(model, opt, None, ctx.world)
    total = sum(e.nbytes for e in held.entries.values())
    mark()
    before = rss()
    ckpt = ctx.checkpointer(model, opt, mode="background")
    ckpt.save()
    ckpt.wait()
    ours = peak_since(mark) - before
    encoders = ckpt.committer.history[-1].encoder_memory  # their private memory at its peak
    ckpt.close()
    mark()
    before = rss()
    gathered = state._gather(model, opt)  # what a checkpoint did before: DCP's full state dict
    gather = peak_since(mark) - before
    del gathered
    out = {"rank": ctx.rank, "ours": ours, "encoders": encoders, "gather": gather,
           "share": total // ctx.world_size}
    with open(os.path.join(os.environ["RSS_OUT"], f"{ctx.rank}.json"), "w") as f:
        json.dump(out, f)
'''

ASYNC = '''
"""DCP's async_save and a collective on CPU tensors, inside a train function."""

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main(ctx):
    torch.manual_seed(0)
    model = ctx.wrap(torch.nn.Linear(16, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 16, device=ctx.device)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    saving = dcp.async_save(state, checkpoint_id=os.environ["DCP_DIR"])
    saving.result()
    total = torch.tensor([float(ctx.rank + 1)])  # a CPU tensor
    dist.all_reduce(total)
    assert total.item() == ctx.world_size * (ctx.world_size + 1) / 2, total
'''

KILLER = KILLER_OF.format(module="shards")

FILES = {"shards.py": SHARDS, "rss.py": RSS, "dcp_async.py": ASYNC, "killer.py": KILLER}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with isolated_home(tmp_path_factory.mktemp("shards-home")):
        repo = init_mgit_repo(tmp_path_factory.mktemp("shards") / "repo")
        for name, text in FILES.items():
            (repo / name).write_text(text)
        run_git("add", *FILES, cwd=repo)
        run_git("commit", "-q", "-m", "training code", cwd=repo)
        return repo


def copy(template: Path, to: Path) -> Path:
    shutil.copytree(template, to, symlinks=True)
    mgit("install", cwd=to)
    return to


def train(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        ["git", "mgit", "train", *args],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        start_new_session=True,  # its own process group: stopped whole if it hangs
    )


def finished(proc: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"git mgit train hung; its output:\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = finished(train(repo, *args, env=env))
    assert done.returncode == 0, done.stderr
    return done


def checkpoints(repo: Path, run_name: str) -> list[str]:
    """The run's checkpoint commits, newest first."""
    return run_git(
        "log", "--format=%H", f"--grep=^Mgit-Run: {run_name}$", f"runs/{run_name}", cwd=repo
    ).stdout.split()


def snapshot(repo: Path, commit: str) -> layout.Snapshot:
    return storage.read(repo, runs.find(find_repo(repo), commit))


def assert_same_state(a: layout.Snapshot, b: layout.Snapshot) -> None:
    """Model, optimizer and scheduler tensors equal bit for bit (generators are per rank)."""
    assert a.model.keys() == b.model.keys()
    for name, t in a.model.items():
        assert torch.equal(t, b.model[name]), name
    kept = [n for n in a.training if not n.startswith("rng")]
    assert kept == [n for n in b.training if not n.startswith("rng")]
    for name in kept:
        assert a.training[name].dtype == b.training[name].dtype, name
        assert torch.equal(a.training[name], b.training[name]), name
    assert a.skeletons == b.skeletons


def tracked(repo: Path, rev: str, folder: str) -> list[str]:
    """The safetensors files of a checkpoint (their manifests are what git holds)."""
    out = run_git("ls-tree", "-r", "--name-only", rev, folder, cwd=repo).stdout.split()
    return [p for p in out if p.endswith(".safetensors")]


def anchors(repo: Path) -> set[str]:
    out = run_git("for-each-ref", "--format=%(refname)", "refs/mgit/objects/", cwd=repo).stdout
    return set(out.split())


def test_fsdp_on_4_ranks_each_rank_holds_its_share_not_the_state(
    template: Path, tmp_path: Path
) -> None:
    repo = copy(template, tmp_path / "repo")
    out = tmp_path / "rss"
    out.mkdir()
    run(
        repo,
        "--nproc-per-node",
        "4",
        "--fsdp",
        "--name",
        "rss",
        "rss:main",
        env={"RSS_OUT": str(out)},
    )
    ranks = [json.loads((out / f"{r}.json").read_text()) for r in range(4)]
    mib = 1 << 20
    print("\nrank  share MiB  checkpoint adds MiB (rank + encoders)  full-state gather adds MiB")
    for r in ranks:
        both = f"{r['ours'] / mib:.1f} + {r['encoders'] / mib:.1f}"
        print(f"{r['rank']:4d}  {r['share'] / mib:9.1f}  {both:>35}  {r['gather'] / mib:26.1f}")
    share = ranks[0]["share"]
    assert share > 32 * mib  # the state (about 144 MiB) is large against a process's noise
    for r in ranks:
        # the arena (one copy of the rank's share, shared with the encoders), first imports,
        # and the encoders' buffers (a chunk's planes and compressed frames), no more
        assert r["encoders"] > 0, r  # measured: the encoders encoded something
        assert r["ours"] + r["encoders"] <= r["share"] + 64 * mib, r
    # Gathering puts the whole state (4 shares) in rank 0's memory; its measured rise can be
    # below that where it reuses heap our checkpoint freed (2.98 shares in one CI run), but
    # stays well above what our checkpoint adds on rank 0 (a share and its buffers).
    assert ranks[0]["gather"] > 2.5 * share
    assert ranks[0]["gather"] > ranks[0]["ours"] + ranks[0]["encoders"]
    assert ranks[0]["ours"] < 4 * share  # rank 0 never holds the whole state
    lin = Lineage(find_repo(repo))
    folder = "runs/rss:checkpoints/rss/model"
    tensors = load_state_dict(folder, lin)
    assert tensors["body.0.weight"].shape == (2048, 2048)
    shard = run_git("cat-file", "-p", f"{folder}/model-00001-of-00001.safetensors", cwd=repo)
    assert f"chunk {512 * 2048 * 4}" in shard.stdout  # a rank's rows of a weight: its own chunk


@pytest.mark.parametrize("parallel", ["fsdp", "ddp"])
def test_a_checkpoint_resumes_on_fewer_and_on_more_ranks(
    template: Path, tmp_path: Path, parallel: str
) -> None:
    repo = copy(template, tmp_path / "repo")
    fsdp = ["--fsdp"] if parallel == "fsdp" else []
    before = anchors(repo)
    run(repo, "--nproc-per-node", "4", *fsdp, "--name", "a", "shards:main", "--", "1")
    assert len(anchors(repo) - before) >= 4  # every rank stored objects of its own
    saved = checkpoints(repo, "a")[0]
    for path in tracked(repo, "runs/a", "checkpoints/a"):
        data = run_git("cat-file", "--filters", f"runs/a:{path}", cwd=repo, text=False).stdout
        again = run_git(
            "hash-object", "--path", path, "--stdin", input=data, cwd=repo
        ).stdout.decode()
        assert again == run_git("rev-parse", f"runs/a:{path}", cwd=repo).stdout, path

    # 4 -> 2: the restored state, committed again before any step, then one more epoch
    again = {"SAVE_RESTORED": "1"}
    run(repo, "--resume", "runs/a", "--nproc-per-node", "2", "--name", "b", "--", "2", env=again)
    b = checkpoints(repo, "b")
    assert len(b) == 2
    assert_same_state(snapshot(repo, saved), snapshot(repo, b[1]))

    # 2 -> 4: the same from the 2-rank run's last checkpoint, and on to the end
    run(repo, "--resume", "runs/b", "--nproc-per-node", "4", "--name", "c", "--", "3", env=again)
    c = checkpoints(repo, "c")
    assert len(c) == 2
    assert_same_state(snapshot(repo, b[0]), snapshot(repo, c[1]))
    info = runs.find(find_repo(repo), c[0]).info
    assert (info.position.epoch, info.position.end_of_epoch, info.world_size) == (2, True, 4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(remote: Path, tmp_path: Path, label: str) -> tuple[Path, Path]:
    """Two clones of `remote` (the run's remote), one per node, set up like the template."""
    nodes = []
    for i in range(2):
        path = tmp_path / f"{label}-node{i}"
        run_git("clone", "-q", str(remote), str(path), cwd=tmp_path)
        mgit("install", cwd=path)
        nodes.append(path)
    return nodes[0], nodes[1]


def on_two_nodes(
    nodes: tuple[Path, Path], *args: str, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess]:
    port = str(free_port())
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    procs = [train(node, *common, *args, env=env) for node in nodes]
    return [finished(p) for p in procs]


def ok(done: list[subprocess.CompletedProcess]) -> None:
    assert all(d.returncode == 0 for d in done), "\n".join(d.stderr[-3000:] for d in done)


def head(nodes: tuple[Path, Path], run_name: str) -> Path:
    """The clone of the node that got rank 0 (c10d's choice): the one with the run branch."""
    found = [n for n in nodes if runs.tip(find_repo(n), run_name) is not None]
    assert len(found) == 1, found
    return found[0]


def test_two_nodes_on_loopback_commit_every_shard_and_resume_bit_identically(
    template: Path, tmp_path: Path
) -> None:
    remotes = [tmp_path / f"{label}.git" for label in ("whole", "killed")]
    for remote in remotes:
        run_git("clone", "-q", "--bare", str(template), str(remote), cwd=tmp_path)
    whole = two_nodes(remotes[0], tmp_path, "whole")
    killed = two_nodes(remotes[1], tmp_path, "killed")
    remote = remotes[1]
    run_fsdp = ["--fsdp", "--name", "m"]
    ok(on_two_nodes(whole, *run_fsdp, "shards:main", "--", "2"))
    crashed = on_two_nodes(killed, *run_fsdp, "killer:main", "--", "2", env={"KILL_AT": "1:2"})
    assert any(d.returncode != 0 for d in crashed)
    first = head(killed, "m")
    assert len(checkpoints(first, "m")) == 1  # epoch 0's
    lin = Lineage(find_repo(first))
    state = load_state_dict("runs/m:checkpoints/m/model", lin)  # every shard, in rank 0's clone
    assert state["body.0.weight"].shape == (768, 768)
    assert runs.tip(find_repo(remote), "m") is not None  # rank 0 pushed the run branch

    for node in killed:  # resuming: every node fetches the run branch (rank 0 pushed it)
        if node is not first:
            run_git("fetch", "-q", "origin", "runs/m:runs/m", cwd=node)
    ok(on_two_nodes(killed, "--resume", "runs/m", "--name", "m", "shards:main"))
    ends = head(whole, "m"), runs.tip(find_repo(remote), "m")
    assert len(checkpoints(remote, "m")) == 2
    for path in ("model", "training.safetensors"):
        rev = f"runs/m:checkpoints/m/{path}"
        assert (
            run_git("rev-parse", rev, cwd=ends[0]).stdout
            == run_git("rev-parse", rev, cwd=remote).stdout
        )  # the same tree / manifest: the same bytes


def test_a_train_function_can_use_dcp_async_save(template: Path, tmp_path: Path) -> None:
    repo = copy(template, tmp_path / "repo")
    nproc = str(min(2, torch.cuda.device_count()) if torch.cuda.is_available() else 2)
    dcp_dir = tmp_path / "dcp"
    run(
        repo,
        "--nproc-per-node",
        nproc,
        "--checkpoint",
        "off",
        "dcp_async:main",
        env={"DCP_DIR": str(dcp_dir)},
    )
    assert (dcp_dir / ".metadata").is_file()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (pinned staging)")
def test_a_gpu_checkpoint_is_the_state_at_save_though_the_loop_goes_on(tmp_path: Path) -> None:
    """The copy into registered host memory is queued on the stream: a step queued after
    save() cannot change what the background commit stores."""
    from git_mgit.runtime.training import open_run

    repo = init_mgit_repo(tmp_path / "repo")
    (repo / "code.txt").write_text("code\n")
    run_git("add", "code.txt", cwd=repo)
    run_git("commit", "-q", "-m", "code", cwd=repo)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 8)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 1024, device="cuda")).sum().backward()
    opt.step()
    ckpt = open_run(model, opt, run="gpu", repo=repo, mode="background")
    ckpt.save()
    saved = {n: t.detach().cpu().clone() for n, t in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # queued behind the copies
    ckpt.close()
    stored = load_state_dict("runs/gpu:checkpoints/gpu/model.safetensors", Lineage(find_repo(repo)))
    for name, t in saved.items():
        assert torch.equal(stored[name], t), name
