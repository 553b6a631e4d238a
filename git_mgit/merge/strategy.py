"""How a tensor changed differently on both sides is resolved: strategies and the rules that pick them.

    ours | theirs | base                 keep one version as it is
    average[:ALPHA]                      (1 - ALPHA) * ours + ALPHA * theirs   (ALPHA defaults to 0.5)
    task-arithmetic                      base + (ours - base) + (theirs - base)

Arithmetic runs in float64, elementwise, in exactly the order written above,
and the result is rounded once to the tensor's dtype (numerics.from_float64).
Rules map glob patterns on tensor names (`classifier.*`, or
`__metadata__.KEY` for header metadata) to strategies; the first match wins.
They come from the command line (`--tensor PATTERN=STRATEGY`, then
`--strategy`), then from `[merge]` in mgit.toml.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from git_mgit.errors import MgitError

KEEP = ("ours", "theirs", "base")
ARITHMETIC = ("average", "task-arithmetic")
ENV_RULES = "GIT_MGIT_MERGE_RULES"  # how `git mgit merge` hands its rules to the driver


T = TypeVar("T")


class StrategyError(MgitError):
    """A strategy or rule that cannot be parsed."""


@dataclass(frozen=True)
class Strategy:
    name: str
    alpha: float = 0.5

    @classmethod
    def parse(cls, text: str) -> Strategy:
        name, _, arg = text.strip().partition(":")
        if name in (*KEEP, "task-arithmetic") and not arg:
            return cls(name)
        if name == "average":
            try:
                alpha = float(arg) if arg else 0.5
            except ValueError:
                alpha = float("nan")
            if 0.0 <= alpha <= 1.0:
                return cls(name, alpha)
            raise StrategyError(f"average:{arg}: the weight of theirs must be a number in [0, 1]")
        raise StrategyError(
            f"unknown merge strategy {text!r}; use ours, theirs, base, average[:ALPHA] "
            "or task-arithmetic"
        )

    @property
    def arithmetic(self) -> bool:
        return self.name in ARITHMETIC

    def keep(self, base: T, ours: T, theirs: T) -> T:
        """The side a keeping strategy (ours, theirs, base) keeps."""
        return {"ours": ours, "theirs": theirs, "base": base}[self.name]

    @property
    def needs_base(self) -> bool:
        return self.name == "task-arithmetic"

    def __str__(self) -> str:
        if self.name == "average" and self.alpha != 0.5:
            return f"average:{self.alpha:g}"
        return self.name

    def combine(self, base: np.ndarray | None, ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
        """The float64 result of an arithmetic strategy, elementwise."""
        if self.name == "average":
            return (1.0 - self.alpha) * ours + self.alpha * theirs
        assert base is not None
        return base + (ours - base) + (theirs - base)


@dataclass(frozen=True)
class Rules:
    """(glob pattern, strategy) pairs; the first pattern that matches a name decides."""

    rules: tuple[tuple[str, Strategy], ...] = ()

    def for_name(self, name: str) -> Strategy | None:
        return next((s for pattern, s in self.rules if fnmatch.fnmatchcase(name, pattern)), None)

    def __add__(self, other: Rules) -> Rules:
        return Rules(self.rules + other.rules)

    @classmethod
    def parse(cls, pairs: list[tuple[str, str]]) -> Rules:
        return cls(tuple((pattern, Strategy.parse(text)) for pattern, text in pairs))

    @classmethod
    def from_command_line(cls, tensors: list[str], default: str | None) -> Rules:
        """`--tensor PATTERN=STRATEGY` (repeatable), then `--strategy S` for everything else."""
        pairs = []
        for item in tensors:
            pattern, sep, text = item.rpartition("=")
            if not sep or not pattern:
                raise StrategyError(
                    f"--tensor {item!r}: write PATTERN=STRATEGY, e.g. 'head.*=theirs'"
                )
            pairs.append((pattern, text))
        if default is not None:
            pairs.append(("*", default))
        return cls.parse(pairs)

    def to_env(self) -> str:
        return json.dumps([[p, str(s)] for p, s in self.rules])

    @classmethod
    def from_env(cls) -> Rules:
        text = os.environ.get(ENV_RULES)
        if not text:
            return cls()
        try:
            pairs = [(str(p), str(s)) for p, s in json.loads(text)]
        except (ValueError, TypeError) as exc:
            raise StrategyError(f"{ENV_RULES} is not a list of [pattern, strategy] pairs") from exc
        return cls.parse(pairs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line's rules: `--strategy` for every tensor, `--tensor PATTERN=STRATEGY`."""
    parser.add_argument(
        "--strategy",
        help="ours, theirs, base, average[:ALPHA] or task-arithmetic, for every tensor",
    )
    parser.add_argument(
        "--tensor",
        action="append",
        default=[],
        metavar="PATTERN=STRATEGY",
        help="strategy for tensors whose names match a glob pattern (repeatable; first match wins)",
    )
