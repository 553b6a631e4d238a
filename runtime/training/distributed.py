"""The process group a run trains in, and the few collectives checkpointing needs.

Only tensors cross processes (torch.distributed's *_object collectives
pickle, so none is used): small payloads travel as safetensors bytes in a
uint8 tensor, large state dicts tensor by tensor after a JSON layout.
On NCCL every tensor must live on the process's GPU, so `World.device` is
where they are staged. A run without a process group (a plain script, a
test) is a World of one, and every collective is then the identity.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

Tensors = dict[str, torch.Tensor]
Group = dist.ProcessGroup
CPU = torch.device("cpu")


@dataclass(frozen=True)
class World:
    """This process's place in the run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = CPU

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 and dist.is_available() and dist.is_initialized()

    @property
    def writer(self) -> bool:
        """Rank 0 writes and commits checkpoints; the others only contribute state."""
        return self.rank == 0

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def current() -> World:
    """The World of the initialised default process group (a World of one without one)."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    nccl = "nccl" in str(dist.get_backend())  # "nccl", or "cpu:gloo,cuda:nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else CPU
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return World(dist.get_rank(), dist.get_world_size(), local, device)


def pack(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, str] | None = None) -> bytes:
    """Tensors and string metadata as safetensors bytes."""
    return st_save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, dict(meta or {}))


def unpack(data: bytes) -> tuple[Tensors, dict[str, str]]:
    n = int.from_bytes(data[:8], "little")
    meta = json.loads(data[8 : 8 + n]).get("__metadata__") or {}
    return st_load(data), meta


def _to_tensor(data: bytes, world: World) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(world.device)


def all_gather_bytes(data: bytes, world: World, group: Group | None = None) -> list[bytes]:
    """Every rank's `data`, in rank order, on every rank (over `group`, a CPU one, if given)."""
    if not world.distributed:
        return [data]
    device = CPU if group is not None else world.device
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world.world_size)]
    dist.all_gather(sizes, size, group=group)
    longest = max(int(s) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8, device=device)
    mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    bufs = [torch.empty_like(mine) for _ in range(world.world_size)]
    dist.all_gather(bufs, mine, group=group)
    return [bytes(b[: int(s)].cpu().numpy()) for b, s in zip(bufs, sizes, strict=True)]


def cpu_group(world: World) -> Group | None:
    """A gloo group of every rank for a checkpoint writer thread's collectives (a collective).

    A thread beside the training loop cannot share the loop's group: collectives
    from two threads on one group would pair up differently on each rank.
    """
    if not world.distributed:
        return None
    return dist.new_group(backend="gloo")


def broadcast_(tensor: torch.Tensor, src: int, world: World) -> None:
    """Rank `src`'s tensor into `tensor` on every rank, in place (through the device on NCCL)."""
    if not world.distributed:
        return
    if tensor.device == world.device:
        dist.broadcast(tensor, src)
        return
    moved = tensor.to(world.device)
    dist.broadcast(moved, src)
    tensor.copy_(moved)


def broadcast_bytes(data: bytes | None, world: World) -> bytes:
    """Rank 0's `data` on every rank (the others pass None)."""
    if not world.distributed:
        assert data is not None
        return data
    size = torch.tensor([len(data) if data is not None else 0], dtype=torch.int64)
    size = size.to(world.device)
    dist.broadcast(size, 0)
    buf = (
        _to_tensor(data, world)
        if data is not None
        else torch.empty(int(size), dtype=torch.uint8, device=world.device)
    )
    dist.broadcast(buf, 0)
    return bytes(buf.cpu().numpy())


def broadcast_tensors(tensors: Mapping[str, torch.Tensor] | None, world: World) -> Tensors:
    """Rank 0's state dict on every rank (CPU tensors), one tensor at a time.

    The layout (names, dtypes, shapes) goes first as JSON, so the receivers
    allocate exactly; memory stays at the state dict plus one staged tensor.
    """
    if not world.distributed:
        assert tensors is not None
        return dict(tensors)
    layout = None
    if tensors is not None:
        layout = [
            [k, str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in tensors.items()
        ]
    payload = json.dumps(layout).encode() if tensors is not None else None
    entries = json.loads(broadcast_bytes(payload, world))
    out: Tensors = {}
    for name, dtype, shape in entries or []:
        if tensors is not None:
            buf = tensors[name].detach().to(world.device).contiguous()
        else:
            buf = torch.empty(shape, dtype=getattr(torch, dtype), device=world.device)
        dist.broadcast(buf, 0)
        out[name] = buf.cpu() if tensors is None else tensors[name]
    return out


def broadcast_int(value: int, world: World) -> int:
    """Rank 0's integer on every rank."""
    if not world.distributed:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=world.device)
    dist.broadcast(t, 0)
    return int(t.item())
