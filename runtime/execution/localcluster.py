"""A Dask cluster on this machine: a scheduler and N worker nodes, all on loopback.

For trying `--cluster` without one, and for the tests and the benchmark:

    python -m git_mgit.runtime.execution.localcluster --nodes 2 /tmp/cluster
    # prints the scheduler's address; Ctrl-C stops it all

Every process binds 127.0.0.1 only (the scheduler, each worker, and their
HTTP servers), and each node runs in a folder of its own (its working and
local directory), never the repository's: as far as git-mgit can tell, the
nodes are separate machines that share nothing with the head but the
network. A node is one `dask worker --no-nanny` process in its own process
group, so kill() takes the whole node down at once, as a lost machine would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

DASK = [sys.executable, "-m", "dask"]  # the dask command of this Python
LOOPBACK = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]


@dataclass
class Node:
    folder: Path
    process: subprocess.Popen
    address: str = ""


@dataclass
class Cluster:
    address: str
    scheduler: subprocess.Popen
    folder: Path
    nodes: list[Node] = field(default_factory=list)

    env: dict[str, str] = field(default_factory=dict)  # the nodes' own environment, added

    def start_node(self, threads: int = 1) -> Node:
        folder = self.folder / f"node-{len(self.nodes)}"
        folder.mkdir()
        with open(folder / "worker.log", "wb") as log:  # the process has its own copy
            proc = subprocess.Popen(
                [*DASK, "worker", self.address, *LOOPBACK, "--nthreads", str(threads),
                 "--no-nanny", "--local-directory", str(folder), "--name", folder.name],
                cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **self.env},
            )  # fmt: skip
        node = Node(folder, proc)
        self.nodes.append(node)
        return node

    def wait(self, count: int, timeout: float = 60) -> None:
        """Until `count` workers are registered; each node learns its address."""
        from distributed import Client

        with Client(self.address, timeout=timeout, set_as_default=False) as client:
            client.wait_for_workers(count, timeout=timeout)
            by_name = {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}
        for node in self.nodes:
            node.address = by_name.get(node.folder.name, node.address)

    def cache(self, node: Node) -> Path:
        """The node's object cache (runtime/execution/node.py)."""
        return node.folder / "dask-scratch-space" / "git-mgit" / "objects.git"

    def node_of(self, pid: int) -> Node:
        """The node whose worker started process `pid` (a git-mgit worker process)."""
        stat = Path(f"/proc/{pid}/stat").read_text()
        ppid = int(stat.rpartition(")")[2].split()[1])
        return next(n for n in self.nodes if n.process.pid == ppid)

    def kill(self, node: Node) -> None:
        """The node goes down at once (SIGKILL to its process group), as a lost machine."""
        os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait()

    def stop(self) -> None:
        for proc in [n.process for n in self.nodes] + [self.scheduler]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@contextmanager
def cluster(
    folder: Path, nodes: int = 2, threads: int = 1, env: dict[str, str] | None = None
) -> Iterator[Cluster]:
    folder.mkdir(parents=True, exist_ok=True)
    info = folder / "scheduler.json"
    with open(folder / "scheduler.log", "wb") as log:  # the process has its own copy
        sched = subprocess.Popen(
            [*DASK, "scheduler", *LOOPBACK, "--port", "0", "--scheduler-file", str(info)],
            cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while not info.exists() or not info.read_text().strip():
        if sched.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((folder / "scheduler.log").read_text())
        time.sleep(0.05)
    c = Cluster(json.loads(info.read_text())["address"], sched, folder, env=env or {})
    try:
        for _ in range(nodes):
            c.start_node(threads)
        c.wait(nodes)
        yield c
    finally:
        c.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where the nodes' folders and logs go")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="worker threads per node")
    args = parser.parse_args(argv)
    with cluster(args.folder, args.nodes, args.threads) as c:
        print(c.address, flush=True)
        with suppress(KeyboardInterrupt):
            c.scheduler.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
