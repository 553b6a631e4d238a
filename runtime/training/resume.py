"""Restoring a run from a checkpoint commit, on every rank.

Rank 0 reads the commit (runs.find, storage.read); the other ranks may
have no copy of the repository (another node), so they receive from rank 0
what they need: the JSON parts, the scheduler's tensors, every rank's RNG
states, and, unless the model is sharded, the model and optimizer tensors
(an FSDP model scatters those from rank 0 itself, see state.apply).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from git_mgit.gitcmd import find_repo
from git_mgit.runtime.training import distributed, rng, runs, state, storage
from git_mgit.runtime.training.distributed import World
from git_mgit.runtime.training.layout import CheckpointError, Info, Snapshot

RngState = tuple[dict[str, Any], dict[str, torch.Tensor]]


@dataclass
class Resume:
    """A checkpoint to resume from: its info on every rank, its tensors on rank 0."""

    commit: str
    model: str  # the checkpoint's model version
    info: Info
    snapshot: Snapshot | None  # rank 0 only


@dataclass(frozen=True)
class Restored:
    """This rank's generator states from the checkpoint (for resuming mid-epoch)."""

    rng: RngState
    rng_epoch: RngState | None


def load_checkpoint(root: str | Path | None, rev: str | None, world: World | None = None) -> Resume:
    """The checkpoint commit `rev` names (a commit, `runs/NAME`, `runs/NAME~2`, ...).

    In a process group every rank calls it; only rank 0 reads the repository at `root`.
    """
    world = world or distributed.current()
    header = None
    found = snapshot = None
    if world.writer:
        assert root is not None and rev is not None
        found = runs.find(find_repo(Path(root)), rev)
        snapshot = storage.read(root, found)
        header = json.dumps([found.commit, found.model, found.info.to_json()]).encode()
    commit, model, info = json.loads(distributed.broadcast_bytes(header, world))
    return Resume(commit, model, Info.from_json(info), snapshot)


def restore(
    resume: Resume,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    world: World | None = None,
) -> Restored:
    """Load the checkpoint into the objects and this process's generators; all ranks call it."""
    world = world or distributed.current()
    if resume.info.world_size != world.world_size:
        raise CheckpointError(
            f"checkpoint {resume.commit[:10]} was taken by {resume.info.world_size} process(es); "
            f"resume it with as many (this run has {world.world_size})"
        )
    sharded = state.is_sharded(model)
    snap = resume.snapshot
    text = None
    shared: dict[str, torch.Tensor] | None = None
    if snap is not None:
        fields = {"skeletons": snap.skeletons, "rng": [f for f, _ in snap.rng]}
        if snap.rng_epoch is not None:
            fields["rng-epoch"] = [f for f, _ in snap.rng_epoch]
        text = json.dumps(fields).encode()
        shared = {n: t for n, t in snap.training.items() if state.replicated(n, sharded)}
        if not sharded:
            shared.update({f"model/{n}": t for n, t in snap.model.items()})
        for key, states in (("rng", snap.rng), ("rng-epoch", snap.rng_epoch or [])):
            for r, (_, tensors) in enumerate(states):
                shared.update({f"{key}/{r}/{n}": t for n, t in tensors.items()})
    fields = json.loads(distributed.broadcast_bytes(text, world))
    shared = distributed.broadcast_tensors(shared, world)
    training = {n: t for n, t in shared.items() if not n.startswith(("model/", "rng"))}
    if snap is not None:
        training.update(snap.training)  # rank 0 holds the optimizer state of a sharded model
    model_state = {n[len("model/") :]: t for n, t in shared.items() if n.startswith("model/")}
    if sharded and snap is not None:
        model_state = snap.model
    captured = state.Captured(model_state, training, fields["skeletons"])
    state.apply(model, optimizer, scheduler, captured, world)

    def own(key: str) -> RngState | None:
        if key not in fields:
            return None
        prefix = f"{key}/{world.rank}/"
        tensors = {n[len(prefix) :]: t for n, t in shared.items() if n.startswith(prefix)}
        return fields[key][world.rank], tensors

    mine = own("rng")
    assert mine is not None
    rng.restore(*mine)
    return Restored(mine, own("rng-epoch"))
