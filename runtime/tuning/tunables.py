"""TUNABLES.toml: the budget of a `git mgit tune` run and the tunables it searches.

    [tune]
    clocks = 600            # training budget, in clocks (one clock: one step(), one mini-batch)
    epoch = 100             # clocks per epoch: checkpoint and plateau-check period, and the
                            #   bound on a re-tuning's trial time (default: clocks / 10)
    initial_trial = 10      # first trial time, in clocks (at least 10: the summarizer's windows)
    searcher = "grid"       # or "random"
    trials = 4              # random: settings drawn per tuning
    window = 100            # clocks of progress a plateau check summarizes (default: epoch)
    time = "clocks"         # the time axis of convergence speed, or "seconds"
    retune = true           # re-tune when training stops converging

    [tunables]
    lr = [0.001, 0.01, 0.1]                 # grid: the values to try
    momentum = { uniform = [0.0, 0.99] }    # random: choice, uniform, log_uniform, int_uniform

No torch here: the file is checked before any user code runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_mgit.errors import MgitError
from git_mgit.runtime import searchspace
from git_mgit.runtime.tuning.summarize import K

SEARCHERS = ("grid", "random")
TIMES = ("clocks", "seconds")
KEYS = ("clocks", "epoch", "initial_trial", "searcher", "trials", "window", "time", "retune")


class TunablesError(MgitError):
    """A TUNABLES.toml that cannot be used, naming the file, the key and the fix."""


@dataclass(frozen=True)
class Plan:
    path: str
    clocks: int
    epoch: int
    initial_trial: int
    searcher: str
    trials: int
    window: int
    time: str
    retune: bool
    tunables: dict[str, Any] = field(default_factory=dict)  # name -> values, or a distribution


def _positive(where: str, table: dict[str, Any], key: str, default: int | None) -> int:
    value = table.get(key, default)
    if value is None:
        raise TunablesError(f"{where} {key} is required: the training budget in clocks")
    if type(value) is not int or value < 1:
        raise TunablesError(f"{where} {key} must be a positive integer, not {value!r}")
    return value


def _choice(where: str, table: dict[str, Any], key: str, options: tuple[str, ...]) -> str:
    value = table.get(key, options[0])
    if value not in options:
        raise TunablesError(f"{where} {key} must be one of {', '.join(map(repr, options))}")
    return value


def _tunables(where: str, table: Any, searcher: str) -> dict[str, Any]:
    if not isinstance(table, dict) or not table:
        raise TunablesError(
            f"{where} is empty: name at least one tunable, e.g. lr = [0.001, 0.01, 0.1]"
        )
    for name, spec in table.items():
        if isinstance(spec, list):
            if not spec:
                raise TunablesError(f"{where} {name} needs at least one value")
        elif searcher == "grid":
            raise TunablesError(
                f'{where} {name}: searcher = "grid" needs a list of values '
                '(distributions are for searcher = "random")'
            )
        else:
            searchspace.check(f"{where} {name}", spec, TunablesError)
    return dict(table)


def load(path: str | Path) -> Plan:
    """Read and check TUNABLES.toml; TunablesError names the key to fix."""
    p = Path(path)
    body, tune = searchspace.read_table(
        p, "tune", TunablesError, "docs/tuning.md", "with clocks = the training budget"
    )
    where = f"{p}: [tune]"
    unknown = sorted(set(tune) - set(KEYS))
    if unknown:
        raise TunablesError(f"{where} has no key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    clocks = _positive(where, tune, "clocks", None)
    initial = _positive(where, tune, "initial_trial", K)
    if initial < K:
        raise TunablesError(
            f"{where} initial_trial must be at least {K} clocks (the summarizer averages "
            f"{K} windows), not {initial}"
        )
    epoch = _positive(where, tune, "epoch", max(clocks // 10, initial))
    window = _positive(where, tune, "window", epoch)
    for key, value in (("epoch", epoch), ("clocks", clocks)):
        if value < initial:
            raise TunablesError(
                f"{where} {key} = {value} is shorter than initial_trial = {initial}; "
                "make it longer or initial_trial shorter"
            )
    if window < K:
        raise TunablesError(f"{where} window must be at least {K} clocks, not {window}")
    retune = tune.get("retune", True)
    if not isinstance(retune, bool):
        raise TunablesError(f"{where} retune must be true or false")
    searcher = _choice(where, tune, "searcher", SEARCHERS)
    return Plan(
        str(p),
        clocks,
        epoch,
        initial,
        searcher,
        _positive(where, tune, "trials", 8),
        window,
        _choice(where, tune, "time", TIMES),
        retune,
        _tunables(f"{p}: [tunables]", body.get("tunables"), searcher),
    )
