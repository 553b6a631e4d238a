"""Hindsight replay against re-training from scratch (issue 7): the same run, one log line added.

A recorded 8-epoch run (a checkpoint commit per epoch) of an MLP on CPU;
then the script gains a print statement and the user wants its output for
every epoch. Two ways: train again from scratch with the new line (one
process, checkpointing off, as fast as training gets), or `git mgit
replay RUN --jobs N -- python train.py`, whose workers each restore the
checkpoint before their segment. Both wall times are measured end to end
(process starts included), and the replay must report every epoch's metrics
identical to the recording.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from phases import log
from tools import MGIT, BenchRepo

EPOCHS = 8
SCRIPT = '''\
"""An MLP on a fixed synthetic task, one checkpoint commit per epoch."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from git_mgit.runtime.training import open_run


def main(epochs: int, steps: int, mode: str) -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(steps * 64, 256, generator=gen)
    y = (x @ torch.randn(256, 16, generator=gen)).argmax(dim=1)
    data = TensorDataset(x, y)
    loader = DataLoader(data, batch_size=64, sampler=DistributedSampler(data, 1, 0, seed=0))
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
        torch.nn.GELU(), torch.nn.Linear(1024, 16),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt = open_run(model, opt, run="rec", mode=mode)
    for epoch in ckpt.epochs(epochs):
        for xb, yb in ckpt.batches(loader):
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ckpt.step({"loss": loss})
        # LOG
        ckpt.save()
    ckpt.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
'''
LOG_LINE = 'print(f"epoch {epoch}: weight norm {model[0].weight.norm():.4f}")'


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed: {done.stderr[-2000:]}")
    return took, done.stdout


def bench(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """Record, then time a re-run from scratch and replays with 2 and 4 workers."""
    steps = 20 if quick else 120
    repo = BenchRepo(MGIT, scratch / "replay", env, None)
    (repo.path / "train.py").write_text(SCRIPT)
    repo.git("add", "train.py")
    repo.git("commit", "-q", "-m", "train.py")
    python = [sys.executable, "train.py", str(EPOCHS), str(steps)]
    log(f"replay: recording {EPOCHS} epochs of {steps} steps")
    record_s, _ = _timed([*python, "sync"], repo.path, env)
    script = (repo.path / "train.py").read_text().replace("# LOG", LOG_LINE)
    (repo.path / "train.py").write_text(script)
    log("replay: re-training from scratch with the log line")
    scratch_s, out = _timed([*python, "off"], repo.path, env)
    assert out.count("weight norm") == EPOCHS, out
    result: dict[str, object] = {
        "epochs": EPOCHS,
        "steps": steps,
        "cores": len(os.sched_getaffinity(0)),
        "record_s": record_s,
        "scratch_s": scratch_s,
        "replays": {},
    }
    for jobs in (2, 4):
        log(f"replay: {jobs} workers")
        cmd = ["git", "mgit", "replay", "rec", "--jobs", str(jobs), "--json", "--", *python, "off"]
        took, out = _timed(cmd, repo.path, env)
        report = json.loads(out)
        result["replays"][str(jobs)] = {  # type: ignore[index]
            "wall_s": took,
            "identical": all(e["identical"] for e in report["epochs"]),
            "worker_s": [w["seconds"] for w in report["workers"]],
        }
    return result
