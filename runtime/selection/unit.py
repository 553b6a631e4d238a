"""One training unit: configuration i for one sub-epoch on the partition this worker holds.

The configuration's state comes in through its hop file and goes out the
same way, generators included, so a configuration trained unit by unit on
different workers draws the same random numbers as one trained in a single
process over the same partitions in the same order (MOP's sequential
equivalence, paper 003 section 2). Its first unit starts from
torch, numpy and `random` seeded with the configuration's seed and the user's `model(config)`, or the starting
model's weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from git_mgit.runtime.selection import hop
from git_mgit.runtime.training import rng, threads
from git_mgit.runtime.training.layout import Info, Position, metric_values


@dataclass(frozen=True)
class Task:
    """What the driver sends a worker: one unit, and where the configuration's state lives."""

    run: str  # the configuration's run (branch runs/RUN)
    config: dict[str, Any]
    epoch: int
    visit: int  # units of this epoch the configuration has finished (0 .. partitions-1)
    partitions: int
    evaluate: bool  # the epoch's last unit: evaluate after training
    state: str  # the hop file
    seed: int
    start: str | None = None  # a safetensors file of starting weights


def run(task: Task, fns: dict[str, Callable], data: Any) -> dict[str, float | str]:
    """Train the unit and hop the state out; returns the unit's metrics."""
    rng.seed(task.seed)  # a first unit's generators; later units restore theirs
    model = fns["model"](task.config)
    optimizer = fns["optimizer"](model, task.config)
    path = Path(task.state)
    if path.exists():
        hop.put(hop.read(path), model, optimizer)
    elif task.start is not None:
        model.load_state_dict(load_file(task.start))
    metrics = dict(fns["train"](model, optimizer, data, task.config) or {})
    if task.evaluate and "evaluate" in fns:
        metrics.update(fns["evaluate"](model, task.config) or {})
    values = metric_values(metrics)
    step = task.visit + 1
    position = Position(
        epoch=task.epoch,
        step=step,
        global_step=task.epoch * task.partitions + step,
        end_of_epoch=step == task.partitions,
    )
    info = Info(task.run, position, values, dict(task.config), threads=threads.current())
    hop.write(path, hop.take(info, model, optimizer))
    return values
