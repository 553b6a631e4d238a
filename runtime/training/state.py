"""What a checkpoint takes from the model, optimizer and scheduler, and how it is put back.

capture() returns references to live state (copying it off the device is
staging's job), in one format whatever the wrapping:

- the model's full state dict by fully qualified name, without DDP's
  `module.` prefix, so a checkpoint is an ordinary model version;
- the optimizer's state_dict with parameter *names* for the integer ids
  (`state/fc.weight/exp_avg`), as torch.distributed.checkpoint writes it, so
  a checkpoint taken under FSDP resumes under DDP and back;
- the scheduler's state_dict;
flattened (structure.py) into tensors and JSON skeletons.

capture() and apply() take and put back a whole state in one process's
memory: what tuning keeps of a branch and a selection hop carries. A run's
checkpoints do not go through them: each rank writes its own share
(holdings.py, plan.py) and restores its own rows (resume.py). For a model
sharded by FSDP (FSDP2's fully_shard, or FSDP1), capture() gathers the full
state through torch.distributed.checkpoint's state_dict API into rank 0's
host memory (cpu_offload), and apply() scatters it back
(broadcast_from_rank0). Any other model (plain, DDP) holds the same state on
every rank, so only rank 0 reads it and nothing is communicated.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from git_mgit.runtime.training import structure
from git_mgit.runtime.training.distributed import World

Tensors = dict[str, torch.Tensor]
OPTIMIZER, SCHEDULER = "optimizer", "scheduler"


@dataclass
class Captured:
    """One rank's share of a checkpoint: live tensors and the JSON skeletons around them."""

    model: Tensors = field(default_factory=dict)
    training: Tensors = field(default_factory=dict)  # optimizer/..., scheduler/...
    skeletons: dict[str, Any] = field(default_factory=dict)  # "optimizer", "scheduler"
    fresh: bool = False  # the tensors are copies already (gathered to the host), not live state


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside DDP and torch.compile wrappers."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        else:
            return model


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether FSDP (2 or 1) shards the model; FSDP was imported if it does."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return False
    kinds = (fsdp.FSDPModule, fsdp.FullyShardedDataParallel)
    return any(isinstance(m, kinds) for m in model.modules())


def _dcp():
    """torch.distributed.checkpoint's state-dict API (a second to import: only for FSDP)."""
    from torch.distributed.checkpoint import state_dict

    return state_dict


def param_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name of each parameter the optimizer holds, in its state_dict's id order."""
    names = {id(p): n for n, p in unwrap(model).named_parameters()}
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in names:
                raise structure.StructureError(
                    "the optimizer holds a parameter that is not in the model; "
                    "checkpoint the model the optimizer was built on"
                )
            out.append(names[id(p)])
    return out


def by_name(osd: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    return {
        "state": {names[i]: s for i, s in osd["state"].items()},
        "param_groups": [
            {**g, "params": [names[i] for i in g["params"]]} for g in osd["param_groups"]
        ],
    }


def by_id(osd: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    ids = {n: i for i, n in enumerate(names)}
    return {
        "state": {ids[n]: s for n, s in osd["state"].items()},
        "param_groups": [
            {**g, "params": [ids[n] for n in g["params"]]} for g in osd["param_groups"]
        ],
    }


def capture(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    world: World,
) -> Captured:
    """This rank's share of the training state: all of it on rank 0, nothing elsewhere.

    A collective for a sharded model (every rank must call it).
    """
    sharded = is_sharded(model)
    if not (world.writer or sharded):
        return Captured()
    if sharded:
        model_state, osd = _gather(model, optimizer)
    else:
        model_state = dict(unwrap(model).state_dict())
        osd = None
        if optimizer is not None:
            osd = by_name(optimizer.state_dict(), param_names(model, optimizer))
    if not world.writer:
        return Captured()
    out = Captured(model=model_state, fresh=sharded)
    for key, value in ((OPTIMIZER, osd), (SCHEDULER, scheduler and scheduler.state_dict())):
        if value is not None:
            out.skeletons[key], tensors = structure.flatten(value, key)
            out.training.update(tensors)
    if sharded:
        _unalias(out, model, optimizer, scheduler)
    return out


def _gather(model: torch.nn.Module, optimizer: Any) -> tuple[Tensors, Any]:
    """Full state dicts of a sharded model, gathered into rank 0's host memory (a collective)."""
    dcp = _dcp()
    options = dcp.StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = dcp.get_model_state_dict(model, options=options)
    if optimizer is None:
        return model_state, None
    if not optimizer.state:
        # DCP would initialise the empty state with a zero-gradient step, moving Adam's
        # step count: before the first step there is nothing to gather.
        return model_state, by_name(optimizer.state_dict(), param_names(model, optimizer))
    return model_state, dcp.get_optimizer_state_dict(model, optimizer, options=options)


def _unalias(out: Captured, model: torch.nn.Module, optimizer: Any, scheduler: Any) -> None:
    """Copy what DCP handed back as is rather than gathered (a CPU `step`, unsharded buffers).

    Gathered tensors are new; anything else is live state the next step changes,
    while the background writer may still be reading it.
    """
    from torch.distributed.tensor import DTensor

    live = [*model.parameters(), *model.buffers()]
    if optimizer is not None:
        live += [
            v for st in optimizer.state.values() for v in st.values() if isinstance(v, torch.Tensor)
        ]
    if scheduler is not None:
        live += list(structure.flatten(scheduler.state_dict(), SCHEDULER)[1].values())
    ptrs = {
        (t.to_local() if isinstance(t, DTensor) else t).untyped_storage().data_ptr() for t in live
    }
    for part in (out.model, out.training):
        for name, t in part.items():
            if t.untyped_storage().data_ptr() in ptrs:
                part[name] = t.detach().clone()


def apply(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    captured: Captured,
    world: World,
) -> None:
    """Put a checkpoint's state back; every rank calls it.

    Every rank needs the skeletons and the scheduler's tensors. A sharded
    model needs the model's and the optimizer state's tensors on rank 0 only
    (they are scattered from there); any other model needs them everywhere.
    """
    sharded = is_sharded(model)
    if sharded:
        dcp = _dcp()
        options = dcp.StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        dcp.set_model_state_dict(model, captured.model if world.writer else {}, options=options)
    else:
        unwrap(model).load_state_dict(captured.model)
    skeleton = captured.skeletons.get(OPTIMIZER)
    if optimizer is not None and skeleton is not None:
        if not skeleton["state"]:
            hyperparameters(
                optimizer, structure.unflatten(skeleton["param_groups"], captured.training)
            )
        elif sharded:
            osd = structure.unflatten(skeleton, captured.training) if world.writer else {}
            dcp.set_optimizer_state_dict(model, optimizer, osd, options=options)
        else:
            osd = structure.unflatten(skeleton, captured.training)
            optimizer.load_state_dict(by_id(osd, param_names(model, optimizer)))
    if scheduler is not None and SCHEDULER in captured.skeletons:
        scheduler.load_state_dict(
            structure.unflatten(captured.skeletons[SCHEDULER], captured.training)
        )


def hyperparameters(optimizer: torch.optim.Optimizer, groups: Any) -> None:
    """Only the groups' settings (lr, betas, ...) of a checkpoint taken before the first step.

    Loading an empty state through torch.distributed.checkpoint would
    initialise it with a zero-gradient step, which changes Adam's bias correction.
    """
    for group, saved in zip(optimizer.param_groups, groups, strict=True):
        group.update({k: v for k, v in saved.items() if k != "params"})


def replicated(name: str, sharded: bool) -> bool:
    """Whether every rank needs training tensor `name` on restore (see apply)."""
    return not (sharded and name.startswith(f"{OPTIMIZER}/state/"))
