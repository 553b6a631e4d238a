"""Plain-text tables for a terminal: left-aligned columns two spaces apart, and their cells."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Each row as one line, every column as wide as its widest cell; no trailing blanks."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def cell(value: Any) -> str:
    """A float to 4 significant digits (a metric, a tunable), anything else as str()."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)
