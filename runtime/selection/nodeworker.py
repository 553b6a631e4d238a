"""A MOP worker on a cluster node: a Dask actor that owns one selection worker process.

The actor lives on the node Dask placed it on, as long as the driver holds
it. It unpacks the head's code (execution.node), starts
`python -m git_mgit.runtime.selection.worker --pipe SPEC` there, which reads
its data partition once, and then trains one unit per call of run(): the
configuration's hop state comes in as bytes with the task and goes back
with the result (Cerebro hops models through a shared file system; here
the driver's Dask connection carries them, so the nodes share nothing).
A worker process that dies makes run() raise; a node that dies makes the
driver's call fail. Either way the driver queues the unit again and starts
a new actor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from git_mgit.runtime.execution.node import node_home, unpack_code


class NodeWorker:
    def __init__(self, spec: dict, digest: str, code: bytes, start: bytes | None) -> None:
        home = node_home()
        root = unpack_code(home, digest, code)
        self.scratch = home / "select" / uuid.uuid4().hex
        self.scratch.mkdir(parents=True)
        self.start: str | None = None
        if start is not None:
            self.start = str(self.scratch / "start.safetensors")
            Path(self.start).write_bytes(start)
        with open(self.scratch / "worker.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "git_mgit.runtime.selection.worker", "--pipe",
                 json.dumps({**spec, "root": str(root)})],
                cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            )  # fmt: skip

    def run(self, task: dict, state: bytes | None) -> tuple[dict, bytes | None]:
        """Train one unit from `state` (None: the configuration's first); (result, new state)."""
        path = self.scratch / "state.safetensors"
        if state is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(state)
        here = {**task, "state": str(path), "start": self.start if task.get("start") else None}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(here) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker process died (exit {self.proc.wait()})")
        reply = json.loads(line)
        return reply, path.read_bytes() if "metrics" in reply else None

    def log(self) -> str:
        """The worker process's output so far (the user's prints, tracebacks)."""
        return (self.scratch / "worker.log").read_text(errors="replace")

    def close(self) -> int:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        return self.proc.wait(timeout=60)
