"""A configuration's training state between units: how a model hops from worker to worker.

Cerebro hops models through a shared file system (paper 003, section
3.3); here it is one safetensors file per configuration in the run's
scratch folder: the model, the optimizer, the configuration's random
generators and its position, laid out exactly as a checkpoint commit's
files (runtime.training.layout), so the driver commits it unchanged at an
epoch's end. It is replaced atomically when a unit ends: a worker that dies
mid-unit leaves the state from before the unit, which is where the unit
restarts. Never pickled.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from git_mgit.runtime.training import distributed, layout, rng, state
from git_mgit.runtime.training.layout import Info, Snapshot

MODEL = "model/"


def take(info: Info, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Snapshot:
    """The state after a unit, with this process's generators (which the configuration owns)."""
    captured = state.capture(model, optimizer, None, distributed.current())
    return Snapshot(info, captured.model, captured.training, captured.skeletons, [rng.capture()])


def put(snapshot: Snapshot, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load a hopped state into freshly made objects and this process's generators."""
    captured = state.Captured(snapshot.model, snapshot.training, snapshot.skeletons)
    state.apply(model, optimizer, None, captured, distributed.current())
    rng.restore(*snapshot.rng[0])


def write(path: Path, snapshot: Snapshot) -> None:
    (model_file, training_file), _ = layout.plan(snapshot, 1)
    tensors = {MODEL + n: t.contiguous() for n, t in model_file.tensors.items()}
    tensors.update({n: t.contiguous() for n, t in training_file.tensors.items()})
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    save_file(tensors, str(tmp), metadata=training_file.metadata)
    os.replace(tmp, path)


def read(path: Path) -> Snapshot:
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
        tensors = {n: f.get_tensor(n) for n in f.keys()}  # noqa: SIM118 - safe_open has no iterator
    model = {n[len(MODEL) :]: t for n, t in tensors.items() if n.startswith(MODEL)}
    training = {n: t for n, t in tensors.items() if not n.startswith(MODEL)}
    return layout.unplan(model, training, meta)
