"""The checkpointer a training loop calls, and a thin loop helper built on it.

    ckpt = Checkpointer(model, optimizer, scheduler, run=committer, info=Info("demo", Position()))
    for epoch in ckpt.epochs(3):               # starts where a resumed checkpoint left off
        for x, y in ckpt.batches(loader):      # skips the batches it had done, sets the sampler's epoch
            ...; optimizer.step()
            ckpt.step({"loss": loss})          # one iteration done: checkpoint if due (every / adaptive)
        scheduler.step()
        ckpt.save({"loss": loss})              # the end of the epoch: always a checkpoint
    ckpt.close()                               # waits for background commits; raises their errors

Every rank calls the same methods at the same iterations (the decisions
are made so that they agree without extra communication). A checkpoint is
taken by every rank: it copies off the device only the bytes it writes
(plan.py: its own shards, its share of the replicated state) into an arena
allocated ahead (staging.py), and its writer stores them (committing.py);
rank 0 then writes the manifests and the commit. Modes: `off` (nothing is
saved: a replay, or a baseline), `sync` (the loop waits for each commit),
`background` (the loop waits for the copy off the device; the commit runs
in a thread, at most `max_pending` behind), `adaptive` (background, and
step() checkpoints by Flor's rule instead of every `every` iterations,
counting what a background commit slows the iterations beside it as part
of its cost: adaptive.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from git_mgit.config import DEFAULT_CHUNK_SIZE
from git_mgit.resources import cores
from git_mgit.runtime.training import distributed, holdings, rng, threads
from git_mgit.runtime.training import plan as planning
from git_mgit.runtime.training.adaptive import EPS, RESTORE_RATIO, AdaptivePeriod
from git_mgit.runtime.training.committing import Taken
from git_mgit.runtime.training.distributed import World
from git_mgit.runtime.training.layout import CheckpointError, Info, Position, metric_values
from git_mgit.runtime.training.resume import Restored, Resume, restore
from git_mgit.runtime.training.segment import Segment
from git_mgit.runtime.training.staging import Region, Stager, regions
from git_mgit.runtime.training.writers import (
    Abort,
    BackgroundWriter,
    Commit,
    SyncWriter,
    Writer,
)

MODES = ("off", "sync", "background", "adaptive")


class Checkpointer:
    """Checkpoints one model (with its optimizer and scheduler) as commits of one run."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any | None = None,
        *,
        info: Info,
        commit: Commit | None = None,
        world: World | None = None,
        mode: str = "background",
        every: int | None = None,
        max_pending: int = 1,
        eps: float = EPS,
        restore_ratio: float = RESTORE_RATIO,
        resume: Resume | None = None,
        replay: Segment | None = None,
        abort: Abort | None = None,
        shutdown: Callable[[], None] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        """`info` describes the run (its position is ignored); `commit` commits what this rank
        took of a checkpoint (a committing.RankCommitter on every rank; None with mode "off");
        `abort` is what a checkpoint after a failed one still does (the committer's abort);
        `shutdown` is called by close(), last (the committer's close: its encoder processes);
        `every`: step() checkpoints every that many iterations (not in adaptive mode; None:
        never); `chunk_size`: the repository's (the largest chunk a plan makes).

        With `resume`, the model, optimizer, scheduler and RNG states are restored
        here, so create the checkpointer after them and right before the loop.
        With `replay` (a `git mgit replay` worker), nothing is committed: epochs()
        stops after the segment and save() records the metrics for comparison.
        """
        if mode not in MODES:
            raise CheckpointError(
                f"unknown checkpoint mode {mode!r}; use one of {', '.join(MODES)}"
            )
        if every is not None and every < 1:
            raise CheckpointError(f"every must be a positive number of iterations, not {every}")
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.world = world or distributed.current()
        self.replay = replay
        self.mode, self.every = ("off" if replay else mode), every
        self.info = info
        self._shutdown = shutdown
        self.position = Position()
        self.metrics: Mapping[str, Any] = {}
        self.commits: list[Any] = []  # what `commit` returned, in order (rank 0)
        self.stalls: list[float] = []  # seconds the loop spent in each checkpoint
        self.committer = commit  # in a run, a RankCommitter: its `history` is what each stored
        self.commit_seconds: list[float] = []  # seconds this rank's writer took for each
        self.period = AdaptivePeriod(eps, restore_ratio)
        self._due = 1 if mode == "adaptive" else (every or 0)
        self._epoch_done = False
        self._epoch_len: int | None = None  # batches in the current epoch, when the loader says
        self._rng_epoch: tuple[dict, dict] | None = None
        self._restored: Restored | None = None
        self._skip = 0  # batches of the current epoch a resumed run has already done
        self._last = time.perf_counter()
        self._chunk_size = chunk_size
        self._plans: dict[str, tuple[planning.Plan, list[Region], int]] = {}
        self._stager = Stager(_on_gpu(model), max_pending if mode != "sync" else 1)
        self._writer: Writer | None = None
        self._cores_before: int | None = None
        self._prepared = False
        if self.mode != "off":
            if commit is None:
                raise CheckpointError(f"mode {mode!r} needs somewhere to commit")
            recorded = self._recorded(commit)
            if mode == "sync":
                self._writer = SyncWriter(recorded, self._stager.release)
            else:
                self._writer = BackgroundWriter(recorded, self._stager.release, max_pending, abort)
                self._cores_before = cores.limit(_spare_cores(model))
        self.resumed: Info | None = None
        if resume is not None:
            self._restored = restore(resume, model, optimizer, scheduler, self.world)
            self.resumed = resume.info
            self.position = _rescaled(resume.info, self.world.world_size)
            self.metrics = dict(resume.info.metrics)
            self._epoch_done = self.position.end_of_epoch
            self._skip = 0 if self._epoch_done else self.position.step
        if self._writer is not None:
            self._prepare(expected=True)

    def _recorded(self, commit: Commit) -> Commit:
        def run(taken: Taken) -> object:
            began = time.perf_counter()
            done = commit(taken)
            self.commit_seconds.append(time.perf_counter() - began)
            if done is not None:
                self.commits.append(done)
            return done

        return run

    def _plan(self, held: holdings.Held) -> tuple[planning.Plan, list[Region], int]:
        """The plan of a checkpoint of what `held` describes, and this rank's arena places
        (made once per layout: the layout changes only when the optimizer's state appears)."""
        key = held.digest()
        if key not in self._plans:
            made = planning.plan(
                held.entries,
                self.world.world_size,
                self.info.run,
                self.info.parallel,
                self._chunk_size,
            )
            self._plans[key] = (made, *regions(_ranges(made, held, self.world.rank)))
        return self._plans[key]

    def _prepare(self, expected: bool = False) -> None:
        """Allocate the arenas ahead, in the background. Before the optimizer's first step its
        state does not exist yet: `expected` sizes it from the optimizer's kind."""
        held = holdings.capture(self.model, self.optimizer, self.scheduler, self.world)
        _, _, size = self._plan(held)
        if expected and self.optimizer is not None and not self.optimizer.state:
            size = int(size * (1 + _state_per_parameter(self.optimizer))) + (1 << 20)
        self._stager.prepare(size)

    # -- the loop helpers ---------------------------------------------------------------------

    def epochs(self, count: int) -> Iterator[int]:
        """Epoch indices from where training stands (0, or after a resumed checkpoint) to count-1."""
        start, skip = self.position.resume_at()
        if self.replay is not None:
            count = min(count, self.replay.last + 1)
        for epoch in range(start, count):
            resuming = epoch == start and skip > 0
            self._skip = skip if resuming else 0
            self.position = dataclasses.replace(
                self.position, epoch=epoch, step=self._skip, end_of_epoch=False
            )
            self._epoch_done = False
            yield epoch

    def batches(self, loader: Iterable) -> Iterator:
        """The loader's batches for the current epoch, minus those a resumed run had done.

        Sets a DistributedSampler's epoch (the data order must be a function of
        seed and epoch for a resumed run to see the same batches), and keeps the
        generators' state at the moment the loader's iterator is made, so a run
        resumed mid-epoch remakes the same iterator (same worker seeds) before
        skipping to where it was.
        """
        self._advance()
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.position.epoch)
        self.position = dataclasses.replace(
            self.position,
            sampler_seed=getattr(sampler, "seed", None),
            sampler_epoch=getattr(sampler, "epoch", None),
        )
        restored, skip = self._restored, self._skip
        if skip and restored is not None and restored.rng_epoch is not None:
            rng.restore(*restored.rng_epoch)
        self._rng_epoch = rng.capture()
        it = iter(loader)
        for _ in range(skip):
            if next(it, None) is None:
                raise CheckpointError(f"the loader has fewer than {skip} batches to skip")
        if skip and restored is not None and restored.rng is not None:
            rng.restore(*restored.rng)
        self._skip, self._restored = 0, None
        self._epoch_len = _length(loader)
        self._last = time.perf_counter()
        yield from it
        self._epoch_done = True

    def _advance(self) -> None:
        """A loop without epochs(): the first batch or step after an epoch's end starts the next."""
        if self._epoch_done:
            pos = self.position
            self.position = dataclasses.replace(
                pos, epoch=pos.epoch + 1, step=0, end_of_epoch=False
            )
            self._epoch_done = False
            self._epoch_len = None

    # -- checkpoints ----------------------------------------------------------------------------

    def step(self, metrics: Mapping[str, Any] | None = None) -> bool:
        """One iteration is done (call it after optimizer.step()); checkpoint if one is due.

        `metrics` are kept as given (tensors stay on the device; they are read
        only when a checkpoint is taken). Returns whether it checkpointed.
        """
        now = time.perf_counter()
        overlapped = self._writer is not None and self._writer.ran_since(self._last)
        self.period.iteration(now - self._last, overlapped)
        self._last = now
        self._advance()
        pos = self.position
        self.position = dataclasses.replace(pos, step=pos.step + 1, global_step=pos.global_step + 1)
        if metrics is not None:
            self.metrics = metrics
        if not self._prepared and self._writer is not None:
            self._prepared = True  # the optimizer's state exists now: its exact size
            self._prepare()
        if self.mode == "off" or not self._due or self.period.n < self._due:
            return False
        if self.mode == "adaptive":
            # An arena still being made would stall the loop for its allocation, not the
            # copy (the first measure of M above all): decide again when it exists.
            busy = (self._writer is not None and self._writer.busy()) or not self._stager.ready()
            due = self.period.decide(busy) if self.world.writer else 0
            self._due = distributed.broadcast_int(due, self.world)
            if self._due > self.period.n:
                return False
        if self._ends_epoch():  # the save() that ends the epoch takes it, or else the next step()
            return False
        self._checkpoint(False)
        return True

    def _ends_epoch(self) -> bool:
        """Whether the iteration just done was the last batch of batches()' epoch."""
        return self._epoch_len is not None and self.position.step >= self._epoch_len

    def save(
        self,
        metrics: Mapping[str, Any] | None = None,
        *,
        epoch: int | None = None,
        step: int | None = None,
        end_of_epoch: bool | None = None,
    ) -> None:
        """Checkpoint now. By default the position is the one the loop helpers track, and
        the checkpoint counts as the end of the epoch once batches() ran out."""
        if metrics is not None:
            self.metrics = metrics
        changes: dict[str, Any] = {}
        if epoch is not None:
            changes["epoch"] = epoch
        if step is not None:
            changes["step"] = step
        if end_of_epoch is not None:
            self._epoch_done = end_of_epoch
        changes["end_of_epoch"] = self._epoch_done
        self.position = dataclasses.replace(self.position, **changes)
        if self.replay is not None:
            self.replay.check(self.position)
            if self.world.writer and self._epoch_done:
                self.replay.write(self.position, metric_values(self.metrics))
        if self._writer is not None:
            self._checkpoint(True)

    def _checkpoint(self, explicit: bool) -> None:
        """Take a checkpoint on every rank: copy this rank's share, hand it to its writer."""
        began = time.perf_counter()
        assert self._writer is not None
        self._writer.reserve()
        held = holdings.capture(self.model, self.optimizer, self.scheduler, self.world)
        made, places, size = self._plan(held)
        staged = self._stager.copy(held.tensors, places, size)
        info = dataclasses.replace(
            self.info, position=self.position, metrics=metric_values(self.metrics)
        )
        taken = Taken(
            info,
            made,
            staged,
            dict(held.rows),
            held.digest(),
            held.skeletons if self.world.writer else {},
            rng.capture(),
            self._rng_epoch,
        )
        self._writer.submit(taken, staged)
        took = time.perf_counter() - began
        self.stalls.append(took)
        self.period.checkpointed(took)
        self._last += took  # the loop's time in a checkpoint is not compute time
        if self.mode == "adaptive":  # the next decision, no sooner than the rule allows now
            due = self.period.next_due() if self.world.writer else 0
            self._due = distributed.broadcast_int(due, self.world)
        elif self.every and (not explicit or self.period.n >= self._due):
            # A save() that took a due checkpoint (see step()) restarts the count.
            self._due = self.period.n + self.every

    def wait(self) -> None:
        """Return when every checkpoint taken so far is committed (rank 0); raise a failure."""
        if self._writer is not None:
            self._writer.wait()

    def close(self) -> None:
        """Finish: wait for the background commits, raise any failure, then meet the other ranks."""
        try:
            if self._writer is not None:
                self._writer.close()
        finally:
            cores.limit(self._cores_before)
            if self._shutdown is not None:
                self._shutdown()
                self._shutdown = None
            self.world.barrier()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ranges(made: planning.Plan, held: holdings.Held, rank: int) -> list[tuple[str, int, int]]:
    """The byte ranges of this rank's local tensors that it stages: the chunks it writes, and
    its rows of the small entries that others assemble."""
    out = []
    for c in made.mine(rank):
        if c.entry not in made.assembled:
            base = held.rows[c.entry][0] * made.entries[c.entry].row_bytes
            out.append((c.entry, c.lo - base, c.hi - base))
    for name in made.assembled:
        if name in held.rows:
            start, stop = held.rows[name]
            out.append((name, 0, (stop - start) * made.entries[name].row_bytes))
    return out


def _state_per_parameter(optimizer: torch.optim.Optimizer) -> int:
    """How many tensors of a parameter's size the optimizer will keep per parameter."""
    defaults = optimizer.defaults
    if "betas" in defaults:  # Adam, AdamW, NAdam, RAdam, Adamax
        return 2 + int(bool(defaults.get("amsgrad")))
    return int(bool(defaults.get("momentum")))


def _on_gpu(model: torch.nn.Module) -> bool:
    return any(p.device.type == "cuda" for p in model.parameters())


def _rescaled(info: Info, world_size: int) -> Position:
    """Where a run resumed on another number of ranks stands: a mid-epoch checkpoint's step
    (batches per rank) becomes the batches per rank that cover the same share of the epoch."""
    pos = info.position
    if world_size == info.world_size or pos.end_of_epoch:
        return pos
    return dataclasses.replace(pos, step=pos.step * info.world_size // world_size)


def _spare_cores(model: torch.nn.Module) -> int:
    """The cores a background commit may use (threads.spare, for where the model trains)."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    return threads.spare(device.type)


def _length(loader: Iterable) -> int | None:
    """The loader's number of batches, or None (a generator, or an iterable dataset's loader)."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def fit(
    ckpt: Checkpointer,
    loader: Iterable,
    train_step: Callable[[Any], Mapping[str, Any]],
    epochs: int,
    end_of_epoch: Callable[[int], Mapping[str, Any] | None] | None = None,
) -> None:
    """The loop most training scripts write: `train_step(batch)` returns the step's metrics;
    `end_of_epoch(epoch)` (scheduler step, evaluation) may return metrics for the checkpoint
    that ends every epoch."""
    for epoch in ckpt.epochs(epochs):
        for batch in ckpt.batches(loader):
            ckpt.step(train_step(batch))
        extra = end_of_epoch(epoch) if end_of_epoch is not None else None
        ckpt.save({**ckpt.metrics, **(extra or {})})
