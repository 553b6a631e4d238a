"""Hindsight replay: re-run a recorded run's training code, as edited since, in parallel segments.

Flor's record-replay (paper 004, section 4): the checkpoints a run
committed at the end of its epochs let any epoch be re-run without the
ones before it. `git mgit replay RUN --jobs N` splits the epochs into N
contiguous segments; each worker restores the checkpoint committed at the
end of the epoch before its segment (the first starts the run afresh),
replays its epochs with the code in the working tree (typically the
recorded code plus new log statements), and records each epoch's metrics.
The driver then prints the workers' output in epoch order and compares
every epoch's metrics with the recorded ones: training is deterministic,
so any difference means the edit changed what was trained.

No torch here; workers are either the recorded `module:fn` under torchrun
(as `git mgit train` runs it) or the user's own command, both told their
segment through the environment (segment.ENV).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from git_mgit.gitcmd import Repo
from git_mgit.runtime.training import launch, layout, runs, threads
from git_mgit.runtime.training.layout import CheckpointError, Info, Position
from git_mgit.runtime.training.segment import ENV, Segment, read_record

_POLL = 0.2


@dataclass(frozen=True)
class Request:
    """The command line, as given."""

    run: str  # a run name, or any revision of a checkpoint commit
    command: list[str] = field(default_factory=list)  # empty: the recorded module:fn
    jobs: int | None = None
    first: int | None = None
    last: int | None = None


@dataclass(frozen=True)
class Recording:
    """A run's history as replay sees it: the checkpoint at the end of each epoch."""

    tip: str
    ends: dict[int, runs.Found]  # epoch -> its end-of-epoch checkpoint

    @property
    def info(self) -> Info:
        return self.ends[max(self.ends)].info


@dataclass
class Worker:
    segment: Segment
    log: Path
    process: subprocess.Popen | None = None
    began: float = 0.0
    seconds: float = 0.0

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode


@dataclass(frozen=True)
class EpochResult:
    epoch: int
    recorded: Info | None  # None: the recording has no end-of-epoch checkpoint for it
    replayed: tuple[Position, dict[str, float | str]] | None  # None: the worker never saved it

    @property
    def differences(self) -> list[str]:
        """What differs from the recording, as `name: recorded -> replayed` (empty: identical)."""
        if self.recorded is None or self.replayed is None:
            return []
        position, metrics = self.replayed
        out = []
        if position.global_step != self.recorded.position.global_step:
            out.append(
                f"global step: {self.recorded.position.global_step} -> {position.global_step}"
            )
        for name in sorted(self.recorded.metrics.keys() | metrics.keys()):
            was, now = self.recorded.metrics.get(name), metrics.get(name)
            if was != now:
                out.append(f"{name}: {_shown(was)} -> {_shown(now)}")
        return out


@dataclass
class Report:
    run: str
    recording: Recording
    workers: list[Worker]
    epochs: list[EpochResult]
    seconds: float

    @property
    def failed(self) -> list[Worker]:
        return [w for w in self.workers if w.returncode != 0]

    @property
    def diverged(self) -> list[EpochResult]:
        return [e for e in self.epochs if e.differences or e.replayed is None]


def _shown(v: float | str | None) -> str:
    if v is None:
        return "none"
    return repr(v) if isinstance(v, float) else v


def recording(repo: Repo, run: str) -> Recording:
    """The end-of-epoch checkpoints in the first-parent history of `run` (a name or a revision).

    A run resumed under a new name shares its first checkpoints with the run it
    branched from; they are its history too, so they count.
    """
    ref = f"refs/heads/{layout.branch(run)}"
    rev = ref if repo.git("rev-parse", "--verify", "--quiet", ref, check=False) else run
    tip = repo.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not tip:
        raise CheckpointError(f"{run!r} is neither a run (no {layout.branch(run)}) nor a commit")
    fmt = f"%H%x00%(trailers:key={layout.TRAILER_CHECKPOINT},valueonly)%x01"
    ends: dict[int, runs.Found] = {}
    for record in repo.git("log", "--first-parent", f"--format={fmt}", tip).split("\x01"):
        commit, _, trailer = record.strip("\n").partition("\0")
        if not commit:
            continue
        if not trailer.strip():
            break  # the code commit the run started from
        if "end_of_epoch=true" not in trailer:
            continue
        found = runs.find(repo, commit)
        ends.setdefault(found.info.position.epoch, found)  # the newest wins
    if not ends:
        raise CheckpointError(
            f"{run!r} has no end-of-epoch checkpoint commit to replay from "
            "(`git log runs/NAME` lists a run's checkpoints)"
        )
    return Recording(tip, ends)


def plan(rec: Recording, jobs: int, first: int | None, last: int | None) -> list[Segment]:
    """Contiguous segments of epochs first..last, as even as the recorded epoch ends allow.

    A segment may start at the run's beginning or right after a recorded
    epoch end; `Segment.record` is left empty for the caller to fill.
    """
    recorded = max(rec.ends)
    first = 0 if first is None else first
    last = recorded if last is None else last
    if not 0 <= first <= last:
        raise CheckpointError(f"no epochs in {first}..{last}")
    if last > recorded:
        raise CheckpointError(
            f"the recording ends with epoch {recorded}; --epochs cannot go past it"
        )
    if first > 0 and first - 1 not in rec.ends:
        raise CheckpointError(
            f"no checkpoint at the end of epoch {first - 1} to start epoch {first} from; "
            f"recorded epoch ends: {', '.join(map(str, sorted(rec.ends)))}"
        )
    starts = [first]
    candidates = sorted(e + 1 for e in rec.ends if first < e + 1 <= last)
    count = last - first + 1
    for k in range(1, jobs):
        target = first + k * count / jobs
        later = [c for c in candidates if c > starts[-1]]
        if later:
            starts.append(min(later, key=lambda c: (abs(c - target), c)))
    ends = [s - 1 for s in starts[1:]] + [last]
    return [
        Segment(rec.ends[s - 1].commit if s > 0 else None, s, e, "")
        for s, e in zip(starts, ends, strict=True)
    ]


def default_jobs(world_size: int, count: int | None = None) -> int:
    """Workers that fit the cores: each runs `world_size` processes of `count` threads."""
    return max(1, (os.cpu_count() or 1) // (max(world_size, 1) * (count or 1)))


def _threads(rec: Recording, seg: Segment, workers: int) -> int:
    """The threads the segment's epochs were trained with (the first epoch end it replays
    records them), or, for a recording from before they were recorded, the cores shared."""
    recorded = rec.ends[min(e for e in rec.ends if e >= seg.first)].info.threads
    return threads.for_recorded(recorded, workers * max(rec.info.world_size, 1))


def _worker_command(repo: Repo, rec: Recording, req: Request, seg: Segment) -> list[str]:
    """The user's command, or the recorded module:fn as `git mgit train` would start it."""
    if req.command:
        return list(req.command)
    info = rec.info
    if info.function is None:
        raise CheckpointError(
            f"run {info.run!r} was not started by `git mgit train` (it records no module:fn); "
            f"give its command: git mgit replay {req.run} -- python train.py"
        )
    assert repo.worktree is not None
    launch.check_function(info.function, Path(repo.worktree))
    options = launch.Options(fsdp=info.parallel == "fsdp", mode="off", threads=seg.threads)
    spec = launch.Spec(
        str(repo.worktree), info.function, info.run, seg.resume, None, info.start, options
    )
    started = launch.Request(info.function, info.args, nproc_per_node=info.world_size)
    return launch.command(spec, list(info.args), started)


def start(repo: Repo, rec: Recording, req: Request, workdir: Path) -> list[Worker]:
    """Plan the segments and start a worker for each; their output goes to workdir."""
    if repo.worktree is None:
        raise CheckpointError("git mgit replay runs in a working tree (it runs your code)")
    info = rec.info
    jobs = req.jobs if req.jobs is not None else default_jobs(info.world_size, info.threads)
    if jobs < 1:
        raise CheckpointError(f"--jobs must be at least 1, not {jobs}")
    segments = plan(rec, jobs, req.first, req.last)
    workers = []
    for i, seg in enumerate(segments):
        record = workdir / f"segment-{i}.jsonl"
        record.unlink(missing_ok=True)
        count = _threads(rec, seg, len(segments))  # what the recording's epochs were trained with
        seg = Segment(seg.resume, seg.first, seg.last, str(record), count)
        workers.append(Worker(seg, workdir / f"segment-{i}.log"))
    commands = [_worker_command(repo, rec, req, w.segment) for w in workers]  # check all first
    try:
        for w, cmd in zip(workers, commands, strict=True):
            with open(w.log, "wb") as log:
                w.began = time.monotonic()
                w.process = subprocess.Popen(
                    cmd,
                    cwd=repo.worktree,
                    env={**launch.environment(count=w.segment.threads), ENV: w.segment.to_env()},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped as a whole
                )
    except OSError as exc:
        stop(workers)
        raise CheckpointError(f"cannot start {commands[0][0]!r}: {exc.strerror}") from exc
    return workers


def wait(workers: list[Worker], progress: Callable[[int], None]) -> None:
    """Wait for every worker; `progress(epochs replayed so far)` as their records grow."""
    try:
        while True:
            running = 0
            for w in workers:
                assert w.process is not None
                if w.process.poll() is None:
                    running += 1
                elif not w.seconds:
                    w.seconds = time.monotonic() - w.began
            progress(sum(len(read_record(w.segment.record)) for w in workers))
            if not running:
                return
            time.sleep(_POLL)
    except BaseException:
        stop(workers)
        raise


def stop(workers: list[Worker]) -> None:
    """Stop every worker still running (its whole process group: torchrun and its ranks)."""
    for w in workers:
        if w.process is not None and w.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.process.pid, signal.SIGTERM)
            try:
                w.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(w.process.pid, signal.SIGKILL)
                w.process.wait()


def compare(rec: Recording, workers: list[Worker]) -> list[EpochResult]:
    replayed = {}
    for w in workers:
        for position, metrics in read_record(w.segment.record):
            replayed[position.epoch] = (position, metrics)
    out = []
    for w in workers:
        for epoch in range(w.segment.first, w.segment.last + 1):
            found = rec.ends.get(epoch)
            out.append(EpochResult(epoch, found.info if found else None, replayed.get(epoch)))
    return out


def replay(
    repo: Repo,
    req: Request,
    workdir: Path,
    started: Callable[[Recording, list[Worker]], None] = lambda rec, workers: None,
    progress: Callable[[int], None] = lambda n: None,
) -> Report:
    """Replay the run's epochs in parallel and compare them with the recording.

    `started(recording, workers)` once every worker runs; `progress(epochs
    replayed so far)` while they do. Worker output and records go to workdir.
    """
    rec = recording(repo, req.run)
    began = time.monotonic()
    workers = start(repo, rec, req, workdir)
    started(rec, workers)
    wait(workers, progress)
    return Report(req.run, rec, workers, compare(rec, workers), time.monotonic() - began)
