"""A model selection workload, as SPACE.toml describes it: Cerebro's API (paper 003, Figure 3).

    [select]
    model = "mop:model"          # model(config) -> torch.nn.Module
    optimizer = "mop:optimizer"  # optimizer(model, config) -> torch.optim.Optimizer
    data = "mop:partition"       # data(partition, partitions) -> this worker's share, read once
    train = "mop:train_unit"     # train(model, optimizer, data, config) -> metrics of one sub-epoch
    evaluate = "mop:evaluate"    # optional: evaluate(model, config) -> metrics, at each epoch's end
    metric = "accuracy"          # what the summary ranks by (train's or evaluate's)
    goal = "max"                 # or "min"
    epochs = 3
    start = "base"               # optional: every configuration starts from this model version

    [space]                      # --search grid: every combination
    lr = [0.1, 0.01, 0.001]
    batch_size = [16, 64]

    [random]                     # --search random: `samples` draws
    samples = 8
    lr = { log_uniform = [1e-4, 1e-1] }
    batch_size = { choice = [16, 32, 64] }

    [hyperband]                  # --search hyperband: draws from [random], R = epochs
    eta = 3                      # optional: keep 1/eta of each bracket at each rung

No torch here: the launcher checks the file before any process starts.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_mgit.errors import MgitError
from git_mgit.runtime import searchspace
from git_mgit.runtime.selection import hyperband

SEARCHES = ("grid", "random", "hyperband")
FUNCTIONS = ("model", "optimizer", "data", "train")


class SpaceError(MgitError):
    """A SPACE.toml that cannot be used, with where and what to fix."""


@dataclass(frozen=True)
class Space:
    path: str
    functions: dict[str, str]  # model, optimizer, data, train, and evaluate if given
    metric: str
    goal: str  # max | min
    epochs: int
    start: str | None = None
    grid: dict[str, list[Any]] = field(default_factory=dict)
    random: dict[str, Any] = field(default_factory=dict)
    samples: int = 0
    eta: int = 3

    def configurations(self, search: str, seed: int, epochs: int) -> list[dict[str, Any]]:
        """The configurations to train, in a fixed order (their labels c00, c01, ...);
        hyperband's, bracket after bracket, as many as its brackets for R = `epochs` take."""
        if search == "grid":
            if not self.grid:
                raise SpaceError(f"{self.path}: --search grid needs a [space] table of lists")
            names = sorted(self.grid)
            return [
                dict(zip(names, values, strict=True))
                for values in itertools.product(*(self.grid[n] for n in names))
            ]
        if search in ("random", "hyperband"):
            if not self.random:
                raise SpaceError(
                    f"{self.path}: --search {search} draws from a [random] table of "
                    "distributions; add one (docs/selection.md)"
                )
            count = self.samples
            if search == "hyperband":
                count = hyperband.size(hyperband.brackets(epochs, self.eta))
            rng = random.Random(seed)
            names = sorted(self.random)
            return [{n: searchspace.draw(self.random[n], rng) for n in names} for _ in range(count)]
        raise SpaceError(f"unknown search {search!r}; use one of {', '.join(SEARCHES)}")

    def better(self, a: float, b: float) -> bool:
        return a > b if self.goal == "max" else a < b


def load(path: str | Path) -> Space:
    """Read and check SPACE.toml; SpaceError names the key to fix."""
    p = Path(path)
    body, select = searchspace.read_table(
        p, "select", SpaceError, "docs/selection.md", "naming the functions"
    )
    functions = {}
    for name in (*FUNCTIONS, "evaluate"):
        ref = select.get(name)
        if ref is None and name == "evaluate":
            continue
        if not isinstance(ref, str) or ":" not in ref:
            raise SpaceError(f"{p}: [select] {name} must be 'module:function'")
        functions[name] = ref
    goal = select.get("goal", "max")
    if goal not in ("max", "min"):
        raise SpaceError(f'{p}: [select] goal must be "max" or "min"')
    epochs = select.get("epochs", 1)
    if not isinstance(epochs, int) or epochs < 1:
        raise SpaceError(f"{p}: [select] epochs must be a positive integer")
    metric = select.get("metric")
    if not isinstance(metric, str):
        raise SpaceError(f"{p}: [select] metric must name what the summary ranks by")
    grid = body.get("space", {})
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise SpaceError(f"{p}: [space] {k} must be a non-empty list of values")
    randoms = dict(body.get("random", {}))
    samples = randoms.pop("samples", 8 if randoms else 0)
    if not isinstance(samples, int) or (samples < 1 and randoms):
        raise SpaceError(f"{p}: [random] samples must be a positive integer")
    for k, v in randoms.items():
        searchspace.check(f"{p}: [random] {k}", v, SpaceError)
    return Space(
        str(p),
        functions,
        metric,
        goal,
        epochs,
        select.get("start"),
        grid,
        randoms,
        samples,
        _eta(p, body.get("hyperband", {})),
    )


def _eta(p: Path, table: Any) -> int:
    """[hyperband] eta: the fraction 1/eta of each bracket that survives a rung."""
    if not isinstance(table, dict) or set(table) - {"eta"}:
        raise SpaceError(f"{p}: [hyperband] takes only eta (an integer >= 2)")
    eta = table.get("eta", 3)
    if type(eta) is not int or eta < 2:
        raise SpaceError(f"{p}: [hyperband] eta must be an integer >= 2, not {eta!r}")
    return eta
