"""A query's answer, as a table for people or JSON for programs.

Rows hold typed values (timestamps, shapes, sets of values); each column
has a kind that says how to show them: ids abbreviated and times as local
dates in the table, full ids and ISO 8601 times in JSON.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from git_mgit.console.columns import aligned
from git_mgit.dql.values import ID, SHAPE, TIME


@dataclass
class Result:
    """What a query answered: rows of columns (label, kind), and notes for the reader."""

    kind: str  # select | slice | construct | evaluate
    columns: list[tuple[str, str]]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def table(self) -> str:
        """Aligned columns with a header line; '-' where a value is missing."""
        labels = [label for label, _ in self.columns]
        cells = [[_cell(row.get(label), kind) for label, kind in self.columns] for row in self.rows]
        return "\n".join(aligned([labels, *cells]))

    def to_json(self) -> str:
        rows = [
            {label: _plain(row.get(label), kind) for label, kind in self.columns}
            for row in self.rows
        ]
        return json.dumps(rows, indent=2)


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, frozenset):
        return ", ".join(sorted(_cell(v, kind) for v in value)) or "-"
    if kind == ID:
        return str(value)[:10]
    if kind == TIME:
        return datetime.datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M")
    if kind == SHAPE:
        return "[" + ",".join(map(str, value)) + "]"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _plain(value: Any, kind: str) -> Any:
    """A JSON value: sets as sorted lists, shapes as lists, times as ISO 8601 strings."""
    if value is None:
        return None
    if isinstance(value, frozenset):
        return sorted(_plain(v, kind) for v in value)
    if kind == TIME:
        return datetime.datetime.fromtimestamp(value).astimezone().isoformat()
    if kind == SHAPE:
        return list(value)
    return value
