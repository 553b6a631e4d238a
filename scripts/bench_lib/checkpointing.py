"""Checkpointing while training (issue 7): throughput per mode, and storage per checkpoint.

Each run is a real one, as a user makes it: a child process runs the
repository's own `train.py` with the venv's python, which trains an MLP on
CPU through `open_run(...)`, `ckpt.epochs`, `ckpt.batches`, `ckpt.step` and
an end-of-epoch `ckpt.save()`. Every run gets a fresh repository: a later
run must not find its checkpoints' objects already stored by an earlier one.

Throughput: the same seed, data and thread count with checkpointing off,
sync and background (every N iterations) and adaptive (Flor's rule, eps).
A checkpoint (weights and two AdamW moments) is expensive against an
iteration, so a synchronous one has a visible cost. torch gets every core
but one: the core left is where a background commit runs. Besides the
loop's wall time, the child reports the checkpointer's own split of it
(`ckpt.period`): time blocked in checkpoints, what background commits took
from the iterations they ran beside (both are Flor's M), and C, an
iteration's time with no commit beside it.

Storage: a frozen backbone under a trainable head, one synchronous
checkpoint per epoch; `git mgit du --json --rev C` after each checkpoint
commit C says which objects C added, tensor by tensor, so what frozen
layers add (the same content is the same object) is told from the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

import torch
from phases import log
from tools import MGIT, BenchRepo

HERE = Path(__file__).resolve().parent
EPS = 1 / 15  # Flor's default tolerance, the checkpointer's default
MODES = ("off", "adaptive", "background", "sync")
# glibc returns freed buffers above 128 KiB to the kernel and faults them back in at the next
# iteration: some 3,000 page faults an iteration here, 10-35% of the loop and varying from run
# to run (a VM pays its host for each). A background commit's allocations move glibc's
# thresholds, so with adaptive checkpointing the loop faulted half as often, and ran faster,
# than with none. Every mode's child keeps its freed memory instead.
MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
TRAIN_PY = """\
import json, sys
from pathlib import Path
sys.path.insert(0, {here!r})
from checkpointing import train
train(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4]))
"""


def _spec(quick: bool) -> dict[str, object]:
    """The throughput workload: 2.4M parameters, a 28.5 MB checkpoint with AdamW's moments."""
    return {
        "inputs": 256,
        "hidden": 1024,
        "layers": 4,
        "classes": 16,
        "frozen": 0,
        "batch": 128,
        "steps": 20 if quick else 250,
        "epochs": 1 if quick else 2,
        "every": 10 if quick else 20,
        "eps": EPS,
        "lr": 1e-3,
        "threads": max(1, len(os.sched_getaffinity(0)) - 1),
        "seed": 0,
    }


def _frozen_spec(quick: bool) -> dict[str, object]:
    """The storage workload: three frozen layers, a trainable two-layer head, a checkpoint
    at each epoch's end only."""
    spec = {**_spec(quick), "layers": 5, "frozen": 3, "steps": 10, "every": None}
    return {**spec, "epochs": 3 if quick else 6}


def _model(spec: dict) -> torch.nn.Sequential:
    """An MLP as `backbone` (its first `frozen` layers) and `head`."""
    widths = [spec["inputs"]] + [spec["hidden"]] * (spec["layers"] - 1) + [spec["classes"]]
    layers: list[torch.nn.Module] = []
    for i in range(spec["layers"]):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < spec["layers"] - 1:
            layers.append(torch.nn.GELU())
    cut = 2 * spec["frozen"]
    parts = OrderedDict(
        backbone=torch.nn.Sequential(*layers[:cut]), head=torch.nn.Sequential(*layers[cut:])
    )
    return torch.nn.Sequential(parts)


def train(spec: dict, run: str, mode: str, out: Path) -> None:
    """The child's training run (train.py calls it); writes what it measured to `out`.

    Timed: from the first epoch to the last save() returning (the loop), then
    close() on its own (waiting for background commits still running).
    """
    from torch.utils.data import DataLoader, TensorDataset

    from git_mgit.runtime.training import fit, open_run

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    model = _model(spec)
    model.backbone.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=spec["lr"])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    gen = torch.Generator().manual_seed(spec["seed"])
    x = torch.randn(spec["steps"] * spec["batch"], spec["inputs"], generator=gen)
    y = (x @ torch.randn(spec["inputs"], spec["classes"], generator=gen)).argmax(dim=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=spec["batch"])
    every = spec["every"] if mode in ("sync", "background") else None
    ckpt = open_run(
        model, opt, sched, run=run, repo=".", mode=mode, every=every, eps=spec["eps"], config=spec
    )

    def train_step(batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
        loss = torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return {"loss": loss}

    start = time.perf_counter()
    fit(ckpt, loader, train_step, spec["epochs"], lambda _: sched.step())
    loop_s = time.perf_counter() - start
    ckpt.close()
    period = ckpt.period
    result = {
        "loop_s": loop_s,
        "close_s": time.perf_counter() - start - loop_s,
        "iterations": period.n,
        "checkpoints": period.k,
        "blocked_s": period.blocked,  # the loop's time inside checkpoints
        "slowdown_s": period.slowdown,  # what background commits took from iterations beside them
        "outside_s": period.clean + period.overlapped,  # the loop's time outside checkpoints
        "compute_s": period.compute,  # n * C: outside checkpoints, less the slowdown
        "m_s": period.m,  # blocked and slowdown, per checkpoint
        "c_s": period.cost,  # an iteration no commit ran beside
        "params": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in trainable),
        "frozen": [n for n, p in model.named_parameters() if not p.requires_grad],
    }
    out.write_text(json.dumps(result))


def _repo(scratch: Path, env: dict[str, str], name: str) -> BenchRepo:
    """A git-mgit repository whose code commit holds train.py."""
    repo = BenchRepo(MGIT, scratch / name, env, None)
    (repo.path / "train.py").write_text(TRAIN_PY.format(here=str(HERE)))
    repo.git("add", "train.py")
    repo.commit("train.py")
    return repo


def _run(repo: BenchRepo, spec: dict, run: str, mode: str) -> dict[str, object]:
    """One training run in a child process: what it measured, and its commits on runs/RUN."""
    out = repo.path.parent / f"{repo.path.name}.json"
    argv = [sys.executable, "train.py", json.dumps(spec), run, mode, str(out)]
    env = {**repo.env, **MALLOC}
    proc = subprocess.run(argv, cwd=repo.path, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"training with checkpointing {mode} failed:\n{proc.stderr}")
    result = json.loads(out.read_text())
    branch = f"runs/{run}"
    exists = repo.git("branch", "--list", branch).strip()
    result["commits"] = (
        repo.git("rev-list", "--reverse", f"main..{branch}").split() if exists else []
    )
    return result


def throughput(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """Every mode on the same workload, each run in a fresh repository.

    The target's margin is eps, a few percent, and the same run's time drifts
    by about as much from one run to the next: off and adaptive run `repeat`
    times, taking turns (the first of each pair alternates), and the report
    takes medians. Background and sync, whose costs are plain to see, run once.
    """
    spec = _spec(quick)
    repeat = 1 if quick else 3
    order: list[str] = []
    for r in range(repeat):
        order += ["adaptive", "off"] if r % 2 else ["off", "adaptive"]
    runs: dict[str, list] = {mode: [] for mode in MODES}
    for i, mode in enumerate([*order, "background", "sync"]):
        log(f"checkpointing: training with checkpointing {mode}")
        repo = _repo(scratch, env, f"ckpt-{i}-{mode}")
        runs[mode].append(_run(repo, spec, "bench", mode))
        repo.remove()
    return {"spec": spec, "repeat": repeat, "runs": runs}


def _metadata(repo: BenchRepo, run: str) -> int:
    """What git holds for the run besides tensor objects (commits, trees, manifests, lineage
    notes), as stored: loose objects, zlib-compressed."""
    listed = repo.git("rev-list", "--objects", f"runs/{run}", "refs/notes/mgit", "--not", "main")
    ids = "".join(line.split()[0] + "\n" for line in listed.splitlines())
    proc = subprocess.run(
        ["git", "cat-file", "--batch-check=%(objectsize:disk)"],
        cwd=repo.path,
        env=repo.env,
        input=ids,
        capture_output=True,
        text=True,
        check=True,
    )
    return sum(int(n) for n in proc.stdout.split())


def _added(du: dict, seen: dict[tuple[str, str], int], frozen: set[str]) -> dict[str, int]:
    """Bytes of objects first reached at this commit, by what they hold (`seen`: the
    stored bytes per (file, tensor) at the commit before, updated)."""
    added = dict.fromkeys(("frozen", "trainable", "model header", "training state"), 0)
    for row in du["tensors"]:
        key = (row["model"], row["tensor"])
        grew = row["stored"] - seen.get(key, 0)
        seen[key] = row["stored"]
        if row["model"].endswith("/training.safetensors"):
            added["training state"] += grew
        elif row["tensor"] in frozen:
            added["frozen"] += grew
        elif row["tensor"].startswith("<"):  # <header>: the safetensors header
            added["model header"] += grew
        else:
            added["trainable"] += grew
    return added


def storage(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """Stored bytes each checkpoint commit adds, split by what they hold."""
    spec = _frozen_spec(quick)
    log(f"checkpointing: frozen backbone, {spec['epochs']} synchronous checkpoints")
    repo = _repo(scratch, env, "ckpt-frozen")
    run = _run(repo, spec, "frozen", "sync")
    frozen = set(run["frozen"])
    seen: dict[tuple[str, str], int] = {}
    raw_before = 0
    per_commit = []
    for commit in run["commits"]:
        du = json.loads(repo.git("mgit", "du", "--json", "--no-plan", "--rev", commit))
        raw = sum(m["raw"] for m in du["models"])
        per_commit.append({"added": _added(du, seen, frozen), "raw": raw - raw_before})
        raw_before = raw
    metadata = _metadata(repo, "frozen")
    repo.git("mgit", "fsck")
    repo.remove()
    return {
        "spec": spec,
        "params": run["params"],
        "trainable": run["trainable"],
        "frozen_tensors": sorted(frozen),
        "per_commit": per_commit,
        "metadata": metadata,
    }


def bench(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """Throughput per mode, then storage per checkpoint."""
    return {
        "throughput": throughput(scratch, env, quick),
        "storage": storage(scratch, env, quick),
    }
