"""The model selection bench's workload (selection_bench.py): Cerebro's four functions.

Copied into the bench repository as `workload.py`, so `git mgit select`
(MOP), task parallelism and data parallelism run the very same functions.
The training data is a file on disk, `data/x.npy` (float32 features) and
`data/y.npy` (labels) beside this file, written once in random order (the
shuffle Cerebro does before partitioning): `partition(i, p)` reads the i-th
of p contiguous row ranges, counting the bytes it reads. A process that read
data appends one JSON line to $MGIT_BENCH_SELECT_LOG when it exits: its pid,
those bytes, its peak RSS and whatever else `STATS` gathered.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
from pathlib import Path

import numpy as np
import torch

FEATURES, CLASSES = 256, 8
DATA = Path(__file__).with_name("data")
FILES = ("x.npy", "y.npy")
LOG_ENV = "MGIT_BENCH_SELECT_LOG"
STATS = {"read": 0, "batches": 0}  # this process's bytes read and optimizer steps


def table(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random features labelled by a fixed linear teacher; seed 0 is the training file."""
    x = torch.randn(rows, FEATURES, generator=torch.Generator().manual_seed(seed))
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(99))
    return x, (x @ teacher).argmax(dim=1)


def write(folder: Path, rows: int) -> int:
    """The training data files (the bench writes them once, into the repository's `data`);
    returns their size in bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, tensor in zip(FILES, table(rows, 0), strict=True):
        np.save(folder / name, tensor.numpy())
    return sum((folder / name).stat().st_size for name in FILES)


def _report(log: Path) -> None:
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps({"pid": os.getpid(), "peak_kib": peak_kib, **STATS}) + "\n")


def _rows(name: str, index: int, partitions: int) -> np.ndarray:
    """Rows [index/partitions, (index+1)/partitions) of one .npy file, read with one readinto."""
    with open(DATA / name, "rb") as f:
        np.lib.format.read_magic(f)
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        lo, hi = index * shape[0] // partitions, (index + 1) * shape[0] // partitions
        out = np.empty((hi - lo, *shape[1:]), dtype)
        f.seek(lo * row, os.SEEK_CUR)
        got = f.readinto(memoryview(out).cast("B"))
    assert got == out.nbytes, f"{name}: short read"
    if not STATS["read"] and (log := os.environ.get(LOG_ENV)):
        atexit.register(_report, Path(log))
    STATS["read"] += got
    return out


def partition(index: int, partitions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's share of the training rows (all of them for one partition)."""
    return tuple(torch.from_numpy(_rows(n, index, partitions)) for n in FILES)


def model(config: dict) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, config["hidden"]),
        torch.nn.ReLU(),
        torch.nn.Linear(config["hidden"], CLASSES),
    )


def optimizer(net: torch.nn.Module, config: dict) -> torch.optim.Optimizer:
    return torch.optim.AdamW(net.parameters(), lr=config["lr"])


def train_unit(net: torch.nn.Module, opt: torch.optim.Optimizer, data, config: dict) -> dict:
    """One pass over `data` in an order drawn from torch's generator (the configuration's)."""
    x, y = data
    net.train()
    order = torch.randperm(len(y))
    total = 0.0
    for start in range(0, len(y), config["batch_size"]):
        rows = order[start : start + config["batch_size"]]
        loss = torch.nn.functional.cross_entropy(net(x[rows]), y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item() * len(rows)
        STATS["batches"] += 1
    return {"loss": total / len(y)}


def evaluate(net: torch.nn.Module, config: dict) -> dict:
    """Accuracy on 4,096 held-out rows, made in memory (they are not training data read)."""
    net.eval()
    x, y = table(4096, 1)
    with torch.no_grad():
        return {"accuracy": float((net(x).argmax(dim=1) == y).float().mean())}
