"""A selection run's recorded schedule, read back from its branches, to train it again exactly.

Configuration II of selection NAME is branch runs/NAME-cII; each of its
epoch-end checkpoint commits holds the configuration (values and seed) and
the partitions the epoch visited, in order (`Info.visits`), and its lineage
node hyperband's bracket, rung and stop. A configuration hyperband stopped
has fewer epochs: it trains in those it has an order for. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from git_mgit.gitcmd import Repo
from git_mgit.lineage.api import Lineage
from git_mgit.runtime.selection.driver import SelectionError
from git_mgit.runtime.training import layout, runs

MARKS = ("bracket", "rung", "stopped")  # hyperband's, in a commit's lineage schedule


@dataclass(frozen=True)
class Recorded:
    values: list[dict[str, Any]]  # each configuration's, seed included
    orders: dict[tuple[int, int], list[int]]  # (configuration, epoch) -> visit order
    marks: dict[tuple[int, int], dict[str, Any]]  # (configuration, epoch) -> hyperband's
    threads: int | None = None  # the intra-op threads per worker (None: not recorded)

    @property
    def epochs(self) -> int:
        return 1 + max(e for _, e in self.orders)


def configuration_runs(repo: Repo, name: str) -> list[str]:
    """runs/NAME-c00, c01, ... as far as they go."""
    out = []
    while runs.tip(repo, f"{name}-c{len(out):02d}") is not None:
        out.append(f"{name}-c{len(out):02d}")
    return out


def schedule(repo: Repo, name: str, workers: int) -> Recorded:
    """Each configuration's values, visit order per epoch it trained, and hyperband's marks."""
    names = configuration_runs(repo, name)
    if not names:
        raise SelectionError(f"no selection {name!r} (no branch {layout.branch(name + '-c00')})")
    lineage = Lineage(repo)
    values, orders, marks, counts = [], {}, {}, set()
    for i, run in enumerate(names):
        found = [runs.find(repo, c) for c in _checkpoints(repo, run)]
        ends = [f for f in found if f.info.position.end_of_epoch and f.info.visits is not None]
        if not ends:
            raise SelectionError(f"{layout.branch(run)} records no visit order to replay")
        values.append(dict(ends[-1].info.config))
        for f in ends:
            if len(f.info.visits or []) != workers:
                raise SelectionError(
                    f"{name} ran with {len(f.info.visits or [])} workers; replay it with "
                    f"--workers {len(f.info.visits or [])}"
                )
            orders[(i, f.info.position.epoch)] = list(f.info.visits or [])
            counts.add(f.info.threads)
            node = lineage.graph.nodes.get(f.model)
            details = node.details.get("schedule", {}) if node else {}
            marks[(i, f.info.position.epoch)] = {k: details[k] for k in MARKS if k in details}
    return Recorded(values, orders, marks, max(counts - {None}, default=None))


def _checkpoints(repo: Repo, run: str) -> list[str]:
    """The run's checkpoint commits, oldest first."""
    fmt = f"%H%x00%(trailers:key={layout.TRAILER_RUN},valueonly)"
    out = []
    for line in repo.git(
        "log", "--first-parent", f"--format={fmt}", layout.branch(run)
    ).splitlines():
        commit, _, named = line.partition("\0")
        if named.strip() == run:
            out.append(commit)
    return out[::-1]
