"""Model selection three ways: MOP (`git mgit select`) against task and data parallelism.

One CPU workload (selection_workload.py, committed as the repository's
`workload.py`): 8 configurations (4 with --quick) of an MLP over a
training set in a file on disk, on 2 worker processes, each approach
measured end to end with its process starts (paper 003, Figure 1's
comparison):

- MOP: the real `git mgit select --workers 2`; each worker reads its half
  of the file once and configurations hop between workers, one sub-epoch at
  a time, through state files; every epoch of every configuration is a
  checkpoint commit;
- task parallelism: 2 worker processes, each reads the whole file once and
  trains every other configuration over all of it (Celery, Dask);
- data parallelism: for each configuration in turn, a 2-process torch DDP
  job (gloo) over the file split in 2, which reads its half of the file and
  all-reduces gradients after every batch (Horovod).

The workload's data function counts the bytes it reads and each worker logs
them with its peak RSS when it exits (selection_workload.py). Nothing is
checkpointed outside MOP.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import selection_workload
import torch.distributed as dist
from phases import log
from tools import MGIT, BenchRepo

HERE = Path(__file__).resolve().parent
WORKERS = 2
NAME = "bench"  # the selection's name: branches runs/bench-c00, ...
LRS = [0.01, 0.003, 0.001, 0.0003]
SPACE = """\
[select]
model = "workload:model"
optimizer = "workload:optimizer"
data = "workload:partition"
train = "workload:train_unit"
evaluate = "workload:evaluate"
metric = "accuracy"
goal = "max"
epochs = {epochs}

[space]
{grid}
"""
LABELS = {
    "mop": "MOP (git mgit select)",
    "task": "task parallelism",
    "ddp": "data parallelism (DDP), one by one",
}


def _size(quick: bool) -> tuple[int, int, dict[str, list]]:
    """(training rows, epochs, grid): 64 MiB of features and 8 configurations, or for
    --quick 16 MiB and 4 (each DDP job pays some 5 s of process start and set-up)."""
    rows, epochs, lrs = (16384, 2, LRS[:2]) if quick else (65536, 3, LRS)
    return rows, epochs, {"lr": lrs, "hidden": [32, 64], "batch_size": [256]}


def _repo(scratch: Path, env: dict[str, str], epochs: int, grid: dict[str, list]) -> BenchRepo:
    """A git-mgit repository whose commit holds the workload and its space."""
    repo = BenchRepo(MGIT, scratch / "selection", env, None)
    shutil.copy(HERE / "selection_workload.py", repo.path / "workload.py")
    lines = "\n".join(f"{name} = {json.dumps(values)}" for name, values in grid.items())
    (repo.path / "space.toml").write_text(SPACE.format(epochs=epochs, grid=lines))
    (repo.path / ".gitignore").write_text("data/\n")
    repo.git("add", "workload.py", "space.toml", ".gitignore")
    repo.commit("selection workload")
    return repo


def _logged(repo: BenchRepo, tag: str) -> tuple[dict[str, str], Path]:
    """The environment an approach's processes run in, and where their workers log."""
    path = repo.path.parent / f"selection-{tag}.jsonl"
    return {**repo.env, selection_workload.LOG_ENV: str(path)}, path


def _measured(wall_s: float, log_path: Path, metrics: dict, hopped: int = 0) -> dict[str, object]:
    """One approach's numbers: its wall time, what each worker process logged at exit
    (bytes read, peak RSS, gradient bytes sent), each configuration's final metrics, and
    the model bytes moved between workers (gradients sent, plus `hopped` state files)."""
    workers = [json.loads(line) for line in log_path.read_text().splitlines()]
    sent = hopped + sum(w.get("sent", 0) for w in workers)
    return {"wall_s": wall_s, "workers": workers, "metrics": metrics, "sent_bytes": sent}


def _mop(repo: BenchRepo, epochs: int) -> tuple[dict[str, object], list[dict]]:
    """`git mgit select`, timed from the outside; also returns its configurations."""
    env, log_path = _logged(repo, "mop")
    argv = ["git", "mgit", "select", "--space", "space.toml", "--workers", str(WORKERS)]
    argv += ["--name", NAME, "--json"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=repo.path, env=env, capture_output=True, text=True)
    wall_s = time.monotonic() - start
    if done.returncode:
        raise RuntimeError(f"git mgit select failed:\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout)
    configs = [{"label": c["label"], "values": c["values"]} for c in summary["configs"]]
    metrics = {c["label"]: c["history"][-1] for c in summary["configs"]}
    # Each unit writes its configuration's state once and the next unit reads it.
    states = (repo.path / ".git" / "mgit" / "select" / NAME / "state").glob("*.safetensors")
    hopped = sum(p.stat().st_size for p in states) * WORKERS * epochs
    result = _measured(wall_s, log_path, metrics, hopped)
    return {**result, "driver_s": summary["seconds"]}, configs


def _workers(repo: BenchRepo, env: dict[str, str], mode: str, specs: list[dict]) -> dict:
    """Run selection_worker.py once per spec, all at once; their metrics, merged."""
    argv = [sys.executable, str(HERE / "selection_worker.py"), mode]
    procs = [
        subprocess.Popen(
            [*argv, json.dumps(spec)],
            cwd=repo.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for spec in specs
    ]
    metrics: dict = {}
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"selection_worker.py {mode} failed:\n{err[-3000:]}")
        metrics.update(json.loads(out))
    return metrics


def _task(repo: BenchRepo, configs: list[dict], epochs: int, threads: int) -> dict[str, object]:
    """Task parallelism: worker w trains configurations w, w + 2, ... over all the data."""
    env, log_path = _logged(repo, "task")
    base = {"epochs": epochs, "threads": threads}
    specs = [{**base, "configs": configs[w::WORKERS]} for w in range(WORKERS)]
    start = time.monotonic()
    metrics = _workers(repo, env, "task", specs)
    return _measured(time.monotonic() - start, log_path, metrics)


def _ddp(repo: BenchRepo, configs: list[dict], epochs: int, threads: int) -> dict[str, object]:
    """Data parallelism: one 2-rank DDP job per configuration, one job after another."""
    env, log_path = _logged(repo, "ddp")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    base = {"epochs": epochs, "threads": threads, "world": WORKERS, "port": store.port}
    metrics: dict = {}
    start = time.monotonic()
    for config in configs:
        specs = [{**base, "config": config, "rank": rank} for rank in range(WORKERS)]
        metrics.update(_workers(repo, env, "ddp", specs))
    return _measured(time.monotonic() - start, log_path, metrics)


def bench(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """The three approaches on the same workload, repository and data file, one after another."""
    rows, epochs, grid = _size(quick)
    repo = _repo(scratch, env, epochs, grid)
    size = selection_workload.write(repo.path / "data", rows)
    threads = max(1, (os.cpu_count() or 1) // WORKERS)  # as `git mgit select` gives its workers
    log(f"selection: MOP, {WORKERS} workers, {epochs} epochs, {size / (1 << 20):.0f} MiB of data")
    mop, configs = _mop(repo, epochs)
    log(f"selection: task parallelism, {len(configs)} configurations")
    task = _task(repo, configs, epochs, threads)
    log(f"selection: data parallelism, {len(configs)} DDP jobs one after another")
    ddp = _ddp(repo, configs, epochs, threads)
    repo.remove()
    return {
        "configs": len(configs),
        "workers": WORKERS,
        "epochs": epochs,
        "rows": rows,
        "data_bytes": size,
        "threads": threads,
        "metric": "accuracy",
        "approaches": {
            tag: {"label": LABELS[tag], **result}
            for tag, result in (("mop", mop), ("task", task), ("ddp", ddp))
        },
    }
