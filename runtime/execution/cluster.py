"""The cluster backend: runtime jobs as tasks on an existing Dask cluster.

Dask distributed is the engine (docs/runtime.md says why: among the engines
ML teams run, it is the one whose scheduler and workers all bind the address
they are given, loopback included). The head (this process) is a Dask
client. Each job becomes one task running node.run on some worker, with the
code, the job's manifests and the head's packs (shipping.py) as its inputs:
Dask sends each input to a node once and keeps it there while the head
holds it. The answer comes back as plain data (JSON values and the bytes of
output files), and the head does every commit, as with the local backend.

When a node dies, Dask runs its tasks again elsewhere (up to its
`allowed-failures`); only the first answer of a job reaches the caller, so
nothing is committed twice.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from git_mgit.errors import MgitError
from git_mgit.lineage.api import Lineage
from git_mgit.runtime.execution import node, shipping
from git_mgit.runtime.execution.base import Executor

if TYPE_CHECKING:
    from distributed import Client, Future

    from git_mgit.gitcmd import Repo

ADDRESS_VARIABLE = "DASK_SCHEDULER_ADDRESS"  # Dask's own: dask.config's scheduler-address
TIMEOUT = float(os.environ.get("GIT_MGIT_CLUSTER_TIMEOUT", "10"))
LOST_TRIES = 3  # a job whose inputs die with nodes more often than this fails


class ClusterUnreachable(MgitError):
    """No scheduler at the address, or no worker behind it."""


def connect(address: str | None) -> Client:
    """A client of the scheduler at `address`: tcp://HOST:PORT or a scheduler file; None or
    "" take DASK_SCHEDULER_ADDRESS."""
    try:
        from distributed import Client
    except ImportError as exc:
        raise MgitError(
            "--cluster runs on Dask, which is not installed: "
            "`pip install 'git-mgit[cluster]'` here and on every node"
        ) from exc
    address = address or os.environ.get(ADDRESS_VARIABLE)
    if not address:
        raise ClusterUnreachable(
            "--cluster needs the scheduler: give its address (--cluster tcp://HOST:8786) or "
            f"its scheduler file, or set {ADDRESS_VARIABLE}"
        )
    logging.getLogger("distributed").setLevel(logging.CRITICAL)  # its reconnect chatter
    where = {"scheduler_file": address} if Path(address).is_file() else {"address": address}
    try:
        client = Client(**where, timeout=TIMEOUT)  # the default: actors find it so
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterUnreachable(
            f"cannot reach the Dask scheduler at {address} ({_first_line(exc)}): start it "
            f"(`dask scheduler`), or fix --cluster / {ADDRESS_VARIABLE}"
        ) from exc
    try:
        client.wait_for_workers(1, timeout=TIMEOUT)
    except (OSError, TimeoutError) as exc:
        client.close()
        raise ClusterUnreachable(
            f"the Dask cluster at {address} has no workers: start some (`dask worker {address}`)"
        ) from exc
    return client


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def describe(exc: BaseException) -> str:
    """What went wrong on the cluster, in one line: the exception's type and first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Head:
    """This process as the cluster's client, with the repository's code kept on the cluster
    (every backend that runs the user's code on the nodes starts here)."""

    def __init__(self, repo: Repo, address: str | None) -> None:
        self.client = connect(address)
        try:
            code = shipping.code(repo)
        except BaseException:
            self.client.close()
            raise
        self.digest = code.digest
        self.code = Kept(self.client, lambda: code.data)


class Kept:
    """Data the head sends to the cluster once and the nodes read from there (the code, a
    version's pack); sent again, made anew by `make`, once no node holds it.

    Dask keeps scattered data on the nodes it put it on (its memory manager drops extra
    copies), and a task that needs it after they died is cancelled ("lost dependencies").
    So every use asks here, and here asks the scheduler, which learns of a lost node before
    this client does, whether some node still holds it.
    """

    def __init__(self, client: Client, make: Callable[[], object]) -> None:
        self.client, self.make = client, make
        self._future: Future | None = None

    def future(self) -> Future:
        f = self._future
        if f is None or f.status != "finished" or not self.client.who_has(f).get(f.key):
            # In a list: Dask scatters a dict's values one by one, under its keys.
            (self._future,) = self.client.scatter([self.make()], hash=False)
        return self._future


@dataclass
class Stats:
    """What the cluster did, for the closing line and the benchmark."""

    jobs: Counter = field(default_factory=Counter)  # node -> jobs answered
    remote: Counter = field(default_factory=Counter)  # node -> bytes fetched from the remote
    head: Counter = field(default_factory=Counter)  # node -> bytes of packs from the head
    prepare: float = 0.0  # seconds nodes spent unpacking code and fetching objects
    run: float = 0.0  # seconds nodes spent in worker processes
    given: dict[str, set[str]] = field(default_factory=dict)  # node -> versions its jobs named
    requeued: int = 0  # jobs sent again because what they needed died with a node

    def summary(self) -> str:
        from git_mgit.console.progress import format_size

        again = f"; {self.requeued} sent again after a node died" if self.requeued else ""
        return (
            f"{sum(self.jobs.values())} job(s) on {len(self.jobs)} node(s){again}; objects "
            f"fetched from the remote {format_size(sum(self.remote.values()))}, from here "
            f"{format_size(sum(self.head.values()))}"
        )


@dataclass
class _Job:
    handle: Any
    original: dict  # as the caller gave it (head paths, version ids)
    task: dict  # as a node gets it (manifests, shipped files)
    shipment: shipping.Shipment
    files: dict[str, bytes]
    tries: int = 0  # times its inputs died with nodes
    worker: str | None = None  # where it was asked to run

    @property
    def versions(self) -> set[str]:
        models = [self.original.get("model", {}), *self.original.get("parents", [])]
        return {m["version"] for m in models if "version" in m}


class ClusterPool(Executor):
    """Jobs as Dask tasks, at most `size` at once (default: every worker thread)."""

    def __init__(self, lin: Lineage, size: int | None, address: str | None) -> None:
        from distributed import as_completed

        self.head = Head(lin.repo, address)
        self.client = self.head.client
        try:
            self.size = max(1, size or sum(self.client.nthreads().values()))
            self.shipper = shipping.Shipper(lin)
        except BaseException:
            self.client.close()
            raise
        self._packs: dict[str, Kept] = {}
        self._running: dict[str, _Job] = {}  # by task key
        self._done = as_completed(loop=self.client.loop)
        self.stats = Stats()

    def idle(self) -> bool:
        return len(self._running) < self.size

    def submit(self, handle: Any, job: dict, tries: int = 0) -> None:
        shipment = shipping.Shipment()
        files: dict[str, bytes] = {}
        task = dict(job)
        if "model" in job:
            task["model"] = self._model(job["model"], shipment, files)
        if "parents" in job:
            task["parents"] = [self._model(p, shipment, files) for p in job["parents"]]
        self._start(_Job(handle, job, task, shipment, files, tries))

    def _model(self, spec: dict, shipment: shipping.Shipment, files: dict[str, bytes]) -> dict:
        out = {"architecture": spec.get("architecture")}
        if "version" in spec:
            return {**out, "manifests": self.shipper.model(spec["version"], shipment)}
        key = f"f{len(files)}"
        files[key] = Path(spec["file"]).read_bytes()
        return {**out, "shipped": key}

    def _start(self, j: _Job) -> None:
        packs = [self._pack(v) for v in j.shipment.packs]
        remote = None
        if j.shipment.remote:
            remote = {
                "url": self.shipper.remote_url,
                "versions": j.shipment.remote,
                "refs": j.shipment.refs,
            }
        j.worker = self._least_busy()
        future = self.client.submit(
            node.run, j.task, self.head.digest, self.head.code.future(), remote, packs, j.files,
            key=f"git-mgit-{j.task['kind']}-{uuid.uuid4().hex}", pure=False,
            workers=j.worker, allow_other_workers=True,
        )  # fmt: skip
        self._running[future.key] = j
        self._done.add(future)

    def _least_busy(self) -> str | None:
        """The worker with the fewest of our jobs per thread. Left to itself, Dask may put every
        job beside the inputs one node already holds (seen under load: 6 jobs, 1 of 2 nodes);
        the restriction is loose, so a job whose node dies runs on another."""
        threads = self.client.nthreads()
        if not threads:
            return None
        load = Counter(j.worker for j in self._running.values())
        return min(threads, key=lambda w: (load[w] / max(1, threads[w]), w))

    def _pack(self, vid: str) -> Future:
        if vid not in self._packs:
            self._packs[vid] = Kept(self.client, lambda: self.shipper.pack(vid))
        return self._packs[vid].future()

    def next_done(self) -> tuple[Any, dict]:
        while True:
            got = self._take(next(self._done))
            if got is not None:
                return got

    def ready(self) -> list[tuple[Any, dict]]:
        out = []
        while self._done.has_ready():
            got = self._take(next(self._done))
            if got is not None:
                out.append(got)
        return out

    def _take(self, future: Future) -> tuple[Any, dict] | None:
        """The caller's (handle, answer) for a finished task; None when the job went out again:
        with the head's packs (the remote lacked a version after all), or after what it needed
        died with the nodes holding it (sent again too)."""
        j = self._running.pop(future.key)
        if future.status == "cancelled" and j.tries < LOST_TRIES:
            self.stats.requeued += 1
            self.submit(j.handle, j.original, j.tries + 1)
            return None
        if future.status != "finished":
            why = describe(future.exception())
            return j.handle, {"ok": False, "error": f"the cluster failed the job ({why})"}
        answer = future.result()
        self._count(answer, j, answered=not answer.get("missing"))
        if answer.get("missing"):
            self.shipper.from_head.update(answer["missing"])
            self.submit(j.handle, j.original)
            return None
        outputs = answer.pop("outputs", None)
        if outputs:
            for name, data in outputs.items():
                Path(j.original["outputs"][name]).write_bytes(data)
        return j.handle, answer

    def _count(self, answer: dict, j: _Job, answered: bool) -> None:
        """Add what a node did; a job it sends back (its remote lacked a version) is not one
        it answered, though the bytes it fetched on the way count."""
        node = answer.get("node", "?")
        if answered:
            self.stats.jobs[node] += 1
            self.stats.given.setdefault(node, set()).update(j.versions)
        fetched = answer.get("fetched", {})
        self.stats.remote[node] += fetched.get("remote", 0)
        self.stats.head[node] += fetched.get("head", 0)
        seconds = answer.get("seconds", {})
        self.stats.prepare += seconds.get("prepare", 0.0)
        self.stats.run += seconds.get("run", 0.0)

    def close(self) -> None:
        try:
            self.shipper.close()
        finally:
            self.client.close()
        if self.stats.jobs:
            print(f"git-mgit: cluster: {self.stats.summary()}", file=sys.stderr)
