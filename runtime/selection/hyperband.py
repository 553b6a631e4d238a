"""Hyperband's brackets and its cuts at rung boundaries (Li et al. 2018), for `--search hyperband`.

Hyperband runs successive halving in brackets s = s_max .. 0, s_max =
floor(log_eta R) with R the maximum epochs: bracket s starts n = ceil((s_max +
1) / (s + 1) * eta^s) configurations at r = R * eta^-s epochs; its rung
i = 0 .. s trains n_i = floor(n * eta^-i) of them up to r_i = r * eta^i
epochs, and at a rung's end the best n_{i+1} go on to the next. Cerebro runs every bracket at once (paper
003, section 3.2: the AutoML procedure drops configurations between epochs),
so `Plan` only says which configurations still train and which stop after an
epoch. Integer arithmetic throughout: a float log_3(243) is 4.999...
No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any


@dataclass(frozen=True)
class Rung:
    configs: int  # n_i: configurations that train in this rung
    epochs: int  # r_i: epochs they have trained when the rung ends


@dataclass(frozen=True)
class Bracket:
    s: int
    rungs: tuple[Rung, ...]

    @property
    def size(self) -> int:
        return self.rungs[0].configs


def s_max(epochs: int, eta: int) -> int:
    """floor(log_eta(epochs)), exactly: the largest s with eta^s <= epochs."""
    s = 0
    while eta ** (s + 1) <= epochs:
        s += 1
    return s


def brackets(epochs: int, eta: int) -> list[Bracket]:
    """The paper's brackets for R = `epochs`, most exploratory (s = s_max) first.

    Rung epochs are rounded half up, at least 1, and the last is exactly R,
    so an R that is no power of eta still ends every bracket at R.
    """
    top = s_max(epochs, eta)
    out = []
    for s in range(top, -1, -1):
        n = -(-(top + 1) * eta**s // (s + 1))  # ceil
        rungs = tuple(Rung(n // eta**i, _rounded(epochs, eta ** (s - i))) for i in range(s + 1))
        out.append(Bracket(s, rungs))
    return out


def _rounded(epochs: int, divisor: int) -> int:
    """epochs / divisor rounded half up, at least 1; exact, so the last rung is R."""
    return max(1, int(Fraction(epochs, divisor) + Fraction(1, 2)))


def size(plan: list[Bracket]) -> int:
    """Configurations the brackets sample."""
    return sum(b.size for b in plan)


def describe(plan: list[Bracket]) -> str:
    """`s=1: 3@1 1@3; s=0: 2@3`: each bracket's rungs as configurations@epochs."""
    return "; ".join(
        f"s={b.s}: " + " ".join(f"{r.configs}@{r.epochs}" for r in b.rungs) for b in plan
    )


@dataclass
class Plan:
    """Every bracket at once: configurations numbered bracket after bracket, and which stopped."""

    brackets: list[Bracket]
    stopped: set[int] = field(default_factory=set)
    members: list[range] = field(init=False)  # each bracket's configurations

    def __post_init__(self) -> None:
        self.members, first = [], 0
        for b in self.brackets:
            self.members.append(range(first, first + b.size))
            first += b.size

    def training(self, config: int) -> bool:
        return config not in self.stopped

    def cut(
        self, epoch: int, scores: Mapping[int, float | None], goal: str
    ) -> dict[int, dict[str, Any]]:
        """After `epoch`: each configuration that trained it (the keys of `scores`, its
        metric or None) gets its bracket and rung, and `stopped` if it is cut here.

        A bracket whose rung ends here keeps its next rung's n best by score
        (a missing score is worst, ties go to the lower index); the rest stop.
        """
        marks: dict[int, dict[str, Any]] = {}
        for b, members in zip(self.brackets, self.members, strict=True):
            active = [c for c in members if c in scores]
            rung = next(i for i, r in enumerate(b.rungs) if epoch < r.epochs)
            for c in active:
                marks[c] = {"bracket": b.s, "rung": rung}
            if active and epoch + 1 == b.rungs[rung].epochs and rung < b.s:
                for c in rank(active, scores, goal)[b.rungs[rung + 1].configs :]:
                    self.stopped.add(c)
                    marks[c]["stopped"] = True
        return marks


def rank(configs: list[int], scores: Mapping[int, float | None], goal: str) -> list[int]:
    """Best first by score and goal; unscored last; ties by configuration index."""
    sign = -1 if goal == "max" else 1

    def key(c: int) -> tuple[bool, float, int]:
        score = scores.get(c)
        return (score is None, 0.0 if score is None else sign * score, c)

    return sorted(configs, key=key)
