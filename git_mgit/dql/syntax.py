"""The typed syntax tree of a query: what parse() returns and everything after it reads.

Every node that a later error may be about keeps the position of its token
(`pos`), so a planner or runtime error points at the query text as a parse
error does. Regular expressions are compiled once, here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from git_mgit.dql.errors import Pos

# A `*` in a list: any size in a shape pattern such as [64, *].
WILDCARD = None
Value = str | float | int | None | tuple["Value", ...]


@dataclass(frozen=True)
class Literal:
    value: Value
    pos: Pos


# -- expressions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Attr:
    """`m.NAME`, a model attribute, or `m.TEST.METRIC`, a recorded test metric."""

    var: str
    path: tuple[str, ...]
    text: str  # as written, for column headers
    pos: Pos


@dataclass(frozen=True)
class Selector:
    """`m["RE"]`: the tensors whose names the regular expression matches in full."""

    var: str
    regex: re.Pattern[str]
    pos: Pos  # of the pattern

    @property
    def text(self) -> str:
        return self.regex.pattern


@dataclass(frozen=True)
class TensorAttr:
    """`m["RE"].NAME`: an attribute of the selected tensors (count, dtype, shape, ...)."""

    selector: Selector
    name: str
    text: str
    pos: Pos


Expr = Attr | TensorAttr


# -- conditions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Compare:
    """EXPR OP VALUE; on a set of values (tensor dtypes, branches) it holds for one of
    them, or with `all` for every one (and at least one)."""

    expr: Expr
    op: str  # = != < <= > >= like matches in
    value: Literal
    every: bool
    pos: Pos  # of the operator


@dataclass(frozen=True)
class Exists:
    """A bare selector as a condition: the model holds a tensor it matches."""

    selector: Selector


@dataclass(frozen=True)
class ModelRef:
    """A model version named as `git mgit lineage` names them ("ft-a", "HEAD~2:x.safetensors")."""

    ref: str
    pos: Pos


@dataclass(frozen=True)
class Related:
    """`m descendant of T`, `m ancestor of T`, `m version of T`; T a model or a subquery."""

    var: str
    relation: str  # descendant | ancestor | version
    target: ModelRef | Select
    pos: Pos


@dataclass(frozen=True)
class DerivedBy:
    """`m derived by "PATTERN"`: a provenance edge into m names a matching function."""

    var: str
    pattern: str
    pos: Pos


@dataclass(frozen=True)
class At:
    """`m at "REV"`: the revision's tree holds m (its current version there)."""

    var: str
    rev: str
    pos: Pos


@dataclass(frozen=True)
class Not:
    cond: Cond


@dataclass(frozen=True)
class And:
    conds: tuple[Cond, ...]


@dataclass(frozen=True)
class Or:
    conds: tuple[Cond, ...]


Cond = Compare | Exists | Related | DerivedBy | At | Not | And | Or


# -- statements ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OrderKey:
    expr: Expr
    descending: bool


@dataclass(frozen=True)
class Scope:
    """Which versions a statement works on: its variable, where, order by and limit."""

    var: str
    where: Cond | None = None
    order: tuple[OrderKey, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class Projection:
    """One output column; `expr` None is the model itself (the default columns)."""

    expr: Expr | None
    label: str


@dataclass(frozen=True)
class Into:
    """Where a derived model is committed: a path template, and an optional name template."""

    path: str
    name: str | None
    pos: Pos
    name_pos: Pos | None


@dataclass(frozen=True)
class Select:
    scope: Scope
    projections: tuple[Projection, ...]
    text: str


@dataclass(frozen=True)
class Slice:
    """The selected tensors (`m2 = m1["RE"]`), or the natural-order range from the first
    match of `m2.input` to the last match of `m2.output` (ModelHub's sub-network slice)."""

    scope: Scope
    selectors: tuple[Selector, ...]
    start: Selector | None
    end: Selector | None
    into: Into
    text: str


@dataclass(frozen=True)
class Drop:
    selector: Selector


@dataclass(frozen=True)
class Rename:
    selector: Selector
    to: str  # with $1, $2 ... for the selector's groups
    pos: Pos


@dataclass(frozen=True)
class Cast:
    selector: Selector
    dtype: str  # a safetensors dtype name
    pos: Pos


@dataclass(frozen=True)
class Reinit:
    selector: Selector
    init: str  # zeros | ones | constant | uniform | normal
    args: tuple[float, ...]
    seed: int
    pos: Pos


@dataclass(frozen=True)
class Copy:
    model: ModelRef
    selector: Selector
    to: str | None
    pos: Pos | None


Mutation = Drop | Rename | Cast | Reinit | Copy


@dataclass(frozen=True)
class Construct:
    scope: Scope
    mutations: tuple[Mutation, ...]
    into: Into
    text: str


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Value, ...]
    pos: Pos


@dataclass(frozen=True)
class Keep:
    best: str  # top (largest first) | bottom (smallest first)
    count: int
    metric: Attr  # m.TEST.METRIC
    pos: Pos


@dataclass(frozen=True)
class Evaluate:
    var: str
    source: ModelRef | Select
    settings: tuple[tuple[str, Value], ...]
    axes: tuple[Axis, ...]
    search: str
    search_pos: Pos | None
    keep: Keep
    into: Into | None
    text: str


Query = Select | Slice | Construct | Evaluate


def leaves(node: Scope | Cond | Selector) -> Iterator[Expr | Selector | Related | DerivedBy | At]:
    """The expressions, selectors and lineage predicates under a scope or condition
    (not inside subqueries, which have their own variable)."""
    if isinstance(node, Scope):
        if node.where is not None:
            yield from leaves(node.where)
        for key in node.order:
            yield key.expr
    elif isinstance(node, And | Or):
        for c in node.conds:
            yield from leaves(c)
    elif isinstance(node, Not):
        yield from leaves(node.cond)
    elif isinstance(node, Compare):
        yield node.expr
    elif isinstance(node, Exists):
        yield node.selector
    else:
        yield node
