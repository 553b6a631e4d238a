"""What an expression reads from a version: the attribute table.

`m.NAME` is a model attribute (MODEL below), `m.TEST.METRIC` a recorded test
metric, `m["RE"].NAME` an attribute of the tensors the selector matches
(TENSOR below). Each column says what kind of value it holds (so a
comparison can check its literal up front), whether it is a set of values,
and what reading it costs, so the planner runs cheap predicates first.
"""

from __future__ import annotations

import datetime
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from git_mgit.dql import syntax as s
from git_mgit.dql.catalog import Catalog
from git_mgit.dql.errors import Pos, QueryError

# Kinds of values.
TEXT, NUMBER, TIME, SHAPE, ID = "text", "number", "time", "shape", "id"
# What reading a column costs: the graph in memory, one git call or the test records,
# the manifests.
GRAPH, GIT, MANIFESTS = 0, 1, 2


@dataclass(frozen=True)
class Column:
    read: Callable[[Catalog, str], Any]
    kind: str
    many: bool = False  # a set of values (tensor dtypes, branches)
    cost: int = GRAPH


def _node(field: str) -> Callable[[Catalog, str], Any]:
    return lambda c, v: getattr(c.node(v), field)


def _commit(field: str) -> Callable[[Catalog, str], Any]:
    def read(c: Catalog, v: str) -> str | None:
        info = c.commit(v)
        return getattr(info, field) if info else None

    return read


def _functions(c: Catalog, v: str) -> frozenset[str]:
    return frozenset(
        fn for e in c.graph.in_edges(v, ("provenance",)) if (fn := e.info.get("function"))
    )


def _size(c: Catalog, v: str) -> int | None:
    found = c.tensors(v)
    return sum(t.length for t in found.values()) if found else None


def _params(c: Catalog, v: str) -> int | None:
    found = c.tensors(v)
    return sum(t.elements for t in found.values()) if found else None


MODEL: dict[str, Column] = {
    "id": Column(lambda c, v: v, ID),
    "name": Column(Catalog.name, TEXT),
    "model": Column(lambda c, v: d.name if (d := c.declared(v)) else None, TEXT),
    "path": Column(_node("path"), TEXT),
    "type": Column(Catalog.type, TEXT),
    "kind": Column(_node("kind"), TEXT),
    "time": Column(_node("time"), TIME),
    "commit": Column(_node("commit"), ID),
    "function": Column(_functions, TEXT, many=True),
    "author": Column(_commit("author"), TEXT, cost=GIT),
    "email": Column(_commit("email"), TEXT, cost=GIT),
    "message": Column(_commit("message"), TEXT, cost=GIT),
    "branch": Column(lambda c, v: frozenset(c.branches(v)), TEXT, many=True, cost=GIT),
    "size": Column(_size, NUMBER, cost=MANIFESTS),
    "params": Column(_params, NUMBER, cost=MANIFESTS),
}

# Attributes of the tensors a selector matches: (kind, set-valued, reader over the tensors).
TENSOR: dict[str, tuple[str, bool, Callable[[list], Any]]] = {
    "count": (NUMBER, False, len),
    "params": (NUMBER, False, lambda ts: sum(t.elements for t in ts)),
    "bytes": (NUMBER, False, lambda ts: sum(t.length for t in ts)),
    "name": (TEXT, True, lambda ts: frozenset(t.name for t in ts)),
    "dtype": (TEXT, True, lambda ts: frozenset(t.dtype for t in ts)),
    "shape": (SHAPE, True, lambda ts: frozenset(t.shape for t in ts)),
}


def selected(c: Catalog, v: str, selector: s.Selector) -> list:
    """The version's tensors whose names the selector matches in full."""
    return [t for name, t in c.tensors(v).items() if selector.regex.fullmatch(name)]


def column(expr: s.Expr, catalog: Catalog) -> Column:
    """How to read `expr`; QueryError at the expression if it names no attribute."""
    if isinstance(expr, s.TensorAttr):
        found = TENSOR.get(expr.name)
        if found is None:
            raise QueryError(
                f"tensors have no attribute {expr.name!r}; use {', '.join(TENSOR)}", expr.pos
            )
        kind, many, reduce = found
        sel = expr.selector
        return Column(lambda c, v: reduce(selected(c, v, sel)), kind, many, MANIFESTS)
    if len(expr.path) == 1:
        found_attr = MODEL.get(expr.path[0])
        if found_attr is not None:
            return found_attr
    if len(expr.path) == 2:
        test, metric = expr.path
        if test not in catalog.lin.config.tests and not _recorded(catalog, test):
            raise QueryError(
                f"no test named {test!r} is registered or recorded (for {expr.text}: "
                f"{expr.var}.TEST.METRIC)",
                expr.pos,
            )
        return Column(lambda c, v: _metric(c.metrics(v, test), metric), NUMBER, cost=GIT)
    raise QueryError(
        f"{expr.text}: a model has {', '.join(MODEL)}; a recorded test metric is "
        f"{expr.var}.TEST.METRIC",
        expr.pos,
    )


def _recorded(catalog: Catalog, test: str) -> bool:
    return any(
        key.partition(":")[0] == test
        for results in catalog.graph.test_results.values()
        for key in results
    )


def _metric(metrics: dict | None, name: str) -> float | None:
    if not metrics or name not in metrics:
        return None
    value = metrics[name]
    return float(value) if isinstance(value, int | float | str) else None


# -- literals ------------------------------------------------------------------------------

_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*(second|minute|hour|day|week|month|year)s?\s+ago")
_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800,
            "month": 2629746, "year": 31556952}  # fmt: skip


def timestamp(text: str, pos: Pos) -> float:
    """Seconds since the epoch for an ISO 8601 date or time (local time unless it says
    otherwise), or `N days ago` (seconds, minutes, hours, days, weeks, months, years)."""
    ago = _AGO.fullmatch(text.strip().lower())
    if ago:
        return time.time() - float(ago.group(1)) * _SECONDS[ago.group(2)]
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise QueryError(
            f"{text!r} is not a date: write 2025-11-22, 2025-11-22T14:30, or 3 days ago", pos
        ) from None
    return when.timestamp()  # a naive time is local time, as git shows it


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
