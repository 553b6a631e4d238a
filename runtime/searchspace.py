"""What `git mgit select`'s SPACE.toml and `git mgit tune`'s TUNABLES.toml share.

Reading the file (one-line errors naming it), and the distributions a
random search draws a value from:

    { choice = [16, 32, 64] }   { uniform = [0.0, 0.99] }
    { log_uniform = [1e-4, 1e-1] }   { int_uniform = [1, 8] }

No torch here: both files are checked before any user code runs.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import tomllib

from git_mgit.errors import MgitError

KINDS = ("choice", "uniform", "log_uniform", "int_uniform")


def read_toml(path: Path, error: type[MgitError], doc: str) -> dict[str, Any]:
    """The file's tables; `error` says what is wrong and where `doc` describes the format."""
    try:
        return tomllib.loads(path.read_text())
    except (FileNotFoundError, IsADirectoryError):
        raise error(f"{path}: no such file (see {doc} for its format)") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not TOML: {exc}") from None


def read_table(
    path: Path, name: str, error: type[MgitError], doc: str, needs: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The file's tables and its required [name] table; `needs` says what that table holds."""
    body = read_toml(path, error, doc)
    table = body.get(name)
    if not isinstance(table, dict):
        raise error(f"{path}: needs a [{name}] table {needs}")
    return body, table


def check(where: str, spec: Any, error: type[MgitError]) -> Any:
    """`spec` if it is a distribution; else `error` saying what one looks like."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise error(f"{where}: expected {{ <kind> = [...] }} with kind one of {', '.join(KINDS)}")
    kind, values = next(iter(spec.items()))
    if not isinstance(values, list) or not values:
        raise error(f"{where}: {kind} needs a non-empty list")
    if kind != "choice":
        if len(values) != 2 or not all(isinstance(v, int | float) for v in values):
            raise error(f"{where}: {kind} needs [low, high]")
        if values[0] > values[1] or (kind == "log_uniform" and values[0] <= 0):
            raise error(
                f"{where}: {kind} needs 0 < low <= high"
                if kind == "log_uniform"
                else f"{where}: low > high"
            )
    return spec


def draw(spec: Any, rng: random.Random) -> Any:
    """One value from a checked distribution."""
    kind, values = next(iter(spec.items()))
    if kind == "choice":
        return rng.choice(values)
    lo, hi = values
    if kind == "uniform":
        return rng.uniform(lo, hi)
    if kind == "log_uniform":
        return math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return rng.randint(lo, hi)  # int_uniform
