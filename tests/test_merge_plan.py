"""The three-way decision on random situations: every result follows the per-tensor rule."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from git_mgit.merge import threeway
from git_mgit.merge.strategy import Rules, Strategy
from git_mgit.merge.views import ModelView, TensorState
from git_mgit.modelfile import manifest as mf

NAMES = ["embed", "layer.0.w", "layer.1.w", "head.w", "head.b"]
VARIANTS = 3  # distinct contents a tensor may have


def state(name: str, variant: int, dtype: str = "F32") -> TensorState:
    h = bytes([variant]) * 32
    return TensorState(mf.Segment("tensor", 0, 16, (h,), name, dtype, (4,)), 1 << 26)


sides = st.dictionaries(st.sampled_from(NAMES), st.integers(0, VARIANTS - 1), max_size=len(NAMES))
metadata = st.dictionaries(st.sampled_from(["epoch", "lr"]), st.sampled_from(["1", "2"]))
strategy_names = st.sampled_from([None, "ours", "theirs", "base", "average", "task-arithmetic"])


def view(contents: dict[str, int], meta: dict[str, str], order: list[str]) -> ModelView:
    names = [n for n in order if n in contents]
    return ModelView(None, None, meta, {n: state(n, contents[n]) for n in names})


@given(
    b=sides, o=sides, t=sides, bm=metadata, om=metadata, tm=metadata,
    rule=strategy_names, order=st.permutations(NAMES), independent=st.booleans(),
)  # fmt: skip
@settings(max_examples=400, deadline=None)
def test_every_decision_follows_the_rule(b, o, t, bm, om, tm, rule, order, independent) -> None:
    base, ours, theirs = view(b, bm, order), view(o, om, order), view(t, tm, order[::-1])
    rules = Rules() if rule is None else Rules((("*", Strategy.parse(rule)),))
    groups = ("head.*",) if independent else ()
    p = threeway.plan(base, ours, theirs, rules, groups)

    got = {pick.name: pick for pick in p.tensors}
    conflicts = {c.name for c in p.conflicts}
    settled = {name for name, _ in p.settled}
    changed = {"ours": set(), "theirs": set()}
    for name in NAMES:
        vb, vo, vt = b.get(name), o.get(name), t.get(name)
        if vo in (vt, vb) or vt == vb:
            want = vo if vt in (vo, vb) else vt
            assert name not in conflicts and name not in settled
            assert (got[name].state.segment.hashes[0][0] if name in got else None) == want
            changed["ours"] |= {name} if vo != vb else set()
            changed["theirs"] |= {name} if vt != vb else set()
            continue
        # changed differently on both sides
        if rule is None:
            assert name in conflicts and name not in settled
            assert (name in got) == (vo is not None)  # ours meanwhile
        elif rule in ("ours", "theirs", "base"):
            want = {"ours": vo, "theirs": vt, "base": vb}[rule]
            assert name in settled and name not in conflicts
            assert (got[name].state.segment.hashes[0][0] if name in got else None) == want
        else:
            operands = (vb, vo, vt) if rule == "task-arithmetic" else (vo, vt)
            if all(v is not None for v in operands):
                assert name in settled and got[name].source == "computed"
            else:
                assert name in conflicts and got[name].source == "ours" if name in got else True
    # the merged file: ours' order, then what only theirs has, then what only base has
    kept = [pick.name for pick in p.tensors]
    ranks = {n: (0, list(ours.tensors).index(n)) for n in ours.tensors}
    ranks.update({n: (1, list(theirs.tensors).index(n)) for n in theirs.tensors if n not in ranks})
    ranks.update({n: (2, list(base.tensors).index(n)) for n in base.tensors if n not in ranks})
    assert kept == sorted(kept, key=ranks.__getitem__)

    # dependent changes on both sides: a possible conflict
    def group(n: str) -> str:
        return "head" if independent and n.startswith("head.") else "rest"

    shared = {group(n) for n in changed["ours"]} & {group(n) for n in changed["theirs"]}
    if shared:
        assert p.dependent == (
            sorted(n for n in changed["ours"] if group(n) in shared),
            sorted(n for n in changed["theirs"] if group(n) in shared),
        )
    else:
        assert p.dependent is None
    # metadata: key by key, the same rule; arithmetic does not apply to text
    for key in set(bm) | set(om) | set(tm):
        vb, vo, vt = bm.get(key), om.get(key), tm.get(key)
        name = threeway.METADATA + key
        if vo == vt or vt == vb:
            assert p.metadata.get(key) == vo and name not in conflicts
        elif vo == vb:
            assert p.metadata.get(key) == vt and name not in conflicts
        elif rule in ("ours", "theirs", "base"):
            assert p.metadata.get(key) == {"ours": vo, "theirs": vt, "base": vb}[rule]
        else:
            assert name in conflicts and p.metadata.get(key) == vo


def test_average_needs_one_dtype_and_a_computable_type() -> None:
    base = ModelView(None, None, {}, {"w": state("w", 0)})
    ours = ModelView(None, None, {}, {"w": state("w", 1)})
    for other, why in ((state("w", 2, "F16"), "one dtype"), (state("w", 2, "BOOL"), None)):
        theirs = ModelView(None, None, {}, {"w": other})
        rules = Rules((("*", Strategy.parse("average")),))
        (conflict,) = threeway.plan(base, ours, theirs, rules).conflicts
        assert why is None or why in conflict.reason
    bools = {"w": state("w", 1, "BOOL")}
    p = threeway.plan(
        ModelView(None, None, {}, {"w": state("w", 0, "BOOL")}),
        ModelView(None, None, {}, bools),
        ModelView(None, None, {}, {"w": state("w", 2, "BOOL")}),
        Rules((("*", Strategy.parse("average")),)),
    )
    assert "cannot compute BOOL" in p.conflicts[0].reason
