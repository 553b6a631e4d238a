"""A Dask cluster on this machine: a scheduler and N worker nodes, all on loopback.

For trying `--cluster` without one, and for the tests and the benchmark:

    python -m git_mgit.runtime.execution.localcluster --nodes 2 /tmp/cluster
    # prints the scheduler's address; Ctrl-C, SIGTERM or SIGHUP stops it all

Every process binds 127.0.0.1 only (the scheduler, each worker, and their
HTTP servers), and each node runs in a folder of its own (its working and
local directory), never the repository's: as far as git-mgit can tell, the
nodes are separate machines that share nothing with the head but the
network. A node is one `dask worker --no-nanny` process in its own process
group, so kill() takes the whole node down at once, as a lost machine would.
Being in groups of their own, the processes never see the terminal's
signals: the launcher turns each stop signal into Stopped and stops them.
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
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, a kill, a closed terminal


class Stopped(Exception):
    """A stop signal reached the launcher: its cluster is to be stopped."""


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
    c = Cluster("", sched, folder, env=env or {})
    try:  # from here on, whatever happens stops every process started
        c.address = _address(info, sched)
        for _ in range(nodes):
            c.start_node(threads)
        c.wait(nodes)
        yield c
    finally:
        c.stop()


def _address(info: Path, sched: subprocess.Popen) -> str:
    """The scheduler's address, once its scheduler file says it."""
    deadline = time.monotonic() + 60
    while not info.exists() or not info.read_text().strip():
        if sched.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((info.parent / "scheduler.log").read_text())
        time.sleep(0.05)
    return json.loads(info.read_text())["address"]


def _stop_on_signals() -> None:
    """Each stop signal raises Stopped, once: later ones are ignored while the cluster stops,
    so a second SIGTERM cannot cut the stopping short and leave processes behind."""

    def stop(signum: int, _frame: object) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signal.Signals(signum).name)

    for s in STOP_SIGNALS:
        signal.signal(s, stop)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where the nodes' folders and logs go")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="worker threads per node")
    args = parser.parse_args(argv)
    _stop_on_signals()
    with suppress(Stopped), cluster(args.folder, args.nodes, args.threads) as c:
        print(c.address, flush=True)
        c.scheduler.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
