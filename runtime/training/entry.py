"""One training process, as torchrun starts it: `python -m git_mgit.runtime.training.entry SPEC [ARGS]`.

Sets up the process group from torchrun's environment (`cpu:gloo,cuda:nccl`
and this process's GPU when there is one, so that CPU tensors' collectives
and DCP's async_save work beside NCCL; gloo on the CPU otherwise), makes GPU
kernels deterministic unless the run opted out, imports the user's
`module:fn` from the repository, and calls it with a TrainContext. When the
function returns, every checkpointer is closed (background commits done,
ranks met at a barrier); when it raises, rank 0 still commits what it had
staged, and the process exits non-zero so torchrun stops the others.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from git_mgit.errors import MgitError
from git_mgit.runtime import callables
from git_mgit.runtime.training import distributed, threads
from git_mgit.runtime.training.context import TrainContext
from git_mgit.runtime.training.distributed import World
from git_mgit.runtime.training.launch import Spec
from git_mgit.runtime.training.layout import CheckpointError
from git_mgit.runtime.training.resume import find_checkpoint


def setup(spec: Spec) -> World:
    """Join the process group torchrun describes in the environment."""
    rank = int(os.environ.get("RANK", "0"))
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        if local >= torch.cuda.device_count():
            raise CheckpointError(
                f"{local + 1} processes on this node but {torch.cuda.device_count()} GPU(s): "
                "lower --nproc-per-node (NCCL needs a GPU per process)"
            )
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        backend = "cpu:gloo,cuda:nccl"  # DCP's async_save and CPU collectives need gloo too
    else:
        device, backend = torch.device("cpu"), "gloo"
    if spec.options.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(
            backend, rank=rank, world_size=size, device_id=device if device.type == "cuda" else None
        )
    return World(rank, size, local, device)


_ALIVE: list[object] = []
"""What holds the process group (the context, its DDP/FSDP modules): kept until os._exit.

Freed at exit, a DDP reducer drops the last reference to the destroyed gloo
group, whose destructor joins gloo's worker threads while holding the GIL;
a worker that then releases a Python tensor waits for the GIL forever (one
run in ten or so on torch 2.13). Never freeing them avoids that wait."""


def main(argv: list[str]) -> int:
    spec = Spec.from_json(argv[0])
    world = World(int(os.environ.get("RANK", "0")))  # until the group is set up
    ctx = None
    try:
        world = setup(spec)
        if spec.options.threads is not None:  # rank 0's on every node: one count per run
            threads.use(distributed.broadcast_int(spec.options.threads, world))
        fn = callables.load(spec.function, Path(spec.root))
        loaded = None
        if spec.resume:
            loaded = find_checkpoint(spec.root, spec.resume, world, spec.options.remote)
        ctx = TrainContext(spec, world, list(argv[1:]), loaded)
        _ALIVE.append(ctx)
        fn(ctx)
        ctx.close()
        return 0
    except MgitError as exc:
        print(f"git-mgit: rank {world.rank}: {exc}", file=sys.stderr)
        if os.environ.get("GIT_MGIT_DEBUG") == "1":
            traceback.print_exc()
        _drain(ctx, world, exc)
        return 2
    except BaseException as exc:
        traceback.print_exc()
        _drain(ctx, world, exc)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _drain(ctx: TrainContext | None, world: World, failure: BaseException) -> None:
    """Commit the checkpoints already staged: they are good, whatever failed after them."""
    if ctx is None:
        return
    try:
        ctx.drain()
    except MgitError as exc:
        if exc is not failure:
            print(f"git-mgit: rank {world.rank}: {exc}", file=sys.stderr)


def _exit(code: int) -> None:
    """Leave without interpreter finalisation, once everything is flushed and committed.

    Finalisation would free what _ALIVE keeps (and the user's module globals),
    with the deadlock it describes; the commits are done and the group
    destroyed by now, so nothing is lost.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
