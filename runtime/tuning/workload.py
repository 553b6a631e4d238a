"""What `git mgit tune` trains: the user's `module:fn` returns a Workload.

MLtuner drives a training system through branch operations and per-clock
progress reports (paper 001, section 5.3.5). Here the training system is
four callables in one process: a clock is one `step()`, one mini-batch, and
its return value is the progress MLtuner summarizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from git_mgit.errors import MgitError
from git_mgit.runtime import callables

if TYPE_CHECKING:
    import torch

Tunables = dict[str, Any]


class TuneError(MgitError):
    """A tuning run that cannot start or go on, with what to do."""


@dataclass
class Workload:
    """The model and how to train it one clock at a time.

    `optimizer(model, tunables)` builds the optimizer for a setting.
    `step(model, optimizer, clock, tunables)` trains one mini-batch and returns
    its training loss; it must pick its batch from `clock` alone, so that every
    branch forked at a clock sees the same data. `evaluate(model)`, if given,
    returns metrics recorded with every checkpoint.
    """

    model: torch.nn.Module
    optimizer: Callable[[torch.nn.Module, Tunables], torch.optim.Optimizer]
    step: Callable[[torch.nn.Module, torch.optim.Optimizer, int, Tunables], float]
    evaluate: Callable[[torch.nn.Module], Mapping[str, Any]] | None = None


def load(ref: str, root: Path, seed: int) -> Workload:
    """Seed every generator, then call the user's `module:fn` and check what it returned."""
    import torch

    from git_mgit.runtime.training import rng

    fn = callables.load(ref, root)
    rng.seed(seed)
    found = fn()
    if not isinstance(found, Workload):
        raise TuneError(
            f"{ref} returned {type(found).__name__}, not a Workload; return "
            "git_mgit.runtime.tuning.Workload(model, optimizer, step, evaluate=None)"
        )
    if not isinstance(found.model, torch.nn.Module):
        raise TuneError(f"{ref}: Workload.model is {type(found.model).__name__}, not a Module")
    for name in ("optimizer", "step"):
        if not callable(getattr(found, name)):
            raise TuneError(f"{ref}: Workload.{name} must be a function")
    return found
