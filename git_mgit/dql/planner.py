"""Running a scope (where, order by, limit) over the catalog: which versions, in what order.

The where clause's top-level conjuncts run cheapest first, each over the
rows the previous ones kept: graph predicates (names, paths, lineage) in
memory, then those that need one git call or the test records, and only
then those that read manifests, whose manifests are fetched in one batch
for just the rows still standing. So `m.name like "ft-%" and
m["body.*"].dtype = "F16"` reads the manifests of the fine-tunes only.
"""

from __future__ import annotations

from typing import Any

from git_mgit.dql import syntax as s
from git_mgit.dql import values as vals
from git_mgit.dql.catalog import Catalog
from git_mgit.dql.errors import QueryError
from git_mgit.dql.predicates import compile_cond


def select(catalog: Catalog, scope: s.Scope) -> list[str]:
    """The versions the scope picks, ordered and limited."""
    rows = catalog.versions()
    if scope.where is not None:
        rows = _filter(catalog, scope.where, rows)
    if scope.order:
        rows = _order(catalog, scope.order, rows)
    return rows if scope.limit is None else rows[: scope.limit]


def _filter(catalog: Catalog, where: s.Cond, rows: list[str]) -> list[str]:
    conjuncts = where.conds if isinstance(where, s.And) else (where,)

    def subquery(q: s.Select) -> list[str]:
        return select(catalog, q.scope)

    predicates = sorted(
        (compile_cond(c, catalog, subquery) for c in conjuncts), key=lambda p: p.cost
    )
    for p in predicates:
        if p.cost >= vals.MANIFESTS:
            catalog.prefetch(rows)
        rows = [v for v in rows if p.test(v)]
    return rows


def _order(catalog: Catalog, keys: tuple[s.OrderKey, ...], rows: list[str]) -> list[str]:
    """Sorted by each key in turn (stable sorts, last key first); missing values last."""
    columns = []
    for key in keys:
        col = vals.column(key.expr, catalog)
        if col.many:
            raise QueryError(
                f"{key.expr.text} is a set of values: order by one value", key.expr.pos
            )
        columns.append(col)
    if any(c.cost >= vals.MANIFESTS for c in columns):
        catalog.prefetch(rows)
    rows = list(rows)
    for key, col in reversed(list(zip(keys, columns, strict=True))):
        read = {v: col.read(catalog, v) for v in rows}

        def rank(v: str, read: dict[str, Any] = read, desc: bool = key.descending) -> tuple:
            x = read[v]
            return (x is None) != desc, x if x is not None else 0

        rows.sort(key=rank, reverse=key.descending)
    return rows
