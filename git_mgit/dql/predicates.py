"""Conditions -> predicates over version ids, each with what it costs to evaluate.

Compilation checks every comparison against its column (a date compared
with a date, a shape with a shape pattern, a name with a string) and turns
literals into the values compared (dates into timestamps, LIKE patterns
and regular expressions into compiled patterns), so evaluating a row does
no parsing. Lineage predicates compute their set of versions once.

Semantics, as in SQL where SQL has them: a missing value (no type, no
recorded metric) satisfies no comparison; LIKE takes % and _ and matches
the whole value. A set-valued column (tensor dtypes and shapes, branches,
provenance functions) satisfies a comparison when one of its values does,
or with `all`, when every one does and there is at least one.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from git_mgit.dql import syntax as s
from git_mgit.dql import values as vals
from git_mgit.dql.catalog import Catalog
from git_mgit.dql.errors import QueryError
from git_mgit.lineage import traversal
from git_mgit.lineage.graph import VERSION

_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


@dataclass(frozen=True)
class Predicate:
    test: Callable[[str], bool]
    cost: int


def like(pattern: str) -> re.Pattern[str]:
    """SQL LIKE: % is any run of characters, _ any one character."""
    parts = ("." if ch == "_" else ".*" if ch == "%" else re.escape(ch) for ch in pattern)
    return re.compile("".join(parts), re.DOTALL)


def compile_cond(
    cond: s.Cond, catalog: Catalog, select: Callable[[s.Select], list[str]]
) -> Predicate:
    """The predicate for `cond`; `select` runs a subquery (for `descendant of (select ...)`)."""
    if isinstance(cond, s.And | s.Or):
        parts = [compile_cond(c, catalog, select) for c in cond.conds]
        parts.sort(key=lambda p: p.cost)  # cheap tests first: they short-circuit the rest
        tests = [p.test for p in parts]
        combine = all if isinstance(cond, s.And) else any
        return Predicate(lambda v: combine(t(v) for t in tests), max(p.cost for p in parts))
    if isinstance(cond, s.Not):
        inner = compile_cond(cond.cond, catalog, select)
        return Predicate(lambda v: not inner.test(v), inner.cost)
    if isinstance(cond, s.Exists):
        sel = cond.selector
        return Predicate(lambda v: bool(vals.selected(catalog, v, sel)), vals.MANIFESTS)
    if isinstance(cond, s.Related):
        members = related(cond, catalog, select)
        return Predicate(members.__contains__, vals.GRAPH)
    if isinstance(cond, s.DerivedBy):
        pattern = like(cond.pattern)
        col = vals.MODEL["function"]
        return Predicate(
            lambda v: any(pattern.fullmatch(f) for f in col.read(catalog, v)), vals.GRAPH
        )
    if isinstance(cond, s.At):
        held = catalog.held_at(cond.rev, cond.pos)
        return Predicate(held.__contains__, vals.GIT)
    return _compare(cond, catalog)


def related(cond: s.Related, catalog: Catalog, select: Callable[[s.Select], list[str]]) -> set[str]:
    """The versions standing in `cond.relation` to its target (a version or a subquery)."""
    if isinstance(cond.target, s.ModelRef):
        targets = [catalog.resolve(cond.target.ref, cond.target.pos)]
    else:
        targets = select(cond.target)
    g = catalog.graph
    out: set[str] = set()
    for t in targets:
        if t not in g:
            continue
        if cond.relation == "descendant":
            out.update(v for v in traversal.provenance(g, t) if v != t)
        elif cond.relation == "ancestor":
            out.update(g.ancestors(t))
        else:  # the whole chain of versions through t, earlier and later
            out.update(traversal.versions(g, t))
            out.update(g.ancestors(t, (VERSION,)))
    return out


def _compare(cond: s.Compare, catalog: Catalog) -> Predicate:
    col = vals.column(cond.expr, catalog)
    match = _matcher(cond, col)
    if col.many:
        if cond.every:
            return Predicate(lambda v: _every(col.read(catalog, v), match), col.cost)
        return Predicate(lambda v: any(match(x) for x in col.read(catalog, v)), col.cost)
    if cond.every:
        raise QueryError(f"`all` applies to sets of values; {cond.expr.text} has one", cond.pos)
    return Predicate(lambda v: match(col.read(catalog, v)), col.cost)


def _every(found: Any, match: Callable[[Any], bool]) -> bool:
    return bool(found) and all(match(x) for x in found)


def _matcher(cond: s.Compare, col: vals.Column) -> Callable[[Any], bool]:
    """value -> does it satisfy the comparison (None never does)."""
    op, literal, expr = cond.op, cond.value, cond.expr
    if op in ("like", "matches"):
        if col.kind not in (vals.TEXT, vals.ID):
            raise QueryError(f"{op} compares text; {expr.text} is a {col.kind}", cond.pos)
        pattern = like(literal.value) if op == "like" else re.compile(literal.value)  # type: ignore[arg-type]
        check = pattern.fullmatch if op == "like" else pattern.search
        return lambda x: x is not None and check(x) is not None
    if op == "in":
        wanted = {_convert(expr, col, s.Literal(item, literal.pos)) for item in literal.value}  # type: ignore[union-attr]
        return lambda x: x is not None and x in wanted
    value = _convert(expr, col, literal)
    if op in ("=", "!="):
        equal = _equality(col.kind, value)
        if op == "=":
            return lambda x: x is not None and equal(x)
        return lambda x: x is not None and not equal(x)
    if col.kind not in (vals.NUMBER, vals.TIME, vals.TEXT):
        raise QueryError(f"{expr.text} is a {col.kind}: compare it with = or !=", cond.pos)
    compare = _ORDER[op]
    return lambda x: x is not None and compare(x, value)


def _equality(kind: str, value: Any) -> Callable[[Any], bool]:
    if kind == vals.SHAPE:  # a pattern: [64, *] fits every [64, n]
        return lambda x: (
            len(x) == len(value)
            and all(w is s.WILDCARD or w == d for d, w in zip(x, value, strict=True))
        )
    if kind == vals.ID:  # an abbreviated id matches
        return lambda x: x.startswith(value)
    return lambda x: x == value


def _convert(expr: s.Expr, col: vals.Column, literal: s.Literal) -> Any:
    """The literal as a value of the column's kind; QueryError at the literal if it is not one."""
    value = literal.value
    if col.kind == vals.TIME:
        if not isinstance(value, str):
            raise QueryError(
                f"{expr.text} is a time: compare it with a date in quotes", literal.pos
            )
        return vals.timestamp(value, literal.pos)
    if col.kind == vals.NUMBER:
        if not vals.is_number(value):
            raise QueryError(f"{expr.text} is a number: compare it with a number", literal.pos)
        return value
    if col.kind == vals.SHAPE:
        if not isinstance(value, tuple) or not all(
            d is s.WILDCARD or (isinstance(d, int) and d >= 0) for d in value
        ):
            raise QueryError(
                f"{expr.text} is a shape: compare it with [64, 16] ([64, *] for any size)",
                literal.pos,
            )
        return value
    if not isinstance(value, str):
        raise QueryError(f"{expr.text} is text: compare it with a quoted string", literal.pos)
    return value
