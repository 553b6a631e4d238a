"""A selection run's recorded schedule, read back from its branches, to train it again exactly.

Configuration II of selection NAME is branch runs/NAME-cII; each of its
epoch-end checkpoint commits holds the configuration (values and seed) and
the partitions the epoch visited, in order (`Info.visits`). No torch here.
"""

from __future__ import annotations

from typing import Any

from git_mgit.gitcmd import Repo
from git_mgit.runtime.selection.driver import SelectionError
from git_mgit.runtime.training import layout, runs


def configuration_runs(repo: Repo, name: str) -> list[str]:
    """runs/NAME-c00, c01, ... as far as they go."""
    out = []
    while runs.tip(repo, f"{name}-c{len(out):02d}") is not None:
        out.append(f"{name}-c{len(out):02d}")
    return out


def schedule(
    repo: Repo, name: str, workers: int
) -> tuple[list[dict[str, Any]], dict[tuple[int, int], list[int]]]:
    """Each configuration's values, and (configuration, epoch) -> its recorded visit order."""
    names = configuration_runs(repo, name)
    if not names:
        raise SelectionError(f"no selection {name!r} (no branch {layout.branch(name + '-c00')})")
    values, orders = [], {}
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
    return values, orders


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
