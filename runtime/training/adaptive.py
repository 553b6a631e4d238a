"""Flor's adaptive checkpoint period (paper 004, section 3.2): overhead under a bound the user sets.

Symbols, as in the paper's Table 1, for the loop body `ckpt.step()` closes:
M the time a checkpoint costs the loop, C the time one iteration computes,
n the iterations run so far, k the checkpoints taken so far, c the ratio of
restore to materialise time, eps the overhead tolerance. Flor's joint
invariant (equation 4) checkpoints iteration n only while

    M / C  <  n / (k + 1) * min(1 / (1 + c), eps)

which keeps k * M under about eps * n * C (record overhead, equation 1) and
makes replay from the checkpoints beat re-running (equation 3). Before the
first checkpoint M is unknown, so the first iteration is checkpointed to
measure it (as Flor materialises a block's first execution), or the first
after the host buffers it copies into exist (they are made in the
background: on a GPU, pinning gigabytes takes longer than a step).

What a checkpoint costs the loop is more than the time the loop spends
inside it (the copy off the device, the RNG gather, any wait for a free
slot; the whole commit when synchronous): while a background commit runs,
it competes with training for cores, memory bandwidth and the GIL, and the
iterations it overlaps run slower (1.2-2x on a 2-core machine). M counts
that too: C is the mean of iterations no commit overlapped (leaving out
the first, which pays for warming up), and whatever the overlapped
iterations took beyond C is charged to M. So a decision is made only when
no commit is running (its whole cost is known by then) and a few clean
iterations since the last one have kept C honest.

Deciding needs the same answer on every rank, and a collective per
iteration would cost more than it saves; so rank 0 turns the rule into the
iteration the next decision is due at and broadcasts that one number then
(decide()).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EPS = 1 / 15  # Flor's default tolerance (6.67 %)
WARMUP = 1  # first iterations, slow with lazy allocation, that C leaves out
CLEAN = 3  # iterations with no commit beside them, since the last checkpoint, before deciding
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
    """What checkpoints cost the loop and what iterations compute: Flor's M and C, measured."""

    eps: float = EPS
    c: float = RESTORE_RATIO
    n: int = 0  # iterations run
    k: int = 0  # checkpoints taken
    blocked: float = 0.0  # seconds the loop spent inside checkpoints
    warm: float = 0.0  # seconds of the first WARMUP iterations
    clean: float = 0.0  # seconds of the later iterations no commit overlapped ...
    clean_n: int = 0  # ... and how many
    overlapped: float = 0.0  # seconds of the iterations a background commit overlapped ...
    overlapped_n: int = 0  # ... and how many
    since: int = 0  # clean iterations since the last checkpoint

    def iteration(self, seconds: float, overlapped: bool = False) -> None:
        """One iteration took `seconds` outside checkpoints; `overlapped`: a commit ran meanwhile."""
        self.n += 1
        if self.n <= WARMUP:
            self.warm += seconds
        elif overlapped:
            self.overlapped += seconds
            self.overlapped_n += 1
        else:
            self.clean += seconds
            self.clean_n += 1
            self.since += 1

    def checkpointed(self, seconds: float) -> None:
        self.k += 1
        self.blocked += seconds
        self.since = 0

    @property
    def cost(self) -> float:
        """C: an iteration's time with no commit beside it."""
        if self.clean_n:
            return self.clean / self.clean_n
        return (self.warm + self.overlapped) / self.n if self.n else 0.0

    @property
    def slowdown(self) -> float:
        """Seconds background commits took from the iterations they overlapped."""
        if not self.clean_n:
            return 0.0  # nothing to compare with yet
        return max(0.0, self.overlapped - self.overlapped_n * self.cost)

    @property
    def materialize(self) -> float:
        """k * M: everything checkpoints cost the loop so far."""
        return self.blocked + self.slowdown

    @property
    def compute(self) -> float:
        """n * C: the loop's time had nothing been checkpointed."""
        return self.warm + self.clean + self.overlapped - self.slowdown

    @property
    def m(self) -> float:
        return self.materialize / self.k if self.k else 0.0

    def next_due(self) -> int:
        return next_due(self.m, self.cost, self.n, self.k, self.c, self.eps)

    def decide(self, committing: bool) -> int:
        """At a due iteration: n to checkpoint now, else the iteration to decide at next.

        While a commit is still running, its cost to the loop is not all known,
        and until a few clean iterations followed it C may be off: decide again
        at the next iteration.
        """
        if committing or (self.k and self.since < CLEAN):
            return self.n + 1
        if should_checkpoint(self.m, self.cost, self.n, self.k, self.c, self.eps):
            return self.n
        return self.next_due()

    @property
    def overhead(self) -> float:
        """What checkpoints cost the loop, as a share of its compute time so far."""
        return self.materialize / self.compute if self.compute else 0.0
