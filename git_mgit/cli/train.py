"""Train with torchrun, committing checkpoints onto a run branch; resume from any of them.

git mgit train --nproc-per-node 2 train:main -- --lr 0.01      # DDP, 2 processes, branch runs/main-<time>
git mgit train --nproc-per-node 2 --name demo --from base train:main
git mgit train --nproc-per-node 4 --fsdp --name big train:main  # sharded model folder checkpoints
git mgit train --nnodes 2 --nproc-per-node 8 --rdzv-endpoint host:29400 --name demo train:main
git mgit train --resume runs/demo --nproc-per-node 2            # continue where it stopped
git mgit train --resume runs/demo~3 --name demo-b --nproc-per-node 2   # branch a new run

`module:fn` is called in every process with a TrainContext (rank, world
size, device, wrap(), checkpointer()); see docs/training.md.
"""

from __future__ import annotations

import argparse
import dataclasses


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "function",
        nargs="?",
        help="module:fn in the repository (default with --resume: the recorded one)",
    )
    parser.add_argument(
        "args", nargs=argparse.REMAINDER, help="after --: arguments for your function (ctx.args)"
    )
    parser.add_argument(
        "--nproc-per-node", type=int, default=1, help="processes on this machine (default 1)"
    )
    parser.add_argument("--nnodes", type=int, default=1, help="machines (each runs this command)")
    parser.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous for --nnodes > 1")
    parser.add_argument(
        "--resume", metavar="REV", help="restore everything from this checkpoint commit"
    )
    parser.add_argument("--name", help="the run: branch runs/NAME, files checkpoints/NAME/")
    parser.add_argument(
        "--from",
        dest="start",
        metavar="MODEL",
        help="the model training starts from (a provenance parent)",
    )
    parser.add_argument("--fsdp", action="store_true", help="shard the model with FSDP2 (ctx.wrap)")
    parser.add_argument(
        "--checkpoint",
        dest="mode",
        choices=["off", "sync", "background", "adaptive"],
        default="background",
        help="how checkpoints are written (default background)",
    )
    parser.add_argument(
        "--every", type=int, metavar="N", help="also checkpoint every N steps (ckpt.step)"
    )
    parser.add_argument(
        "--max-pending",
        type=int,
        default=1,
        metavar="N",
        help="checkpoints staged but not yet committed, at most (default 1)",
    )
    parser.add_argument(
        "--eps", type=float, default=1 / 15, help="adaptive mode: overhead bound (default 1/15)"
    )
    parser.add_argument(
        "--remote",
        metavar="NAME",
        help="several nodes: the remote each node's clone publishes its checkpoint objects to "
        "(default origin, when it exists; not needed on a shared filesystem)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch's threads per process (default: OMP_NUM_THREADS, else the cores shared by "
        "the processes; with --resume, the checkpoint's)",
    )
    parser.add_argument(
        "--no-deterministic",
        dest="deterministic",
        action="store_false",
        help="allow nondeterministic GPU kernels",
    )


def run(args: argparse.Namespace) -> int:
    from git_mgit.gitcmd import find_repo
    from git_mgit.runtime.training.launch import Options, Request, launch

    function, extra = args.function, list(args.args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    if args.resume and function is not None and ":" not in function:
        function, extra = None, [function, *extra]  # `--resume REV -- ARGS`: argparse ate the --
    options = Options(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Options)})
    req = Request(
        function,
        extra,
        args.nproc_per_node,
        args.nnodes,
        args.rdzv_endpoint,
        args.resume,
        args.name,
        args.start,
        options,
    )
    return launch(find_repo(), req)
