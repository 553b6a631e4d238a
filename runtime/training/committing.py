"""Every rank's part of committing a checkpoint, as the writer (thread) runs it.

1. wait for the staged copies;
2. small sharded entries (norms, biases: plan.SMALL) travel to the rank
   that assembles them, in one all-gather of a few KiB;
3. store this rank's chunks (objects.py: several threads, one anchor);
4. with a remote (several nodes), every rank publishes its anchor to the
   run's remote (`git push REMOTE refs/mgit/objects/<anchor>`), so a
   node's objects reach the run's store without passing through rank 0;
5. rank 0 gathers every rank's chunk hashes, anchor and generator states
   (a few KiB each), fetches the anchors of ranks whose repository is not
   its own, writes the headers, manifests and the commit (assemble.py,
   storage.RunCommitter), and pushes the commit onto the remote's run branch.

Steps 2 and 5 are collectives on a gloo group of their own (a thread
beside the loop cannot share the loop's group), run in the same order on
every rank. A rank that fails still takes part in them, so that no rank
waits forever; rank 0 then refuses to commit and names the rank.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from git_mgit import config, hashing
from git_mgit.gitcmd import Repo
from git_mgit.resources import cores
from git_mgit.runtime.training import distributed, layout, threads
from git_mgit.runtime.training.assemble import RngStates, assemble, write_blobs
from git_mgit.runtime.training.distributed import Group, World
from git_mgit.runtime.training.layout import CheckpointError, Info
from git_mgit.runtime.training.objects import Job, Key, ObjectWriter
from git_mgit.runtime.training.plan import Plan
from git_mgit.runtime.training.staging import Staged
from git_mgit.runtime.training.storage import Committed, RunCommitter

RngState = tuple[dict[str, Any], dict[str, torch.Tensor]]


@dataclass
class Taken:
    """One checkpoint as this rank took it: what the writer commits."""

    info: Info
    plan: Plan
    staged: Staged
    rows: dict[str, tuple[int, int]]  # entry -> the rows this rank's local tensor holds
    digest: str  # the layout's fingerprint (every rank's must agree)
    skeletons: dict[str, Any] = field(default_factory=dict)
    rng: RngState | None = None
    rng_epoch: RngState | None = None

    def _local(self, entry: str, lo: int, hi: int) -> tuple[int, int]:
        """Bytes [lo, hi) of the full entry as bytes of this rank's local rows."""
        base = self.rows[entry][0] * self.plan.entries[entry].row_bytes
        return lo - base, hi - base

    def entry_bytes(self, entry: str, lo: int, hi: int) -> memoryview:
        """Bytes [lo, hi) of the full entry, from this rank's staged rows."""
        return self.staged.view(entry, *self._local(entry, lo, hi))

    def entry_job(self, key: Key, entry: str, lo: int, hi: int) -> Job:
        """The job of storing bytes [lo, hi) of the full entry (from the shared arena)."""
        local = self._local(entry, lo, hi)
        place = self.staged.place(entry, *local)
        return Job(key, self.staged.view(entry, *local), self.plan.entries[entry].dtype, place)


@dataclass
class Stats:
    """What this rank's last commit moved, and how fast."""

    raw: int = 0
    new_raw: int = 0
    stored: int = 0
    objects: int = 0
    deltas: int = 0
    seconds: float = 0.0
    threads: int = 0
    encoder_cpu_s: float = 0.0
    encoder_memory: int = 0  # the encoders' private memory at their peaks, summed
    # seconds from the commit's start until: the staged copies were ready, small entries
    # exchanged, every chunk encoded, every encoder's pack finished, this rank's anchor
    # written (and published), every rank's part gathered, and (rank 0) the commit made
    phases: dict[str, float] = field(default_factory=dict)


def make(world: World, repo: Repo, run: RunCommitter | None, remote: str | None) -> RankCommitter:
    """This rank's committer, writing into `repo` (a collective: every rank calls it).

    Rank 0 passes its RunCommitter; the others learn from it where the start
    model's chunks are (the first checkpoint's delta bases). `remote` is used
    only when some rank's repository is not rank 0's (another node's clone).
    """
    group = distributed.cpu_group(world)
    ids = [b.decode() for b in distributed.all_gather_bytes(repo_identity(repo).encode(), world)]
    same = [i.split(" ")[0] == ids[0].split(" ")[0] for i in ids]
    apart = [r for r, s in enumerate(same) if not s]
    if apart and remote is None:
        raise CheckpointError(
            f"rank {apart[0]} writes into {ids[apart[0]]}, not rank 0's repository {ids[0]}: "
            "name a remote every node's clone has (--remote NAME) for the nodes to publish to"
        )
    start = None
    if world.writer:
        known = run.start_chunks() if run is not None else {}
        start = json.dumps([[n, i, size, hashing.to_text(h)] for (n, i, size), h in known.items()])
    table = json.loads(distributed.broadcast_bytes(start.encode() if start else None, world))
    chunks = {(n, i, length): hashing.from_text(h) for n, i, length, h in table}
    objects = ObjectWriter(repo, config.load(repo), chunks, threads.spare(world.device.type))
    publish = remote if apart else None  # one repository for every rank: nothing to move
    return RankCommitter(world, group, repo, objects, run, same[world.rank], publish)


def repo_identity(repo: Repo) -> str:
    """Which repository a rank writes into: the same for ranks that share one, also through a
    shared filesystem (a random name kept in .git/mgit/, made by whichever rank comes first)."""
    path = repo.mgit_dir / "identity"
    try:
        with open(path, "x", encoding="ascii") as f:
            f.write(uuid.uuid4().hex)
    except FileExistsError:
        pass
    for _ in range(100):  # another rank may be between creating and writing it
        text = path.read_text(encoding="ascii").strip()
        if text:
            return f"{text} ({socket.gethostname()}:{repo.git_dir})"
        time.sleep(0.01)
    raise CheckpointError(f"{path} is empty: remove it and start again")


class RankCommitter:
    """Commits this rank's share of each checkpoint (rank 0: and the commit itself)."""

    def __init__(
        self,
        world: World,
        group: Group | None,
        repo: Repo,
        objects: ObjectWriter,
        run: RunCommitter | None,
        shares_repo: bool,
        remote: str | None,
    ) -> None:
        """`run`: rank 0's committer (None elsewhere); `shares_repo`: whether this rank writes
        into rank 0's repository; `remote`: the run's remote, where every rank publishes its
        objects (rank 0 fetches those of the ranks with other repositories) and rank 0 its
        commits; None on one node."""
        self.world, self.group, self.repo = world, group, repo
        self.objects, self.run, self.remote = objects, run, remote
        self.shares_repo = shares_repo
        self.stats = Stats()
        self.history: list[Stats] = []  # every checkpoint's, in order

    def __call__(self, taken: Taken) -> Committed | None:
        failure: BaseException | None = None
        began = time.perf_counter()
        phases: dict[str, float] = {}

        def reached(phase: str) -> None:
            phases[phase] = time.perf_counter() - began

        mine: dict[Key, bytes] = {}
        anchor = None
        try:
            taken.staged.ready()
        except BaseException as exc:  # still take part in the collectives below
            failure = exc
        reached("staged")
        assembled = self._exchange(taken, failure is None)
        if failure is None:
            try:
                count = cores.available()
                reached("exchanged")
                written = self.objects.write(self._jobs(taken, assembled), count)
                mine, anchor = written.hashes, written.anchor
                if anchor is not None and self.remote is not None:
                    self._publish(anchor)
                reached("anchored")
                phases["encoded"] = phases["exchanged"] + written.encode_s
                phases["finished"] = phases["exchanged"] + written.finish_s
                self.stats = Stats(
                    raw=written.raw,
                    new_raw=written.new_raw,
                    stored=written.stored,
                    objects=written.objects,
                    deltas=written.deltas,
                    seconds=time.perf_counter() - began,
                    threads=count,
                    encoder_cpu_s=written.cpu_s,
                    encoder_memory=written.peak_anon,
                    phases=phases,
                )
                self.history.append(self.stats)
            except BaseException as exc:
                failure = exc
        parts = self._gather(taken, mine, anchor, failure)
        reached("gathered")
        if failure is not None:
            raise failure
        if not self.world.writer:
            return None
        committed = self._commit(taken, parts)
        reached("committed")
        return committed

    def close(self) -> None:
        """Stop this rank's encoder processes (the committer is not used after)."""
        self.objects.close()

    def abort(self, taken: Taken) -> None:
        """Take part in a checkpoint's collectives without storing anything: an earlier one
        failed, so every rank must fail this one too rather than wait for this rank."""
        self._exchange(taken, False)
        self._gather(taken, {}, None, CheckpointError("an earlier checkpoint failed"))

    def _gather(
        self,
        taken: Taken,
        mine: Mapping[Key, bytes],
        anchor: str | None,
        failure: BaseException | None,
    ) -> list[tuple[dict[str, Any], dict[str, torch.Tensor]]]:
        """Every rank's part on every rank; a failure anywhere fails the checkpoint everywhere."""
        payload = _payload(taken, mine, anchor, self.shares_repo, failure)
        parts = []
        for data in distributed.all_gather_bytes(payload, self.world, self.group):
            tensors, meta = distributed.unpack(data)
            parts.append((json.loads(meta["part"]), tensors))
        if failure is None:
            for rank, (part, _) in enumerate(parts):
                if part["error"]:
                    raise CheckpointError(f"rank {rank} could not store its share: {part['error']}")
        return parts

    def _exchange(self, taken: Taken, ok: bool) -> dict[str, memoryview]:
        """The small sharded entries this rank assembles, whole (a collective when there are any)."""
        plan = taken.plan
        if not plan.assembled:
            return {}
        mine: dict[str, torch.Tensor] = {}
        if ok:
            for name in plan.assembled:
                if name in taken.rows and _sends(plan, name, self.world.rank, taken.rows[name]):
                    e = plan.entries[name]
                    start, stop = taken.rows[name]
                    data = taken.entry_bytes(name, start * e.row_bytes, stop * e.row_bytes)
                    mine[f"{name}@{start}"] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        every = distributed.all_gather_bytes(distributed.pack(mine), self.world, self.group)
        out: dict[str, bytearray] = {}
        for name, owner in plan.assembled.items():
            if owner == self.world.rank:
                out[name] = bytearray(plan.entries[name].nbytes)
        for data in every:
            pieces, _ = distributed.unpack(data)
            for key, t in pieces.items():
                name, _, start = key.rpartition("@")
                if name in out:
                    at = int(start) * plan.entries[name].row_bytes
                    out[name][at : at + t.numel()] = t.numpy().tobytes()
        return {n: memoryview(b) for n, b in out.items()}

    def _jobs(self, taken: Taken, assembled: Mapping[str, memoryview]) -> list[Job]:
        jobs = []
        for c in taken.plan.mine(self.world.rank):
            key = (c.file, c.tensor, c.index)
            if c.entry in assembled:
                data = assembled[c.entry][c.lo : c.hi]
                jobs.append(Job(key, data, taken.plan.entries[c.entry].dtype))
            else:
                jobs.append(taken.entry_job(key, c.entry, c.lo, c.hi))
        return jobs

    def _publish(self, anchor: str) -> None:
        ref = f"refs/mgit/objects/{anchor}"
        self.repo.git("push", "--quiet", "--no-verify", self.remote, f"{ref}:{ref}")

    def _commit(
        self, taken: Taken, parts: list[tuple[dict[str, Any], dict[str, torch.Tensor]]]
    ) -> Committed:
        """Rank 0: check every rank's part, fetch what others published, commit."""
        assert self.run is not None
        hashes: dict[Key, bytes] = {}
        rng: RngStates = []
        rng_epoch: RngStates = []
        fetch = []
        for rank, (part, tensors) in enumerate(parts):
            if part["digest"] != taken.digest:
                raise CheckpointError(
                    f"rank {rank} holds other tensors than rank 0 (a pipeline stage?); every rank "
                    "must hold a part of every tensor of the model and optimizer to checkpoint"
                )
            for file, tensor, index, h in part["hashes"]:
                hashes[(file, tensor, index)] = hashing.from_text(h)
            if part["anchor"] and not part["shared"]:
                fetch.append(part["anchor"])
            for key, out in (("rng", rng), ("rng-epoch", rng_epoch)):
                if key in part:
                    prefix = f"{key}/"
                    own = {n[len(prefix) :]: t for n, t in tensors.items() if n.startswith(prefix)}
                    out.append((part[key], own))
        if fetch:
            self._fetch(fetch)
        files = assemble(
            taken.plan,
            hashes,
            taken.info,
            taken.skeletons,
            rng,
            rng_epoch or None,
            self.objects,
            cores.available(),
        )
        committed = self.run.commit_blobs(taken.info, write_blobs(self.repo, files))
        if self.remote is not None:
            self._push(committed.commit, files.anchor)
        return committed

    def _fetch(self, anchors: list[str]) -> None:
        if self.remote is None:
            raise CheckpointError(
                "ranks on other nodes wrote into their own clones: name the remote they publish "
                "to (--remote NAME), one every node's clone has"
            )
        refs = [f"refs/mgit/objects/{a}:refs/mgit/objects/{a}" for a in anchors]
        self.repo.git("fetch", "--quiet", "--no-tags", self.remote, *refs)
        self.objects.store.invalidate()

    def _push(self, commit: str, anchor: str | None) -> None:
        """Rank 0: the checkpoint commit onto the remote's run branch, with the objects of its
        headers and generators (any node resumes from the remote)."""
        assert self.run is not None and self.remote is not None
        refs = [f"{commit}:refs/heads/{layout.branch(self.run.branch)}"]
        if anchor is not None:
            refs.append(f"refs/mgit/objects/{anchor}:refs/mgit/objects/{anchor}")
        self.repo.git("push", "--quiet", "--no-verify", self.remote, *refs)


def _sends(plan: Plan, name: str, rank: int, rows: tuple[int, int]) -> bool:
    """Whether this rank sends its rows of an assembled entry (the first holder of its block)."""
    holders = [h.rank for h in plan.entries[name].holdings if (h.start, h.stop) == rows]
    return min(holders) == rank


def _payload(
    taken: Taken,
    hashes: Mapping[Key, bytes],
    anchor: str | None,
    shared: bool,
    failure: BaseException | None,
) -> bytes:
    """What this rank tells rank 0: its hashes and anchor, its generators, or its failure."""
    part: dict[str, Any] = {
        "hashes": [[f, t, i, hashing.to_text(h)] for (f, t, i), h in sorted(hashes.items())],
        "anchor": anchor,
        "shared": shared,
        "digest": taken.digest,
        "error": f"{type(failure).__name__}: {failure}" if failure is not None else None,
    }
    tensors: dict[str, torch.Tensor] = {}
    for key, state in (("rng", taken.rng), ("rng-epoch", taken.rng_epoch)):
        if state is not None:
            part[key] = state[0]
            tensors.update({f"{key}/{n}": t for n, t in state[1].items()})
    return distributed.pack(tensors, {"part": json.dumps(part)})
