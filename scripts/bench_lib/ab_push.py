"""A/B timing of the stores section's one-more push: two revisions pushing to one remote.

    .venv/bin/python scripts/bench_lib/ab_push.py [--series I] [--history N] [--pushes K]
        [--store lfs|s3] REV_A REV_B

The stores section (stores_bench.py) times three one-more pushes per tool,
each a step of a different kind (a checkpoint `git add` stored whole or as a
delta, one the push must encode or not), on a machine whose noise is tens of
milliseconds: too few to tell two revisions apart. Here the bench's servers
and one series (history_models.py; 0 fp32 from scratch, 1 bf16 fine-tuning, 2
frozen layers) serve K one-more pushes into one remote, after a history of N
checkpoints, taking turns a b b a a b b a ... (so both sides meet every kind
of step and every minute of the machine), each revision's tree built as
scripts/ab builds it and put first on PYTHONPATH for git's hooks. Prints
every push's seconds and each side's median.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ab
import history_models
import stores_bench
import tools
from history_bench import _commit, _git, history_env
from phases import settle


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ab_push.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=0, help="history_models.SERIES index")
    parser.add_argument("--history", type=int, default=4, help="checkpoints pushed first")
    parser.add_argument("--pushes", type=int, default=12, help="one-more pushes, both sides")
    parser.add_argument("--store", choices=("lfs", "s3"), default="lfs")
    parser.add_argument("a")
    parser.add_argument("b")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="mgit-ab-push-"))
    try:
        sides = {"a": ab.tree(args.a, scratch / "a"), "b": ab.tree(args.b, scratch / "b")}
        env = history_env(scratch, tools.isolated_env(scratch), "stores")
        label = list(history_models.SERIES)[args.series]
        data = scratch / "data"
        data.mkdir()
        paths = list(history_models.series(label, data, args.history + args.pushes))
        tool = stores_bench.LFS if args.store == "lfs" else stores_bench.S3
        times: dict[str, list[float]] = {"a": [], "b": []}
        with stores_bench.servers(scratch / "stores", env) as srv:
            remote = stores_bench.new_remote(srv, tool, "ab")
            work = scratch / "src"
            src = stores_bench._committed(work, srv.env, "git-mgit", paths[: args.history])
            _git(src, srv.env, "config", "mgit.store", remote.store or "")
            stores_bench._push(srv, src, remote)
            for i, ckpt in enumerate(paths[args.history :]):
                side = "ab"[(i + i // 2) % 2]
                _commit(src, srv.env, ckpt, f"one more ({i + 1})")
                settle()
                began = time.perf_counter()
                subprocess.run(
                    ["git", "push", "-q", "origin", "main"],
                    cwd=src,
                    env={**srv.env, "PYTHONPATH": str(sides[side])},
                    check=True,
                )
                times[side].append(time.perf_counter() - began)
                print(f"push {i + 1}: {side} {times[side][-1]:.3f} s", flush=True)
        print(f"{label}, {args.store}, after {args.history} checkpoints:")
        ab.report(times, args.a, args.b)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
