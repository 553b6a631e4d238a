"""How the selection driver reaches its workers: processes here, or actors on a Dask cluster.

Both give the driver the same five calls: start a worker (a new
generation), send it a unit's task (None: stop), its reply once there, why
it died (None while it lives), and stop. The driver keeps every
configuration's hop state in its own scratch folder either way:

- `Processes` (the default): worker processes on this machine, tasks and
  replies through a c10d TCPStore (selection/worker.py), hop files read and
  written in place;
- `Nodes` (`--cluster`): one Dask actor per worker on any node
  (nodeworker.py); a task carries its configuration's hop file as bytes and
  the reply brings the new one, which is written back here. Dask places the
  workers round-robin over the nodes and, after a death, on the node with
  the fewest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from git_mgit.runtime.execution.cluster import describe
from git_mgit.runtime.selection import worker

if TYPE_CHECKING:
    from git_mgit.gitcmd import Repo

WORKER = "git_mgit.runtime.selection.worker"


@dataclass
class Spec:
    """What every worker of a selection is started with (the driver's part)."""

    partitions: int
    threads: int
    functions: dict[str, str]
    start: str | None  # a safetensors file of starting weights, here

    def for_worker(self, index: int, generation: int, partition: int) -> dict[str, Any]:
        return {
            "worker": index,
            "generation": generation,
            "partition": partition,
            "partitions": self.partitions,
            "threads": self.threads,
            "functions": self.functions,
        }


class Processes:
    """Worker processes on this machine, tasks and replies on the driver's TCPStore."""

    def __init__(self, root: Path, spec: Spec) -> None:
        import torch.distributed as dist

        self.root, self.spec = root, spec
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        self._procs: dict[int, tuple[subprocess.Popen, int]] = {}  # worker -> (process, generation)
        self._sent: dict[int, int] = {}

    def start(self, index: int, generation: int, partition: int, log: Path) -> None:
        spec = self.spec.for_worker(index, generation, partition)
        spec |= {"host": "127.0.0.1", "port": self.store.port, "root": str(self.root)}
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", WORKER, json.dumps(spec)],
                cwd=self.root, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self._procs[index] = (proc, generation)
        self._sent[index] = 0

    def send(self, index: int, task: dict[str, Any] | None) -> None:
        _, gen = self._procs[index]
        self.store.set(worker.key("task", index, gen, self._sent[index]), json.dumps(task))
        self._sent[index] += 1

    def reply(self, index: int) -> dict[str, Any] | None:
        _, gen = self._procs[index]
        done = worker.key("done", index, gen, self._sent[index] - 1)
        if not self.store.check([done]):
            return None
        return json.loads(self.store.get(done))

    def died(self, index: int) -> str | None:
        code = self._procs[index][0].poll()
        return None if code is None else f"exit {code}"

    def finish(self, index: int) -> None:
        self._procs[index][0].wait(timeout=60)

    def close(self) -> None:
        for proc, _ in self._procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@dataclass
class _Remote:
    actor: Any  # the Future of the NodeWorker actor
    call: Any = None  # the ActorFuture of the unit it is on
    state: Path | None = None  # where the unit's new hop state goes, here
    error: str | None = None  # why it died


class Nodes:
    """Workers as Dask actors on a cluster's nodes; hop states travel with tasks and replies."""

    def __init__(self, repo: Repo, spec: Spec, address: str | None) -> None:
        from git_mgit.runtime.execution.cluster import Head, Kept

        self.spec = spec
        self.head = Head(repo, address)
        self.client = self.head.client
        self._start = None
        if spec.start is not None:
            self._start = Kept(self.client, Path(spec.start).read_bytes)
        self._remote: dict[int, _Remote] = {}
        self._where: dict[int, tuple[str, int]] = {}  # worker -> (its node, its partition)

    def _node_for(self, index: int, partition: int) -> str:
        """A live node not yet holding this partition, holding the fewest of this run's
        workers (first in order on a tie): round-robin at the start, replicas of a
        partition on different nodes, the emptiest node after a death."""
        nodes = sorted(self.client.nthreads())
        others = [(n, p) for i, (n, p) in self._where.items() if i != index and n in nodes]
        held = Counter(n for n, _ in others)
        same = {n for n, p in others if p == partition}
        node = min(nodes, key=lambda n: (n in same, held[n], n))
        self._where[index] = (node, partition)
        return node

    def start(self, index: int, generation: int, partition: int, log: Path) -> None:
        from git_mgit.runtime.selection.nodeworker import NodeWorker

        spec = self.spec.for_worker(index, generation, partition)
        actor = self.client.submit(
            NodeWorker, spec, self.head.digest, self.head.code.future(),
            self._start.future() if self._start else None,
            actor=True, workers=[self._node_for(index, partition)], allow_other_workers=True,
            key=f"git-mgit-select-w{index}-g{generation}-{os.urandom(4).hex()}", pure=False,
        )  # fmt: skip
        self._remote[index] = _Remote(actor)

    def send(self, index: int, task: dict[str, Any] | None) -> None:
        r = self._remote[index]
        try:
            proxy = r.actor.result()
            if task is None:
                r.call = proxy.close()
                return
            r.state = Path(task["state"])
            state = r.state.read_bytes() if r.state.exists() else None
            r.call = proxy.run(task, state)
        except Exception as exc:  # the node is gone (or never came): a death
            r.error = describe(exc)

    def reply(self, index: int) -> dict[str, Any] | None:
        r = self._remote[index]
        if r.error is not None or r.call is None or not r.call.done():
            return None
        try:
            reply, state = r.call.result()
        except Exception as exc:
            r.error = describe(exc)
            return None
        r.call = None
        if state is not None and r.state is not None:
            tmp = r.state.with_name(f".{r.state.name}.{os.getpid()}")
            tmp.write_bytes(state)
            os.replace(tmp, r.state)  # atomically, as a worker here replaces it
        return reply

    def died(self, index: int) -> str | None:
        r = self._remote[index]
        if r.error is None and r.actor.status == "error":
            r.error = describe(r.actor.exception())
        return r.error

    def finish(self, index: int) -> None:
        r = self._remote[index]
        if r.call is not None:
            r.call.result(timeout=60)

    def close(self) -> None:
        self._remote.clear()
        self.client.close()
