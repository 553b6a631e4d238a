"""Restoring a run from a checkpoint commit, on any number of ranks.

Rank 0 finds the commit (runs.find) and tells every rank what it is; then
each rank reads from its own repository what it holds now (reading.py):

- a sharded tensor (an FSDP2 DTensor: parameters and their optimizer
  state): this rank's rows, whatever the number of ranks that wrote them,
  copied into the local shard; no rank reads for another;
- a replicated tensor (DDP's whole state, FSDP's scalars and buffers):
  one rank reads it, the ranks taking turns by bytes, and broadcasts it
  (over the GPU's link on NCCL), so N ranks read about 1/N each;
- the generators: rank r restores the saved rank r's (docs/training.md
  says what that means when the number of ranks changed).

`load_checkpoint` also reads the whole checkpoint into rank 0's memory
(`Resume.snapshot`) for code that wants the tensors rather than a restore.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from git_mgit.gitcmd import find_repo
from git_mgit.runtime.loading import TORCH_DTYPES
from git_mgit.runtime.training import distributed, holdings, rng, runs, state, storage, structure
from git_mgit.runtime.training.distributed import World
from git_mgit.runtime.training.layout import CheckpointError, Info, Snapshot
from git_mgit.runtime.training.plan import MODEL
from git_mgit.runtime.training.reading import CheckpointReader

RngState = tuple[dict[str, Any], dict[str, torch.Tensor]]


@dataclass
class Resume:
    """A checkpoint to resume from: its info on every rank; where to read its tensors."""

    commit: str
    model: str  # the checkpoint's model version
    info: Info
    snapshot: Snapshot | None = None  # its tensors in memory (load_checkpoint, rank 0)
    root: str | None = None  # this rank's repository, to read from (None: the snapshot)
    remote: str | None = None  # where to fetch objects this rank's repository lacks


@dataclass(frozen=True)
class Restored:
    """This rank's generator states from the checkpoint (for resuming mid-epoch)."""

    rng: RngState | None
    rng_epoch: RngState | None


def find_checkpoint(
    root: str | Path, rev: str, world: World | None = None, remote: str | None = None
) -> Resume:
    """The checkpoint commit `rev` names (a commit, `runs/NAME`, `runs/NAME~2`, ...), without
    reading its tensors. Every rank calls it with its own repository; rank 0 resolves `rev`.
    `remote`: where a rank fetches the objects its repository lacks (other nodes')."""
    world = world or distributed.current()
    header = None
    if world.writer:
        found = runs.find(find_repo(Path(root)), rev, remote)
        header = json.dumps([found.commit, found.model, found.info.to_json()]).encode()
    commit, model, info = json.loads(distributed.broadcast_bytes(header, world))
    return Resume(commit, model, Info.from_json(info), None, str(root), remote)


def load_checkpoint(root: str | Path | None, rev: str | None, world: World | None = None) -> Resume:
    """find_checkpoint, plus every tensor of the checkpoint in rank 0's memory (`snapshot`)."""
    world = world or distributed.current()
    assert root is not None and rev is not None
    resume = find_checkpoint(root, rev, world)
    if world.writer:
        repo = find_repo(Path(root))
        resume.snapshot = storage.read(root, runs.find(repo, resume.commit))
    return resume


def restore(
    resume: Resume,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    world: World | None = None,
) -> Restored:
    """Load the checkpoint into the objects and this process's generators; all ranks call it."""
    world = world or distributed.current()
    if resume.root is None:
        return _from_snapshot(resume, model, optimizer, scheduler, world)
    reader = CheckpointReader(
        find_repo(Path(resume.root)), resume.commit, resume.info, resume.remote
    )
    try:
        return _from_reader(reader, model, optimizer, scheduler, world)
    finally:
        reader.close()


class _Replicated:
    """Who reads which replicated tensor: the ranks take turns by bytes, in name order."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.loads = [0] * world.world_size

    def owner(self, nbytes: int) -> int:
        r = min(range(self.world.world_size), key=lambda i: (self.loads[i], i))
        self.loads[r] += nbytes
        return r


def _from_reader(
    reader: CheckpointReader,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    world: World,
) -> Restored:
    held = holdings.capture(model, None, None, world)
    turns = _Replicated(world)
    with torch.no_grad():
        for name in sorted(held.entries):
            entry = held.entries[name]
            _check(reader, name, entry.shape)
            if name in held.gathered:
                _distributed_into(reader.read(name), held.gathered[name])
            elif entry.sharded:
                held.tensors[name].copy_(reader.read(name, *held.rows[name]))
            else:
                _replicated_into(reader, name, held.tensors[name], turns.owner(entry.nbytes), world)
    params = {n: p for n, p in state.unwrap(model).named_parameters()}
    skeleton = reader.json(state.OPTIMIZER)
    if optimizer is not None and skeleton is not None:
        if not skeleton["state"]:
            state.hyperparameters(optimizer, structure.unflatten(skeleton["param_groups"], {}))
        else:
            tensors = _optimizer_tensors(reader, skeleton, params, turns, world)
            osd = structure.unflatten(skeleton, tensors)
            optimizer.load_state_dict(state.by_id(osd, state.param_names(model, optimizer)))
    sched = reader.json(state.SCHEDULER)
    if scheduler is not None and sched is not None:
        tensors = {n: _replicated(reader, n, turns, world) for n in sorted(_refs(sched))}
        scheduler.load_state_dict(structure.unflatten(sched, tensors))
    mine = _generators(reader, "rng", world)
    if mine is not None:
        rng.restore(*mine)
    return Restored(mine, _generators(reader, "rng-epoch", world))


def _check(reader: CheckpointReader, name: str, shape: tuple[int, ...]) -> None:
    saved = reader.shapes.get(name)
    if saved is None:
        raise CheckpointError(
            f"checkpoint {reader.commit[:10]} has no {name!r}: it was taken of another model"
        )
    if saved.shape != tuple(shape):
        raise CheckpointError(
            f"checkpoint {reader.commit[:10]}: {name!r} is {list(saved.shape)} there and "
            f"{list(shape)} here: it was taken of another model"
        )


def _distributed_into(full: torch.Tensor, target: torch.Tensor) -> None:
    """A DTensor whose shards are not rows: its local part of the whole, sliced here."""
    from torch.distributed.tensor import distribute_tensor

    placed = distribute_tensor(
        full.to(target.device), target.device_mesh, target.placements, src_data_rank=None
    )
    target.to_local().copy_(placed.to_local())


def _replicated_into(
    reader: CheckpointReader, name: str, target: torch.Tensor, owner: int, world: World
) -> None:
    if world.rank == owner:
        target.copy_(reader.read(name))
    distributed.broadcast_(target, owner, world)


def _replicated(
    reader: CheckpointReader, name: str, turns: _Replicated, world: World
) -> torch.Tensor:
    """A whole tensor on every rank: read by one, broadcast to the others."""
    shape = reader.shapes[name]
    owner = turns.owner(shape.row_bytes * (shape.shape[0] if shape.shape else 1))
    if world.rank == owner:
        out = reader.read(name)
    else:
        out = torch.empty(shape.shape, dtype=TORCH_DTYPES[shape.dtype])
    distributed.broadcast_(out, owner, world)
    return out


def _refs(skeleton: Any) -> list[str]:
    """The tensor names a skeleton refers to."""
    if isinstance(skeleton, list):
        return [n for x in skeleton for n in _refs(x)]
    if not isinstance(skeleton, dict):
        return []
    if "$tensor" in skeleton:
        return [skeleton["$tensor"]]
    return [n for x in skeleton.values() for n in _refs(x)]


def _optimizer_tensors(
    reader: CheckpointReader,
    skeleton: Mapping[str, Any],
    params: Mapping[str, torch.Tensor],
    turns: _Replicated,
    world: World,
) -> dict[str, torch.Tensor]:
    """The optimizer state's tensors as this rank holds them: a DTensor's rows for a parameter
    that is one (and state of its shape), the whole tensor otherwise."""
    from torch.distributed.tensor import DTensor

    out: dict[str, torch.Tensor] = {}
    refs = [
        (fqn, ref["$tensor"])
        for fqn, st in skeleton["state"].items()
        for ref in st.values()
        if isinstance(ref, dict) and "$tensor" in ref
    ]
    for fqn, name in sorted(refs, key=lambda r: r[1]):
        p = params.get(fqn)
        saved = reader.shapes[name]
        if isinstance(p, DTensor) and tuple(p.shape) == saved.shape:
            local, holdings_ = holdings._placed(p, world)
            rows = next(((h.start, h.stop) for h in holdings_ or () if h.rank == world.rank), None)
            assert rows is not None
            part = reader.read(name, *rows).to(local.device)
            out[name] = DTensor.from_local(
                part, p.device_mesh, p.placements, shape=p.shape, stride=p.stride(), run_check=False
            )
        else:
            out[name] = _replicated(reader, name, turns, world)
    return out


def _generators(reader: CheckpointReader, key: str, world: World) -> RngState | None:
    """This rank's saved generators (None: none saved for it, nor for the epoch's start)."""
    fields = reader.json(key)
    if fields is None or world.rank >= len(fields):
        return None
    prefix = f"{key}/{world.rank}/"
    tensors = {n[len(prefix) :]: reader.read(n) for n in reader.names() if n.startswith(prefix)}
    return fields[world.rank], tensors


def _from_snapshot(
    resume: Resume,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    world: World,
) -> Restored:
    """A snapshot in memory (a world of one): state.apply, then the generators."""
    snap = resume.snapshot
    if snap is None or world.distributed:
        raise CheckpointError("a checkpoint held in memory restores in one process only")
    model_state = {n[len(MODEL) :] if n.startswith(MODEL) else n: t for n, t in snap.model.items()}
    state.apply(
        model,
        optimizer,
        scheduler,
        state.Captured(model_state, snap.training, snap.skeletons),
        world,
    )
    mine = snap.rng[0] if snap.rng else None
    if mine is not None:
        rng.restore(*mine)
    return Restored(mine, snap.rng_epoch[0] if snap.rng_epoch else None)
