"""What this rank holds of the training state, and what every rank holds: the plan's input.

capture() names the state as a checkpoint stores it (state.py's format:
the model's state dict without wrapper prefixes, the optimizer's state by
parameter name, the scheduler's state, flattened by structure.py) and
returns, for every full tensor, the rows each rank holds (plan.Entry) and
this rank's live local tensor. Nothing is copied or communicated: a
DTensor (FSDP2's parameters and their optimizer state) says where every
rank's rows lie, and any other tensor is the same on every rank.

A DTensor whose local part is not a block of rows (sharded on another
dimension than 0, or partial) is gathered whole on every rank with
full_tensor(), a collective, and then counted as replicated.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from git_mgit.runtime.loading import TORCH_DTYPES
from git_mgit.runtime.training import state, structure
from git_mgit.runtime.training.distributed import World
from git_mgit.runtime.training.layout import CheckpointError
from git_mgit.runtime.training.plan import MODEL, Entry, Holding

SAFETENSORS_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}


@dataclass
class Held:
    """The global layout of the training state and this rank's part of it."""

    entries: dict[str, Entry] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # entry -> this rank's rows
    rows: dict[str, tuple[int, int]] = field(default_factory=dict)  # entry -> [start, stop)
    skeletons: dict[str, Any] = field(default_factory=dict)  # "optimizer", "scheduler"
    gathered: dict[str, torch.Tensor] = field(default_factory=dict)  # DTensors not held by rows

    def digest(self) -> str:
        """A fingerprint of the layout: every rank's must be the same."""
        text = repr(sorted((e.name, e.dtype, e.shape, e.holdings) for e in self.entries.values()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def named_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, scheduler: Any | None
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every tensor of the training state by entry name, and the JSON skeletons around them."""
    tensors = {f"{MODEL}{n}": t for n, t in state.unwrap(model).state_dict().items()}
    skeletons: dict[str, Any] = {}
    osd = None
    if optimizer is not None:
        osd = state.by_name(optimizer.state_dict(), state.param_names(model, optimizer))
    for key, value in (
        (state.OPTIMIZER, osd),
        (state.SCHEDULER, scheduler and scheduler.state_dict()),
    ):
        if value is not None:
            skeletons[key], flat = structure.flatten(value, key)
            tensors.update(flat)
    return tensors, skeletons


def capture(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    world: World,
) -> Held:
    """This rank's view of the whole training state (a collective only for odd DTensors)."""
    tensors, skeletons = named_state(model, optimizer, scheduler)
    out = Held(skeletons=skeletons)
    everyone = tuple(range(world.world_size))
    for name, t in tensors.items():
        local, holdings = _placed(t, world)
        if holdings is None and _is_dtensor(t):  # gathered whole: restored by distributing
            out.gathered[name] = t
        if holdings is None:
            rows = t.shape[0] if t.dim() else 1
            holdings = tuple(Holding(r, 0, rows) for r in everyone)
        dtype = SAFETENSORS_DTYPES.get(local.dtype)
        if dtype is None:
            raise CheckpointError(f"tensor {name!r}: dtype {local.dtype} has no safetensors type")
        entry = Entry(name, dtype, tuple(t.shape), holdings)  # a DTensor's shape is global
        out.entries[name] = entry
        mine = [h for h in holdings if h.rank == world.rank]
        if mine:
            out.tensors[name] = local
            out.rows[name] = (mine[0].start, mine[0].stop)
    return out


def _is_dtensor(t: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def _placed(t: torch.Tensor, world: World) -> tuple[torch.Tensor, tuple[Holding, ...] | None]:
    """(this rank's local tensor, every rank's rows), or (t, None) when t is the same everywhere."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

    if not isinstance(t, DTensor):
        return t.detach(), None
    rows_only = all(
        isinstance(p, Replicate) or (isinstance(p, Shard) and p.dim == 0) for p in t.placements
    )
    if not rows_only or t.dim() == 0:
        return t.full_tensor().detach(), None  # a collective: every rank gets the whole tensor
    mesh = t.device_mesh
    ranks = mesh.mesh
    holdings = []
    for coord in itertools.product(*(range(s) for s in mesh.shape)):
        shape, offset = _compute_local_shape_and_global_offset(
            t.shape, mesh.shape, list(coord), t.placements
        )
        holdings.append(Holding(int(ranks[coord]), offset[0], offset[0] + shape[0]))
    return t.to_local().detach(), tuple(sorted(holdings, key=lambda h: h.rank))
