"""The three-way decision, tensor by tensor: MGit's merge decision tree (paper Figure 2, A.4).

For every name in base, ours or theirs, with B, O and T what each version
holds under it (or nothing):

- O == T, or T == B: ours; O == B: theirs (changed on one side only, or the
  same way on both);
- otherwise a conflict, unless a rule names a strategy for it: ours, theirs
  or base keep that version (possibly "no tensor"); average and
  task-arithmetic compute one when every operand they need is there, with
  one dtype and shape, of a type that can hold computed values.

Header metadata merges key by key under the same rules (names
`__metadata__.KEY`); arithmetic does not apply to text.

Tensors merged automatically but changed on *both* sides may still not fit
together, when the layers they belong to depend on each other. Without an
architecture to inspect, every tensor of a model depends on every other,
unless mgit.toml declares independent groups for the model (glob patterns:
heads, adapters); changes on both sides within one group are a *possible
conflict*, recorded for the model's tests to decide. Nothing here reads an
object: equal chunk hashes are equal tensors.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from git_mgit.merge.strategy import Rules, Strategy
from git_mgit.merge.views import ModelView, TensorState
from git_mgit.tensors.numerics import can_compute

METADATA = "__metadata__."


@dataclass(frozen=True)
class Pick:
    """A tensor of the merged version and where its bytes come from."""

    name: str
    source: str  # "ours" | "theirs" | "base" | "computed"
    state: TensorState  # the kept version; for "computed", ours (dtype, shape, delta base)
    strategy: Strategy | None = None  # the rule that settled a conflict
    operands: tuple[TensorState | None, TensorState, TensorState] | None = None


@dataclass(frozen=True)
class Conflict:
    name: str
    ours: str  # how each side changed it: added | removed | changed
    theirs: str
    reason: str = ""  # why the strategy a rule named could not settle it


@dataclass
class Plan:
    tensors: list[Pick] = field(default_factory=list)  # in the merged file's order
    metadata: dict[str, str] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    settled: list[tuple[str, Strategy]] = field(default_factory=list)  # conflicts a rule settled
    # tensors each side changed, both within one dependency group: the possible conflict
    dependent: tuple[list[str], list[str]] | None = None


def _change(before: object, after: object) -> str:
    if before is None:
        return "added"
    return "removed" if after is None else "changed"


def choose(b: object, o: object, t: object) -> str | None:
    """ours | theirs, or None when the two sides changed it differently."""
    if o == t or t == b:
        return "ours"
    if o == b:
        return "theirs"
    return None


def _arithmetic_problem(
    s: Strategy, b: TensorState | None, o: TensorState | None, t: TensorState | None
) -> str:
    """Why `s` cannot compute this tensor, or '' if it can."""
    needed = (b, o, t) if s.needs_base else (o, t)
    if any(x is None for x in needed):
        return f"{s} needs the tensor in {'base, ours and theirs' if s.needs_base else 'ours and theirs'}"
    kinds = {(x.dtype, x.shape) for x in needed if x is not None}
    if len(kinds) > 1:
        return f"{s} needs one dtype and shape on every side"
    dtype = next(iter(kinds))[0]
    if not can_compute(dtype):
        return f"{s} cannot compute {dtype} values; use ours, theirs or base"
    return ""


def _group(name: str, independent: tuple[str, ...]) -> int:
    return next((i for i, p in enumerate(independent) if fnmatch.fnmatchcase(name, p)), -1)


def plan(
    base: ModelView,
    ours: ModelView,
    theirs: ModelView,
    rules: Rules,
    independent: tuple[str, ...] = (),
) -> Plan:
    result = Plan()
    names = list(dict.fromkeys([*ours.tensors, *theirs.tensors, *base.tensors]))
    changed: dict[str, set[str]] = {"ours": set(), "theirs": set()}
    for name in names:
        b, o, t = (v.tensors.get(name) for v in (base, ours, theirs))
        keys = tuple(None if x is None else x.key for x in (b, o, t))
        side = choose(*keys)
        if side is not None:
            kept = o if side == "ours" else t
            if keys[1] != keys[0]:
                changed["ours"].add(name)
            if keys[2] != keys[0]:
                changed["theirs"].add(name)
            if kept is not None:
                result.tensors.append(Pick(name, side, kept))
            continue
        s = rules.for_name(name)
        conflict = Conflict(name, _change(b, o), _change(b, t))
        if s is None:
            result.conflicts.append(conflict)
            if o is not None:  # the working file keeps ours meanwhile
                result.tensors.append(Pick(name, "ours", o))
            continue
        if not s.arithmetic:
            kept = s.keep(b, o, t)
            if kept is not None:
                result.tensors.append(Pick(name, s.name, kept, s))
            result.settled.append((name, s))
            continue
        problem = _arithmetic_problem(s, b, o, t)
        if problem:
            result.conflicts.append(Conflict(name, conflict.ours, conflict.theirs, problem))
            if o is not None:
                result.tensors.append(Pick(name, "ours", o))
            continue
        assert o is not None and t is not None
        result.tensors.append(Pick(name, "computed", o, s, (b, o, t)))
        result.settled.append((name, s))
    _merge_metadata(base, ours, theirs, rules, result)
    ours_changed, theirs_changed = changed["ours"], changed["theirs"]
    shared = {_group(n, independent) for n in ours_changed} & {
        _group(n, independent) for n in theirs_changed
    }
    if shared:
        result.dependent = (
            sorted(n for n in ours_changed if _group(n, independent) in shared),
            sorted(n for n in theirs_changed if _group(n, independent) in shared),
        )
    return result


def _merge_metadata(
    base: ModelView, ours: ModelView, theirs: ModelView, rules: Rules, result: Plan
) -> None:
    keys = list(dict.fromkeys([*ours.metadata, *theirs.metadata, *base.metadata]))
    for key in keys:
        b, o, t = (v.metadata.get(key) for v in (base, ours, theirs))
        side = choose(b, o, t)
        value = o if side == "ours" else t
        if side is None:
            name = METADATA + key
            s = rules.for_name(name)
            if s is None or s.arithmetic:
                reason = f"{s} does not apply to text; use ours, theirs or base" if s else ""
                result.conflicts.append(Conflict(name, _change(b, o), _change(b, t), reason))
                value = o
            else:
                value = s.keep(b, o, t)
                result.settled.append((name, s))
        if value is not None:
            result.metadata[key] = value
