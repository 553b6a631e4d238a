"""One replay worker's share of a recorded run, as `git mgit replay` hands it to the training code.

The worker runs the user's (edited) training code unchanged; the only
channel is the environment variable `GIT_MGIT_REPLAY`, which `open_run`
(and so `ctx.checkpointer`) reads: the checkpointer then restores the
segment's starting checkpoint instead of what the code asked for, commits
nothing, stops `epochs()` after the segment's last epoch, and appends each
epoch's metrics to the segment's record for the driver to compare with the
recording. No torch here: the driver imports this too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from git_mgit.runtime.training.layout import CheckpointError, Position

ENV = "GIT_MGIT_REPLAY"


@dataclass(frozen=True)
class Segment:
    """Epochs `first`..`last` of a run, restored from `resume` (None: from the run's start)."""

    resume: str | None
    first: int
    last: int
    record: str  # a file rank 0 appends one JSON line to per replayed epoch
    threads: int | None = None  # the intra-op threads its epochs were trained with

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Segment | None:
        text = environ.get(ENV)
        if not text:
            return None
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"{ENV} is not a replay segment ({exc}); unset it") from exc

    def check(self, position: Position) -> None:
        """Refuse a loop that runs past the segment: its worker would redo another's epochs."""
        if position.epoch > self.last:
            raise CheckpointError(
                f"replay: the loop went on past epoch {self.last}, this worker's last; iterate "
                "`ckpt.epochs(n)` so that a replay worker stops at its segment's end"
            )

    def write(self, position: Position, metrics: Mapping[str, float | str]) -> None:
        line = {"position": asdict(position), "metrics": dict(metrics)}
        with open(self.record, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def read_record(path: str) -> list[tuple[Position, dict[str, float | str]]]:
    """What a worker's record holds: (position, metrics) per replayed epoch, in order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return [(Position(**line["position"]), line["metrics"]) for line in lines]
