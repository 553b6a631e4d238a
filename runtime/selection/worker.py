"""One MOP worker process: `python -m git_mgit.runtime.selection.worker [--pipe] SPEC`.

It reads its data partition once (the user's `data(partition, partitions)`),
then trains whatever units the driver posts to it on the driver's c10d
TCPStore (torch.distributed's key-value store; MOP needs no collectives):
`task/W/G/N` holds the N-th task of worker W's generation G (a restarted
worker is a new generation), `done/W/G/N` its result. A failing user
function is a result too (an error the driver stops the run with); only a
process that dies is re-queued. A worker whose driver is gone exits.

With `--pipe` (a worker on a cluster node, started by channels.NodeWorker)
the tasks come on stdin and the results go to stdout, one JSON line each.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from git_mgit.runtime import callables
from git_mgit.runtime.selection import unit
from git_mgit.runtime.worker import answer_stream

_POLL = 0.005


def key(kind: str, worker: int, generation: int, n: int) -> str:
    return f"{kind}/{worker}/{generation}/{n}"


def _setup(spec: dict) -> tuple[dict, object]:
    """The user's functions and this worker's data partition."""
    torch.set_num_threads(spec["threads"])
    root = Path(spec["root"])
    fns = {name: callables.load(ref, root) for name, ref in spec["functions"].items()}
    return fns, fns["data"](spec["partition"], spec["partitions"])


def _unit(task: dict, fns: dict, data: object) -> dict:
    """Train one unit: its metrics, or the user's error (a result, not a death)."""
    try:
        return {"metrics": unit.run(unit.Task(**task), fns, data)}
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return {
            "error": f"{type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})"
        }


def pipe(spec: dict) -> int:
    """Tasks on stdin, results on stdout; the user's prints go to stderr."""
    answers = answer_stream()
    fns, data = _setup(spec)
    for line in sys.stdin:
        task = json.loads(line)
        if task is None:
            return 0
        answers.write(json.dumps(_unit(task, fns, data)) + "\n")
    return 0


def main(spec: dict) -> int:
    worker, generation, driver = spec["worker"], spec["generation"], os.getppid()
    store = dist.TCPStore(
        spec["host"], spec["port"], is_master=False, timeout=timedelta(seconds=60)
    )
    fns, data = _setup(spec)
    store.set(key("ready", worker, generation, 0), str(os.getpid()))
    n = 0
    while True:
        task_key = key("task", worker, generation, n)
        while not store.check([task_key]):
            if os.getppid() != driver:
                return 1  # the driver died: nobody will read a result
            time.sleep(_POLL)
        task = json.loads(store.get(task_key))
        if task is None:
            return 0
        store.set(key("done", worker, generation, n), json.dumps(_unit(task, fns, data)))
        n += 1


if __name__ == "__main__":
    if sys.argv[1] == "--pipe":
        sys.exit(pipe(json.loads(sys.argv[2])))
    sys.exit(main(json.loads(sys.argv[1])))
