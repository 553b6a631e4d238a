"""MLtuner's tunable searchers (paper 001, section 5.3.3): which settings a tuning round tries.

GridSearcher proposes every combination of the listed values (MLtuner finds
it works well for one or two tunables); RandomSearcher draws `trials`
settings, seeded by the run's seed and the round, so a run is repeatable.
A re-tuning tries no more settings than the tuning before it (section 5.3.4).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from git_mgit.console.columns import cell
from git_mgit.runtime import searchspace
from git_mgit.runtime.tuning.tunables import Plan


def settings(plan: Plan, seed: int, round_: int, limit: int | None = None) -> list[dict[str, Any]]:
    """The settings round `round_` (from 1) tries, at most `limit` of them."""
    names = sorted(plan.tunables)
    if plan.searcher == "grid":
        found = [
            dict(zip(names, values, strict=True))
            for values in itertools.product(*(plan.tunables[n] for n in names))
        ]
    else:
        rng = random.Random(f"{seed}/{round_}")
        found = [{n: _value(plan.tunables[n], rng) for n in names} for _ in range(plan.trials)]
    return found if limit is None else found[:limit]


def _value(spec: Any, rng: random.Random) -> Any:
    """A draw from a distribution; a list of values is a choice among them."""
    return rng.choice(spec) if isinstance(spec, list) else searchspace.draw(spec, rng)


def describe(setting: dict[str, Any]) -> str:
    """`lr=0.01 momentum=0.9`: a setting as progress lines, tables and commit trailers show it."""
    return " ".join(f"{k}={cell(v)}" for k, v in sorted(setting.items()))
