"""Running a parsed query: select here; slice, construct and evaluate through the runtime.

`select` reads the catalog only (no torch, no repository code). `slice` and
`construct` are planned here from manifests (derive.py) and carried out by
git_mgit.runtime.deriving, which reads tensors with torch; `evaluate` runs
creation functions and tests in worker processes (git_mgit.runtime.enumerating).
With `dry_run`, the last three check and show what they would do, and
nothing is run or committed.
"""

from __future__ import annotations

from git_mgit.dql import derive, planner
from git_mgit.dql import syntax as s
from git_mgit.dql import values as vals
from git_mgit.dql.catalog import Catalog
from git_mgit.dql.errors import QueryError
from git_mgit.dql.output import Result
from git_mgit.dql.parse import parse
from git_mgit.lineage.api import Lineage

# The columns `select m` shows for the model itself.
MODEL_COLUMNS = ("name", "id", "path", "type", "time")


def run(
    text: str,
    lineage: Lineage | None = None,
    jobs: int | None = 1,
    dry_run: bool = False,
    cluster: str | None = None,
) -> Result:
    """Parse and run one query against the repository around the current directory
    (or `lineage`'s); QueryError, pointing at the query text, when it cannot."""
    query = parse(text)
    lin = lineage or Lineage()
    try:
        return _run(query, Catalog(lin), jobs, dry_run, cluster)
    except QueryError as exc:
        raise exc.within(text) from None


def _run(
    query: s.Query, catalog: Catalog, jobs: int | None, dry_run: bool, cluster: str | None
) -> Result:
    if isinstance(query, s.Select):
        return _select(catalog, query)
    if isinstance(query, s.Evaluate):
        from git_mgit.runtime.enumerating import evaluate

        return evaluate(catalog, query, jobs, dry_run, cluster)
    what = "slice" if isinstance(query, s.Slice) else "construct"
    plans = derive.plan(catalog, query, planner.select(catalog, query.scope))
    columns = [("source", vals.TEXT), ("path", vals.TEXT), ("name", vals.TEXT)]
    columns += [("tensors", vals.NUMBER), ("version", vals.ID), ("commit", vals.ID)]
    rows = [
        {
            "source": catalog.label(d.source),
            "path": d.place.path,
            "name": d.place.name,
            "tensors": len(d.parts),
        }
        for d in plans
    ]
    if dry_run:
        return Result(what, columns, rows, ["dry run: nothing was committed"])
    from git_mgit.runtime.deriving import commit

    for row, saved in zip(rows, commit(catalog.lin, plans, query.text, what), strict=True):
        row.update(version=saved.version, commit=saved.commit)
    return Result(what, columns, rows)


def _select(catalog: Catalog, query: s.Select) -> Result:
    rows = planner.select(catalog, query.scope)
    columns: list[tuple[str, str]] = []
    readers = []
    for p in query.projections:
        if p.expr is None:
            for name in MODEL_COLUMNS:
                col = vals.MODEL[name]
                columns.append((name, col.kind))
                readers.append(col)
        else:
            col = vals.column(p.expr, catalog)
            columns.append((p.label, col.kind))
            readers.append(col)
    if any(c.cost >= vals.MANIFESTS for c in readers):
        catalog.prefetch(rows)
    labels = [label for label, _ in columns]
    out = [
        {label: col.read(catalog, v) for label, col in zip(labels, readers, strict=True)}
        for v in rows
    ]
    return Result("select", columns, out, _unmatched(catalog, query))


def _unmatched(catalog: Catalog, query: s.Select) -> list[str]:
    """A note for each selector that matched no tensor in any version the query read:
    usually a typo, which would otherwise just make the answer empty."""
    read = catalog.read()
    if not read:
        return []
    names = sorted({n for ts in read.values() for n in ts})
    notes = []
    for sel in _selectors(query):
        if not any(sel.regex.fullmatch(n) for n in names):
            shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            notes.append(
                f'{sel.var}["{sel.text}"] matches no tensor in the {len(read)} version(s) read '
                f"(their tensors: {shown})"
            )
    return notes


def _selectors(query: s.Select) -> list[s.Selector]:
    items = [*s.leaves(query.scope), *(p.expr for p in query.projections if p.expr is not None)]
    found: dict[str, s.Selector] = {}
    for item in items:
        sel = item.selector if isinstance(item, s.TensorAttr) else item
        if isinstance(sel, s.Selector):
            found.setdefault(sel.regex.pattern, sel)
    return list(found.values())
