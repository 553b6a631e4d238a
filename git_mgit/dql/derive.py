"""Planning `slice` and `construct`: what each derived model holds, where from, where it goes.

A plan is made from manifests alone (tensor names, dtypes, shapes), so the
whole query is checked before any tensor is read or anything committed: a
selector that matches nothing, a rename onto an existing tensor, a path that
two models would share or that git-mgit does not track are errors, pointing
at the query. `--dry-run` prints the plan; runtime/deriving.py carries it
out (reading tensors needs torch).
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from git_mgit.dql import syntax as s
from git_mgit.dql.catalog import Catalog
from git_mgit.dql.errors import Pos, QueryError
from git_mgit.lineage.diff import natural_key
from git_mgit.modelfile.tracked import filters
from git_mgit.tensors import dtypes

_GROUP = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class Part:
    """One tensor of a derived model: its name, dtype and shape there, and where it comes from."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    origin: str | None  # the version it is read from; None when freshly initialised
    origin_name: str | None  # its name in that version
    init: s.Reinit | None = None


@dataclass(frozen=True)
class Placement:
    """Where one derived model is committed, and the name it gets."""

    path: str
    name: str | None


@dataclass(frozen=True)
class Derivation:
    source: str  # the version it is derived from (also its delta base)
    parents: tuple[str, ...]  # provenance parents: the source, then models copied from
    place: Placement
    parts: tuple[Part, ...]


def plan(catalog: Catalog, query: s.Slice | s.Construct, sources: list[str]) -> list[Derivation]:
    """One derivation per source version, checked whole."""
    if not sources:
        raise QueryError("no model version matches the where clause: nothing to derive")
    for m in query.mutations if isinstance(query, s.Construct) else ():
        if isinstance(m, s.Copy):  # an unknown model is the first thing to hear about
            catalog.resolve(m.model.ref, m.model.pos)
    places = place(catalog, query.into, [(v, {}) for v in sources])
    out = []
    for v, where in zip(sources, places, strict=True):
        start = {
            name: Part(name, t.dtype, t.shape, v, name) for name, t in catalog.tensors(v).items()
        }
        if not start:
            raise QueryError(f"{catalog.label(v)} has no tensors here (is it a safetensors model?)")
        parents = [v]
        if isinstance(query, s.Slice):
            parts = _slice(catalog, query, v, start)
        else:
            parts = dict(start)
            for m in query.mutations:
                parts = _mutate(catalog, m, v, parts, parents)
        out.append(Derivation(v, tuple(parents), where, tuple(parts.values())))
    return out


# -- where derived models go ---------------------------------------------------------------


def place(
    catalog: Catalog,
    into: s.Into,
    made: list[tuple[str, Mapping[str, object]]],
    unique: bool = True,
) -> list[Placement]:
    """Each model's path and name from the templates: its source's {name}, {stem}, {dir}
    and {id}, plus `extra` values (an evaluated configuration's settings). `unique`:
    every model is committed, so no two may share a path or a name."""
    out = []
    for source, extra in made:
        node = catalog.node(source)
        path = PurePosixPath(node.path or "model.safetensors")
        fields = {
            "name": catalog.name(source) or path.name.partition(".")[0],
            "stem": path.name.partition(".")[0],
            "dir": str(path.parent) if str(path.parent) != "." else "",
            "id": source[:10],
            **{k: _field(v) for k, v in extra.items()},
        }
        target = posixpath.normpath(into.path.format_map(fields)).lstrip("/")
        if target.startswith("../") or target == "..":
            raise QueryError(f"{target} is outside the repository", into.pos)
        name = into.name.format_map(fields) if into.name is not None else None
        out.append(Placement(target, name))
    names = [p.name for p in out if p.name is not None]
    if unique:
        _distinct([p.path for p in out], "path", into.pos)
        _distinct(names, "name", into.name_pos or into.pos)
    for name in names:
        if catalog.graph.named(name) or name in catalog.lin.config.models:
            raise QueryError(f"the name {name!r} is taken; pick another", into.name_pos)
    paths = sorted({p.path for p in out})
    untracked = [p for p, f in filters(catalog.repo, paths).items() if f != "mgit"]
    if untracked:
        raise QueryError(
            f"{untracked[0]} is not tracked by git-mgit; name a .safetensors path, or run "
            f"`git mgit track` for it",
            into.pos,
        )
    changed = catalog.repo.git("status", "--porcelain", "--", *paths)
    if changed:
        raise QueryError(
            f"{changed.splitlines()[0][3:]} has uncommitted changes; commit or stash them first",
            into.pos,
        )
    return out


def _field(value: object) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


def _distinct(values: list[str], what: str, pos: Pos) -> None:
    if repeated := _repeated(values):
        value, n = repeated
        raise QueryError(
            f"{n} models would get the {what} {value!r}: put {{name}} or {{id}} in it, or "
            'narrow the where clause (limit 1, at "HEAD")',
            pos,
        )


def _repeated(values: list[str]) -> tuple[str, int] | None:
    """The first value given more than once, and how many times."""
    return next(((v, n) for v, n in Counter(values).items() if n > 1), None)


# -- slice ---------------------------------------------------------------------------------


def _slice(catalog: Catalog, query: s.Slice, v: str, start: dict[str, Part]) -> dict[str, Part]:
    if query.start is not None and query.end is not None:
        order = sorted(start, key=natural_key)
        first = _matching(catalog, query.start, v, order)[0]
        last = _matching(catalog, query.end, v, order)[-1]
        lo, hi = order.index(first), order.index(last)
        if hi < lo:
            raise QueryError(
                f"in {catalog.label(v)}, the last output tensor {last!r} comes before the first "
                f"input tensor {first!r} (layer order is natural name order)",
                query.end.pos,
            )
        return {name: start[name] for name in order[lo : hi + 1]}
    keep: dict[str, None] = {}
    for sel in query.selectors:
        keep.update(dict.fromkeys(_matching(catalog, sel, v, start)))
    return {name: start[name] for name in start if name in keep}


# -- construct -----------------------------------------------------------------------------


def _mutate(
    catalog: Catalog, m: s.Mutation, v: str, parts: dict[str, Part], parents: list[str]
) -> dict[str, Part]:
    """The tensors after one mutation (applied to the model as the previous ones left it)."""
    if isinstance(m, s.Copy):
        other = catalog.resolve(m.model.ref, m.model.pos)
        theirs = catalog.tensors(other)
        names = _matching(catalog, m.selector, other, theirs)
        renamed = _renamed(m.selector, names, m.to, m.pos)
        out = dict(parts)
        for old, new in renamed.items():
            t = theirs[old]
            out[new] = Part(new, t.dtype, t.shape, other, old)
        if other not in parents:
            parents.append(other)
        return out
    names = _matching(catalog, m.selector, v, parts)
    if isinstance(m, s.Drop):
        return {k: p for k, p in parts.items() if k not in names}
    if isinstance(m, s.Rename):
        renamed = _renamed(m.selector, names, m.to, m.pos)
        kept = {k: p for k, p in parts.items() if k not in renamed}
        clash = sorted(set(kept) & set(renamed.values()))
        if clash:
            raise QueryError(f"renaming would overwrite the tensor {clash[0]!r}", m.pos)
        out = dict(kept)
        for old, new in renamed.items():
            out[new] = Part(new, *_rest(parts[old]))
        return out
    if isinstance(m, s.Cast):
        if m.dtype not in dtypes.TORCH:
            raise QueryError(f"tensors cannot be cast to {m.dtype} (torch has no such type)", m.pos)
        return {
            k: Part(k, m.dtype, p.shape, p.origin, p.origin_name, p.init) if k in names else p
            for k, p in parts.items()
        }
    for name in names:  # Reinit
        if dtypes.DTYPES[parts[name].dtype].kind != "float":
            raise QueryError(
                f"{name!r} is {parts[name].dtype}: only floating-point tensors are re-initialised",
                m.pos,
            )
    return {
        k: Part(k, p.dtype, p.shape, None, None, m) if k in names else p for k, p in parts.items()
    }


def _rest(p: Part) -> tuple:
    return p.dtype, p.shape, p.origin, p.origin_name, p.init


def _matching(catalog: Catalog, sel: s.Selector, v: str, names: Iterable[str]) -> list[str]:
    """The names the selector matches in full, in the order given; QueryError if none."""
    names = list(names)
    found = [n for n in names if sel.regex.fullmatch(n)]
    if not found:
        shown = ", ".join(sorted(names, key=natural_key)[:8]) + (", ..." if len(names) > 8 else "")
        raise QueryError(
            f"[{sel.text!r}] matches no tensor of {catalog.label(v)} (its tensors: {shown or 'none'})",
            sel.pos,
        )
    return found


def _renamed(sel: s.Selector, names: list[str], to: str | None, pos: Pos | None) -> dict[str, str]:
    """old name -> new name; `to` may use $1, $2 ... for the selector's groups."""
    if to is None:
        return {n: n for n in names}
    template = _GROUP.sub(r"\\g<\1>", to.replace("\\", "\\\\"))
    out = {n: sel.regex.fullmatch(n).expand(template) for n in names}  # type: ignore[union-attr]
    if repeated := _repeated(list(out.values())):
        new, n = repeated
        raise QueryError(
            f"{n} tensors would be named {new!r}: use $1, $2 ... for the parts that differ", pos
        )
    return out
