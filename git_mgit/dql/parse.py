"""Query text -> typed syntax tree, with every error pointing at its token.

Two steps: lark parses the text with the grammar (grammar.py), and a
transformer turns lark's tree into the dataclasses of syntax.py, checking
what a grammar cannot: that each statement uses its own variables, that
regular expressions compile, that `$N` in a rename names a group, that
dtypes, initialisers and path placeholders exist. Attribute names are
checked later, against the catalog (values.py), with the same positions.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from typing import Any

from git_mgit.dql import syntax as s
from git_mgit.dql.errors import Pos, QueryError
from git_mgit.dql.grammar import parser
from git_mgit.tensors import dtypes

# What an expected terminal is called in an error message (keywords and punctuation are
# shown as themselves).
_DESCRIBED = {
    "NAME": "a name",
    "STRING": "a quoted string",
    "INT": "a whole number",
    "SIGNED_NUMBER": "a number",
    "QUANTIFIER": "'all'",
    "STAR": "*",
    "$END": "the end of the query",
}
_COMPARISONS = {"=", "==", "!=", "<>", "<", "<=", ">", ">=", "like", "matches", "in"}
# initialiser -> how many numbers it takes
INITS = {"zeros": 0, "ones": 0, "constant": 1, "uniform": 2, "normal": 2}
_DTYPES = {name.lower(): name for name in dtypes.DTYPES}
_GROUP_REF = re.compile(r"\$(\d+)")
# A string, a gap (a comment or white space), or anything else.
_PIECES = re.compile(
    r"(\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*')|(--[^\n]*|\s+)|([^\"'\s-]+|-|[\"'])"
)


def canonical(text: str) -> str:
    """The query on one line: comments dropped, each gap outside strings one space.

    This is the text recorded on the provenance edge of every model a query makes.
    """
    pieces: list[str] = []
    gap = False
    for string_, blank, other in _PIECES.findall(text):
        if blank:
            gap = True
            continue
        if gap and pieces:
            pieces.append(" ")
        pieces.append(string_ or other)
        gap = False
    return "".join(pieces)


def parse(text: str) -> s.Query:
    """The syntax tree of `text`; QueryError (pointing at the token) if it is not a query."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

    try:
        tree = parser().parse(text)
    except UnexpectedToken as exc:
        raise _unexpected(exc.token, exc.accepts or exc.expected).within(text) from None
    except UnexpectedCharacters as exc:
        got = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        raise QueryError(
            f"unexpected character {got!r}; expected {_expected(_accepts(text[: exc.pos_in_stream]))}",
            Pos(exc.line, exc.column),
            text,
        ) from None
    except UnexpectedInput as exc:  # the end of the text, where more was needed
        raise QueryError(
            f"the query ends too early; expected {_expected(getattr(exc, 'expected', ()))}",
            Pos(getattr(exc, "line", 1), getattr(exc, "column", 1)),
            text,
        ) from None
    try:
        return _Builder(text).transform(tree)
    except QueryError as exc:
        raise exc.within(text) from None


def _accepts(prefix: str) -> set[str]:
    """The terminals that may follow `prefix` (exact, unlike the lexer's merged states)."""
    from lark.exceptions import LarkError

    interactive = parser().parse_interactive(prefix)
    try:
        interactive.exhaust_lexer()
    except LarkError:
        return set()
    return interactive.accepts()


def _unexpected(token: Any, expected: Iterable[str]) -> QueryError:
    if token.type == "$END":
        return QueryError(
            f"the query ends too early; expected {_expected(expected)}",
            Pos(token.line or 1, token.column or 1),
        )
    first = str(token.value).splitlines()[0] if str(token.value) else ""
    return QueryError(
        f"expected {_expected(expected)}, got {first!r}", Pos(token.line, token.column, len(first))
    )


def _expected(names: Iterable[str]) -> str:
    """'a name, 'where' or the end of the query' from lark's terminal names."""
    terminals = {t.name: t for t in parser().terminals}
    words: list[str] = []
    for name in sorted(set(names)):
        term = terminals.get(name)
        if name in _DESCRIBED:
            words.append(_DESCRIBED[name])
        elif term is not None and term.pattern.type == "str":
            words.append(f"'{term.pattern.value.lower()}'")
        else:
            words.append(name.lower())
    ops = [w for w in words if w.strip("'") in _COMPARISONS]
    if len(ops) > 3:  # one entry for the operators, first: the likeliest thing missing
        words = ["a comparison (=, !=, <, <=, >, >=, like, matches, in)"] + [
            w for w in words if w not in ops
        ]
    words = list(dict.fromkeys(words))
    if len(words) > 8:
        words = [*words[:8], "..."]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _pos(item: Any) -> Pos:
    """The position of a token, or the span of a rule (its first line) from lark's meta."""
    if hasattr(item, "end_column") and item.line is not None:
        width = (item.end_column - item.column) if item.end_line == item.line else 1
        return Pos(item.line, item.column, max(1, width))
    return Pos(1, 1)


def _string(token: Any) -> str:
    """A quoted string's text: backslash escapes only the quote and itself, so regular
    expressions are written as they are (`"body\\..*"`)."""
    body, quote = str(token)[1:-1], str(token)[0]
    return re.sub(r"\\([\\" + quote + "])", r"\1", body)


def _number(token: Any) -> float | int:
    text = str(token)
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)


class _Builder:
    """lark tree -> syntax.Query; raises QueryError at the offending token."""

    def __init__(self, text: str) -> None:
        self.text = text

    def transform(self, tree: Any) -> s.Query:
        return self._node(tree.children[0])

    # -- dispatch -------------------------------------------------------------------------

    def _node(self, tree: Any) -> Any:
        return getattr(self, f"_{tree.data}")(tree)

    def _span(self, tree: Any) -> Pos:
        return _pos(tree.meta)

    def _source(self, tree: Any) -> str:
        return self.text[tree.meta.start_pos : tree.meta.end_pos]

    # -- expressions ----------------------------------------------------------------------

    def _ref(self, tree: Any) -> s.Attr:
        var, *path = tree.children
        return s.Attr(
            str(var),
            tuple(_string(p) if p.type == "STRING" else str(p) for p in path),
            self._source(tree),
            self._span(tree),
        )

    def _selector(self, tree: Any) -> s.Selector:
        var, pattern = tree.children
        return s.Selector(str(var), self._regex(pattern), self._span(tree))

    def _regex(self, token: Any) -> re.Pattern[str]:
        try:
            return re.compile(_string(token))
        except re.error as exc:
            raise QueryError(f"bad regular expression: {exc}", _pos(token)) from None

    def _tensor_attr(self, tree: Any) -> s.TensorAttr:
        selector, name = tree.children
        sel = self._selector(selector)
        return s.TensorAttr(sel, str(name), self._source(tree), self._span(tree))

    def _expr(self, tree: Any) -> s.Expr:
        return self._node(tree)

    # -- values ---------------------------------------------------------------------------

    def _literal(self, item: Any) -> s.Literal:
        if hasattr(item, "data"):
            if item.data == "number":
                return s.Literal(_number(item.children[0]), _pos(item.children[0]))
            values = tuple(self._literal(child).value for child in item.children)
            return s.Literal(values, self._span(item))
        if item.type == "STAR":
            return s.Literal(s.WILDCARD, _pos(item))
        return s.Literal(_string(item), _pos(item))

    # -- conditions -----------------------------------------------------------------------

    def _cond(self, tree: Any) -> s.Cond:
        kind = getattr(tree, "data", None)
        if kind == "conjunction":
            return s.And(tuple(self._cond(c) for c in tree.children if hasattr(c, "data")))
        if kind == "disjunction":
            return s.Or(tuple(self._cond(c) for c in tree.children if hasattr(c, "data")))
        if kind == "negated":
            return s.Not(self._cond(tree.children[-1]))
        if kind == "exists":
            return s.Exists(self._selector(tree.children[0]))
        if kind == "lineage":
            return self._lineage(tree)
        return self._compare(tree)

    def _compare(self, tree: Any) -> s.Compare:
        items = list(tree.children)
        every = getattr(items[0], "type", None) == "QUANTIFIER"
        if every:
            items.pop(0)
        expr, op, value = items
        if hasattr(op, "data"):  # cmp_op
            token = op.children[0]
            name = {"==": "=", "<>": "!="}.get(str(token), str(token))
        else:
            token, name = op, str(op).lower()
        literal = self._literal(value)
        if name == "matches" and isinstance(literal.value, str):
            self._regex(value)
        if name == "in" and not isinstance(literal.value, tuple):
            raise QueryError('`in` takes a list: in ["a", "b"]', literal.pos)
        return s.Compare(self._expr(expr), name, literal, every, _pos(token))

    def _lineage(self, tree: Any) -> s.Cond:
        var, relation, *rest = tree.children
        pos = self._span(tree)
        kind = str(relation.children[0] if hasattr(relation, "data") else relation).lower()
        if kind == "derived":
            return s.DerivedBy(str(var), _string(rest[0]), pos)
        if kind == "at":
            return s.At(str(var), _string(rest[0]), pos)
        return s.Related(str(var), kind, self._target(rest[0]), pos)

    def _target(self, tree: Any) -> s.ModelRef | s.Select:
        if tree.data == "subquery":
            return self._select_q(tree.children[0])
        token = tree.children[0]
        return s.ModelRef(_string(token), _pos(token))

    # -- clauses --------------------------------------------------------------------------

    def _clauses(
        self, children: Iterable[Any], var: str, aliases: dict[str, s.Expr] | None = None
    ) -> s.Scope:
        """where, order by and limit; `order by LABEL` may name a select column."""
        where, order, limit = None, (), None
        for child in children:
            kind = getattr(child, "data", None)
            if kind == "where":
                where = self._cond(child.children[0])
            elif kind == "order":
                order = tuple(self._order_key(k, aliases or {}) for k in child.children)
            elif kind == "limit":
                limit = int(child.children[0])
        scope = s.Scope(var, where, order, limit)
        _check_vars(scope, {var})
        return scope

    def _order_key(self, tree: Any, aliases: dict[str, s.Expr]) -> s.OrderKey:
        expr_tree, direction = tree.children
        expr = self._expr(expr_tree)
        if isinstance(expr, s.Attr) and not expr.path and expr.var in aliases:
            expr = aliases[expr.var]
        descending = direction is not None and str(direction.children[0]).lower() == "desc"
        return s.OrderKey(expr, descending)

    def _into(self, tree: Any, allowed: Iterable[str]) -> s.Into:
        path, name = tree.children
        allowed = set(allowed)
        for token in (path, name):
            if token is not None:
                _check_placeholders(_string(token), allowed, _pos(token))
        return s.Into(
            _string(path),
            _string(name) if name is not None else None,
            _pos(path),
            _pos(name) if name is not None else None,
        )

    # -- statements -----------------------------------------------------------------------

    def _select_q(self, tree: Any) -> s.Select:
        projections = [c for c in tree.children if getattr(c, "data", None) == "projection"]
        first = projections[0].children[0]
        var_token = (first if first.data == "ref" else first.children[0]).children[0]
        var = str(var_token)
        cols = tuple(self._projection(p) for p in projections)
        aliases = {c.label: c.expr for c in cols if c.expr is not None}
        scope = self._clauses(tree.children[len(projections) :], var, aliases)
        for col in cols:
            if col.expr is not None:
                _check_expr(col.expr, {var})
        return s.Select(scope, cols, canonical(self._source(tree)))

    def _projection(self, tree: Any) -> s.Projection:
        expr_tree, label = tree.children
        expr = self._expr(expr_tree)
        if isinstance(expr, s.Attr) and not expr.path:
            if label is not None:
                raise QueryError(
                    "the model itself has several columns: it takes no label", expr.pos
                )
            return s.Projection(None, expr.var)
        text = (_string(label) if label.type == "STRING" else str(label)) if label else expr.text
        return s.Projection(expr, text)

    def _slice_q(self, tree: Any) -> s.Slice:
        target, source, *rest = tree.children
        parts = [c for c in rest if getattr(c, "data", None) == "slice_part"]
        scope = self._clauses(rest, str(source))
        selectors, ends = [], {}
        for part in parts:
            ref, selector = part.children
            lhs, sel = self._ref(ref), self._selector(selector)
            if lhs.var != str(target) or lhs.path not in ((), ("input",), ("output",)):
                raise QueryError(
                    f'write {target} = {source}["RE"], or {target}.input = ... and '
                    f"{target}.output = ...",
                    lhs.pos,
                )
            _check_vars(sel, {str(source)})
            if lhs.path:
                ends[lhs.path[0]] = sel
            else:
                selectors.append(sel)
        if ends and (selectors or set(ends) != {"input", "output"}):
            raise QueryError(
                f"a range slice needs both {target}.input and {target}.output, and nothing else",
                self._span(parts[0]),
            )
        into = self._into(rest[-1], _PLACEHOLDERS)
        return s.Slice(
            scope,
            tuple(selectors),
            ends.get("input"),
            ends.get("output"),
            into,
            canonical(self.text),
        )

    def _construct_q(self, tree: Any) -> s.Construct:
        target, source, *rest = tree.children
        scope = self._clauses(rest, str(source))
        mutations = tuple(
            self._mutation(c)
            for c in rest
            if getattr(c, "data", None) in ("drop", "rename", "cast", "reinit", "copy")
        )
        for m in mutations:
            if not isinstance(m, s.Copy):
                _check_vars(m.selector, {str(source), str(target)})
        return s.Construct(
            scope, mutations, self._into(rest[-1], _PLACEHOLDERS), canonical(self.text)
        )

    def _mutation(self, tree: Any) -> s.Mutation:
        kind, items = tree.data, tree.children
        if kind == "drop":
            return s.Drop(self._selector(items[0]))
        if kind == "rename":
            sel = self._selector(items[0])
            to = _string(items[1])
            _check_groups(to, sel.regex, _pos(items[1]))
            return s.Rename(sel, to, _pos(items[1]))
        if kind == "cast":
            sel, token = self._selector(items[0]), items[1]
            name = _string(token) if token.type == "STRING" else str(token)
            dtype = _DTYPES.get(name.lower())
            if dtype is None:
                raise QueryError(
                    f"unknown dtype {name!r}; use a safetensors dtype ({', '.join(dtypes.DTYPES)})",
                    _pos(token),
                )
            return s.Cast(sel, dtype, _pos(token))
        if kind == "reinit":
            sel, init, *extra = items
            args = next((e for e in extra if e.data == "init_args"), None)
            seed = next((e for e in extra if e.data == "seed"), None)
            numbers = tuple(float(_number(n.children[0])) for n in (args.children if args else ()))
            name = str(init).lower()
            if name not in INITS:
                raise QueryError(
                    f"unknown initialiser {str(init)!r}; use {', '.join(f'{k}()' for k in INITS)}",
                    _pos(init),
                )
            if len(numbers) != INITS[name]:
                raise QueryError(
                    f"{name}() takes {INITS[name]} number(s), got {len(numbers)}", _pos(init)
                )
            return s.Reinit(
                self._selector(sel), name, numbers, int(seed.children[0]) if seed else 0, _pos(init)
            )
        model, pattern, to = items
        regex = self._regex(pattern)
        if to is not None:
            _check_groups(_string(to), regex, _pos(to))
        return s.Copy(
            s.ModelRef(_string(model), _pos(model)),
            s.Selector("", regex, _pos(pattern)),
            _string(to) if to is not None else None,
            _pos(to) if to is not None else None,
        )

    def _evaluate_q(self, tree: Any) -> s.Evaluate:
        var, source, settings, vary, keep, into = tree.children
        fixed = tuple(
            (str(k), self._literal(v).value)
            for k, v in (c.children for c in (settings.children if settings else ()))
        )
        *axes_trees, search = vary.children
        axes = tuple(
            s.Axis(str(name), self._literal(values).value, _pos(name))  # type: ignore[arg-type]
            for name, values in (a.children for a in axes_trees)
        )
        names = [k for k, _ in fixed] + [a.name for a in axes]
        for a in axes:
            if names.count(a.name) > 1:
                raise QueryError(f"{a.name} is set more than once", a.pos)
            if not a.values:
                raise QueryError(f"vary {a.name} over at least one value", a.pos)
        best, count, metric_tree = keep.children
        metric = self._ref(metric_tree)
        if str(best).lower() not in ("top", "bottom"):
            raise QueryError("keep top(N, METRIC) or bottom(N, METRIC)", _pos(best))
        if metric.var != str(var) or len(metric.path) != 2:
            raise QueryError(f"rank by a test metric: {var}.TEST.METRIC", metric.pos)
        return s.Evaluate(
            str(var),
            self._target(source),
            fixed,
            axes,
            str(search) if search is not None else "grid",
            _pos(search) if search is not None else None,
            s.Keep(str(best).lower(), int(count), metric, _pos(best)),
            self._into(into, _PLACEHOLDERS | set(names)) if into is not None else None,
            canonical(self.text),
        )


# Placeholders a path or name template may use, for each model a query makes.
_PLACEHOLDERS = {"name", "stem", "id", "dir"}


def _check_placeholders(template: str, allowed: set[str], pos: Pos) -> None:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise QueryError(f"bad path template: {exc} (write a literal brace as {{{{)", pos) from None
    for field in fields:
        if field not in allowed:
            raise QueryError(
                f"unknown placeholder {{{field}}}; use {', '.join(f'{{{a}}}' for a in sorted(allowed))}",
                pos,
            )


def _check_groups(replacement: str, regex: re.Pattern[str], pos: Pos) -> None:
    for m in _GROUP_REF.finditer(replacement):
        if int(m.group(1)) > regex.groups:
            raise QueryError(
                f"${m.group(1)} names a group the pattern {regex.pattern!r} does not have "
                f"(it has {regex.groups})",
                pos,
            )


def _check_vars(node: Any, allowed: set[str]) -> None:
    for item in s.leaves(node):
        _check_expr(item, allowed)


def _check_expr(item: Any, allowed: set[str]) -> None:
    var, pos = (
        (item.selector.var, item.pos) if isinstance(item, s.TensorAttr) else (item.var, item.pos)
    )
    if var not in allowed:
        names = " or ".join(sorted(allowed))
        raise QueryError(f"unknown variable {var!r}; this clause's model is {names}", pos)
