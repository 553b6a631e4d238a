"""Which configuration trains on which worker next: Cerebro's MOP schedulers (paper 003).

A training unit s(i, j) is configuration i trained for one sub-epoch on
data partition j; worker j holds partition j. One epoch of MOP runs every
unit of every configuration once, under MOP's invariants: a configuration
trains on one worker at a time, a worker runs one unit at a time, and a unit
runs to its end (or, if its worker dies, not at all: it is queued again and
restarted from the state the configuration had before it).

`RandomScheduler` is Algorithm 1 with Algorithm 2 and section 4.6's fault
tolerance: Q (units to run) and Q' (units running); an idle worker takes a
random unit of Q on its partition whose configuration is idle. Seeded, so
the same events give the same schedule; every assignment is logged as each
configuration's visit order, which `FixedScheduler` replays exactly.
No torch, no processes: the driver feeds it events.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    config: int
    partition: int
    epoch: int


class Scheduler:
    """One epoch's units and MOP's invariants; subclasses choose which unit runs next."""

    def __init__(self, configs: Iterable[int], partitions: int, epoch: int) -> None:
        self.configs = sorted(configs)
        self.partitions, self.epoch = partitions, epoch
        self.queued = {Unit(c, j, epoch) for c in self.configs for j in range(partitions)}
        self.running: set[Unit] = set()  # Q'
        self.visits: dict[int, list[int]] = {c: [] for c in self.configs}  # completed, in order

    @property
    def done(self) -> bool:
        return not self.queued and not self.running

    def busy(self, config: int) -> bool:
        return any(u.config == config for u in self.running)

    def next_for(self, partition: int) -> Unit | None:
        """The unit the idle worker holding `partition` should run now, or None (wait)."""
        candidates = [
            u for u in self.queued if u.partition == partition and not self.busy(u.config)
        ]
        unit = self._choose(partition, candidates)
        if unit is not None:
            self.queued.remove(unit)
            self.running.add(unit)
        return unit

    def finished(self, unit: Unit) -> None:
        self.running.remove(unit)
        self.visits[unit.config].append(unit.partition)

    def failed(self, unit: Unit) -> None:
        """Its worker died: the unit goes back to Q, to run again from the state before it."""
        self.running.remove(unit)
        self.queued.add(unit)

    def _choose(self, partition: int, candidates: list[Unit]) -> Unit | None:
        raise NotImplementedError


class RandomScheduler(Scheduler):
    """Algorithm 1: a uniformly random eligible unit (Q shuffled, first match taken)."""

    def __init__(
        self, configs: Iterable[int], partitions: int, epoch: int, rng: random.Random
    ) -> None:
        super().__init__(configs, partitions, epoch)
        self.rng = rng

    def _choose(self, partition: int, candidates: list[Unit]) -> Unit | None:
        if not candidates:
            return None
        return self.rng.choice(sorted(candidates, key=lambda u: u.config))


class FixedScheduler(Scheduler):
    """Replays recorded visit orders: each configuration visits the partitions in its order."""

    def __init__(self, orders: Mapping[int, Sequence[int]], partitions: int, epoch: int) -> None:
        super().__init__(orders, partitions, epoch)
        for c, order in orders.items():
            if sorted(order) != list(range(partitions)):
                raise ValueError(
                    f"configuration {c}'s visit order {list(order)} is not every one of "
                    f"{partitions} partitions once"
                )
        self.orders = {c: list(order) for c, order in orders.items()}

    def _choose(self, partition: int, candidates: list[Unit]) -> Unit | None:
        due = [u for u in candidates if self._next(u.config) == partition]
        return min(due, key=lambda u: u.config) if due else None

    def _next(self, config: int) -> int | None:
        order, seen = self.orders[config], len(self.visits[config])
        return order[seen] if seen < len(order) else None
