"""Flor's adaptive checkpoint period (paper 004, section 3.2): overhead under a bound the user sets.

Symbols, as in the paper's Table 1, for the loop body `ckpt.step()` closes:
M the time a checkpoint costs the loop (for a background checkpoint: the
copy off the device, the RNG gather and any wait for a free slot; the whole
commit when synchronous), C the time one iteration computes, n the
iterations run so far, k the checkpoints taken so far, c the ratio of
restore to materialise time, eps the overhead tolerance. Flor's joint
invariant (equation 4) checkpoints iteration n only while

    M / C  <  n / (k + 1) * min(1 / (1 + c), eps)

which keeps k * M under about eps * n * C (record overhead, equation 1) and
makes replay from the checkpoints beat re-running (equation 3). M and C are
running means of what was measured. Before the first checkpoint M is
unknown, so the first iteration is checkpointed to measure it (as Flor
materialises a block's first execution).

Deciding needs the same answer on every rank, and a collective per
iteration would cost more than it saves; so rank 0 turns the rule into the
iteration the next checkpoint is due at, with its estimates of M and C at
the last checkpoint, and broadcasts that one number then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EPS = 1 / 15  # Flor's default tolerance (6.67 %)
RESTORE_RATIO = 1.38  # Flor's c, measured over its workloads (section 3.2.2)


def threshold(n: int, k: int, c: float = RESTORE_RATIO, eps: float = EPS) -> float:
    """The right-hand side of Flor's joint invariant."""
    return n / (k + 1) * min(1 / (1 + c), eps)


def should_checkpoint(
    m: float, cost: float, n: int, k: int, c: float = RESTORE_RATIO, eps: float = EPS
) -> bool:
    """Flor's rule for iteration n (1-based, already run) with k checkpoints taken."""
    if k == 0 and m <= 0:
        return n >= 1  # nothing measured yet: take one to measure M
    if cost <= 0:
        return False
    return m / cost < threshold(n, k, c, eps)


def next_due(
    m: float, cost: float, n: int, k: int, c: float = RESTORE_RATIO, eps: float = EPS
) -> int:
    """The first iteration after n at which should_checkpoint holds (M, C held fixed)."""
    if (k == 0 and m <= 0) or cost <= 0:
        return n + 1
    # M/C < n'/(k+1) * b  <=>  n' > (k+1) * (M/C) / b; then settle rounding at the boundary
    due = max(n + 1, math.floor((k + 1) * (m / cost) / min(1 / (1 + c), eps)))
    while not should_checkpoint(m, cost, due, k, c, eps):
        due += 1
    return due


@dataclass
class AdaptivePeriod:
    """Running estimates of M and C, and the iteration the next checkpoint is due at."""

    eps: float = EPS
    c: float = RESTORE_RATIO
    n: int = 0  # iterations run
    k: int = 0  # checkpoints taken
    compute: float = 0.0  # seconds, summed over iterations
    materialize: float = 0.0  # seconds, summed over checkpoints

    def iteration(self, seconds: float) -> None:
        self.n += 1
        self.compute += seconds

    def checkpointed(self, seconds: float) -> None:
        self.k += 1
        self.materialize += seconds

    @property
    def m(self) -> float:
        return self.materialize / self.k if self.k else 0.0

    @property
    def cost(self) -> float:
        return self.compute / self.n if self.n else 0.0

    def next_due(self) -> int:
        return next_due(self.m, self.cost, self.n, self.k, self.c, self.eps)

    @property
    def overhead(self) -> float:
        """Checkpoint time as a share of compute time so far."""
        return self.materialize / self.compute if self.compute else 0.0
