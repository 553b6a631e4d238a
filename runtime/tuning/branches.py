"""Training branches in one process: fork, switch, time-share (paper 001, sections 5.2.2, 5.3.6).

MLtuner runs its trial branches inside the training system that trains the
model, one at a time: forking a branch copies the parent's state in memory,
switching loads a branch's state into the live objects. Here a branch that
is not live keeps its state as a `Snapshot` (model, optimizer and the
generators, laid out as a checkpoint commit is), owned by that branch alone.
Switching in hands those tensors to the live model and to an optimizer built
for the branch's tunables; switching out takes copies. Each branch has its
own generators, so a branch draws the same random numbers however branches
are interleaved: time-sharing changes when a branch runs, never what it computes.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from git_mgit.runtime.selection import hop
from git_mgit.runtime.training import distributed, rng, state
from git_mgit.runtime.training.layout import Info, Position, Snapshot, metric_values
from git_mgit.runtime.tuning.workload import Tunables, TuneError, Workload

SLICE = 10  # clocks a branch runs before the next branch gets the process
_UNCOMMITTED = Info("", Position())  # a branch's state has no checkpoint info until committed


@dataclass
class Branch:
    tunables: Tunables
    origin: int  # the clock it was forked at
    state: Snapshot | None = None  # None while the live objects hold it alone
    losses: list[float] = field(default_factory=list)  # one per clock since the fork
    seconds: list[float] = field(default_factory=list)  # its compute time after each clock

    @property
    def clocks(self) -> int:
        return len(self.losses)

    @property
    def clock(self) -> int:
        """The clock it has reached: the position in the data of its next step."""
        return self.origin + self.clocks

    @property
    def diverged(self) -> bool:
        return bool(self.losses) and not math.isfinite(self.losses[-1])


def _cloned(tensors: dict[str, Any]) -> dict[str, Any]:
    return {n: t.detach().clone() for n, t in tensors.items()}


def _take(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> Snapshot:
    """Copies of the live state and this process's generators."""
    captured = state.capture(model, optimizer, None, distributed.current())
    return Snapshot(
        _UNCOMMITTED,
        _cloned(captured.model),
        _cloned(captured.training),
        captured.skeletons,
        [rng.capture()],
    )


def _hyperparameters(optimizer: torch.optim.Optimizer, tunables: Tunables) -> None:
    """The setting's values in every param group (loading a state brings back the old ones)."""
    for group in optimizer.param_groups:
        group.update({k: v for k, v in tunables.items() if k in group})


class Trainer:
    """The live model and optimizer, and the branch whose state they hold."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.live: Branch | None = Branch({}, 0)  # the model as the workload built it
        self.optimizer: torch.optim.Optimizer | None = None

    def fork(self, parent: Snapshot, tunables: Tunables, clock: int) -> Branch:
        """A new branch at `clock` from a copy of `parent`, to train with `tunables`."""
        return Branch(
            dict(tunables), clock, dataclasses.replace(parent, training=_cloned(parent.training))
        )

    def state(self, branch: Branch) -> Snapshot:
        """The branch's state, to read (commit, fork from), not to keep."""
        if branch is self.live and branch.state is None:
            branch.state = _take(self.workload.model, self.optimizer)
        assert branch.state is not None
        return branch.state

    def free(self, branch: Branch) -> None:
        """Drop a branch's state (MLtuner's FreeBranch): it will not run again."""
        branch.state = None
        if branch is self.live:
            self.live = None

    def switch(self, branch: Branch) -> None:
        """Make `branch` live: its state into the model and a new optimizer for its tunables."""
        if branch is self.live:
            branch.state = None  # a copy taken while live: the live objects still hold it
            return
        if self.live is not None:
            self.state(self.live)
        assert branch.state is not None
        optimizer = self.workload.optimizer(self.workload.model, branch.tunables)
        hop.put(branch.state, self.workload.model, optimizer)
        _hyperparameters(optimizer, branch.tunables)
        branch.state = None  # the optimizer holds its tensors now
        self.live, self.optimizer = branch, optimizer

    def run(self, branch: Branch, clocks: int) -> None:
        """Train `branch` for up to `clocks` clocks; it stops at a loss that is not finite."""
        self.switch(branch)
        model, optimizer = self.workload.model, self.optimizer
        for _ in range(clocks):
            began = time.perf_counter()
            loss = self.workload.step(model, optimizer, branch.clock, branch.tunables)
            try:
                value = float(loss)
            except (TypeError, ValueError):
                raise TuneError(
                    f"step() returned {type(loss).__name__}: return the clock's training loss "
                    "(a number or a one-element tensor)"
                ) from None
            spent = time.perf_counter() - began
            branch.seconds.append((branch.seconds[-1] if branch.seconds else 0.0) + spent)
            branch.losses.append(value)
            if not math.isfinite(value):
                return

    def time_share(self, branches: list[Branch], clocks: int) -> None:
        """Round-robin slices until every branch has run `clocks` clocks (or diverged)."""
        while True:
            due = [b for b in branches if b.clocks < clocks and not b.diverged]
            if not due:
                return
            for b in due:
                self.run(b, min(SLICE, clocks - b.clocks))

    def evaluate(self, branch: Branch) -> dict[str, float | str]:
        """The workload's metrics of the branch's model; its generators and mode are kept."""
        if self.workload.evaluate is None:
            return {}
        self.switch(branch)
        model = self.workload.model
        generators, mode = rng.capture(), model.training
        try:
            return metric_values(self.workload.evaluate(model) or {})
        finally:
            model.train(mode)
            rng.restore(*generators)
