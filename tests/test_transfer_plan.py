"""The transfer layer's pure parts: version ref names, closures, and the layout decision."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from git_mgit import config
from git_mgit.gitcmd import find_repo
from git_mgit.transfer.layout import Candidates, Estimates, Stored, decide
from git_mgit.transfer.local import local_git_dir
from git_mgit.transfer.versions import Published, VersionRef, parse
from tests.gitsandbox import init_repo, run_git

A, B, C, D, E = ("a" * 40, "b" * 40, "c" * 40, "d" * 40, "e" * 40)


def published(*names: str) -> Published:
    return Published.from_listing({f"refs/mgit/v/{n}": "0" * 40 for n in names})


def test_ref_names_spell_the_version_and_its_bases() -> None:
    assert parse(VersionRef(A, ()).name) == VersionRef(A, ())
    assert parse(VersionRef(A, (B,)).name, "1" * 40) == VersionRef(A, (B,), "1" * 40)
    assert parse(f"refs/mgit/v/{A}.{B}.{C}").bases == (B, C)
    for bad in (
        f"refs/mgit/v/{A}.",
        "refs/mgit/v/xyz",
        f"refs/mgit/objects/{A}",
        f"refs/mgit/v/{A}.{B}x",
    ):
        assert parse(bad) is None


def test_closure_follows_bases_and_stops_at_what_is_here() -> None:
    refs = published(A, f"{B}.{A}", f"{C}.{B}", D)
    assert [r.version for r in refs.closure([C], lambda v: False)] == [A, B, C]
    assert [r.version for r in refs.closure([C], lambda v: v == B)] == [C]  # B complete here
    assert refs.closure(["e" * 40], lambda v: False) == []  # not published: nothing to fetch
    assert refs.hanging(A) == 2 and refs.hanging(D) == 0


def test_the_ref_with_fewest_bases_is_taken() -> None:
    refs = published(f"{A}.{B}", A)
    assert refs.best(A) == VersionRef(A, (), "0" * 40)


def candidates(n: int, tips: set[str] | None = None) -> tuple[Candidates, list[str]]:
    """A linear series of n versions v0 .. v(n-1), each may lean on the next."""
    names = [f"{i:040x}" for i in range(n)]
    cands = Candidates({}, names, tips if tips is not None else {names[-1]})
    cands.children = {names[i]: [names[i + 1]] for i in range(n - 1)}
    return cands, names


def estimates(names: list[str], whole: float, delta: float, raw: int = 100) -> Estimates:
    est = Estimates()
    for v in names:
        est.raw[v], est.whole[v] = raw, whole
    for a, b in itertools.pairwise(names):
        est.delta[a, b] = delta
    return est


def test_the_tip_is_whole_and_older_versions_chain_within_the_budget() -> None:
    cands, v = candidates(6)
    plan = decide(cands, estimates(v, whole=65, delta=25), budget=2.0, max_levels=8)
    bases = [plan.choices[x].base for x in v]
    # 65 + 25k <= 200: chains of up to 5 deltas, so v0 leans on v1 ... v4 on the tip
    assert bases == [v[1], v[2], v[3], v[4], v[5], None]
    assert all(plan.choices[x].cost <= 200 for x in v)
    assert plan.push_order()[0] == v[5]  # bases are pushed before what leans on them


def test_a_whole_version_starts_a_new_segment_when_the_budget_is_spent() -> None:
    cands, v = candidates(6)
    plan = decide(cands, estimates(v, whole=83, delta=62), budget=2.0, max_levels=8)
    # 83 + 62 fits in 200, 83 + 62 + 62 does not: every other version is whole
    assert [plan.choices[x].base for x in v] == [v[1], None, v[3], None, v[5], None]
    assert [plan.choices[x].cost for x in v] == [145, 83, 145, 83, 145, 83]


def test_deltas_that_do_not_pay_stay_whole_and_chains_stay_under_the_depth_cap() -> None:
    cands, v = candidates(4)
    plan = decide(cands, estimates(v, whole=83, delta=80), budget=8.0, max_levels=8)
    assert all(plan.choices[x].base is None for x in v)  # saves under 10%
    cands, v = candidates(6)
    plan = decide(cands, estimates(v, whole=60, delta=1), budget=8.0, max_levels=2)
    assert max(plan.choices[x].levels for x in v) == 2


def test_a_remote_tip_is_republished_only_when_what_hangs_on_it_fits() -> None:
    cands, v = candidates(3, tips={"t" * 40})
    old, new = v[0], v[1]
    cands.publish = v[1:]
    cands.tips = {v[2]}
    cands.rotations = {old: 1}  # one version already chained onto the old tip
    cands.replaced = {old: VersionRef(old, ()).name}
    plan = decide(cands, estimates(v, whole=65, delta=25), budget=2.0, max_levels=8)
    assert plan.choices[old].base == new and plan.replaced == {old: VersionRef(old, ()).name}
    cands.rotations = {old: 5}  # five: 5 x 25 + 25 + 90 > 200
    plan = decide(cands, estimates(v, whole=65, delta=25), budget=2.0, max_levels=8)
    assert old not in plan.choices and plan.replaced == {}


def as_stored(cands: Candidates, names: list[str], own: float, whole: set[int]) -> None:
    """`git add` stored each version as deltas of the one before (`own` bytes), or whole."""
    cands.parents = {names[i + 1]: names[i] for i in range(len(names) - 1)}
    cands.stored = {
        v: Stored(None, 0.0) if i in whole else Stored(names[i - 1], own)
        for i, v in enumerate(names)
    }


def test_a_history_goes_out_as_stored_and_a_version_over_the_budget_whole() -> None:
    """fp32 from scratch: deltas barely pay, two in a row spend the budget."""
    cands, v = candidates(6)
    as_stored(cands, v, own=47, whole={0})
    plan = decide(cands, estimates(v, whole=54, delta=47, raw=65), budget=2.0, max_levels=8)
    c = [plan.choices[x] for x in v]
    # v2 and v4 would fetch 148 > 130: v2 is whole, so v3 leans on it as stored; v4 is
    # within reach of the tip, as a delta of it (encoded, like the tip)
    assert [x.base for x in c] == [None, v[0], None, v[2], v[5], None]
    assert [x.stored for x in c] == [False, True, False, True, False, False]
    assert all(x.cost <= 130 for x in c) and plan.push_order().index(v[2]) < 3


def test_a_version_over_the_budget_leans_on_the_next_whole_one_and_nothing_loops() -> None:
    """bf16 fine-tune: `git add` started over at its depth cap (v9); the budget runs out
    two versions before, which lean on v9 in turn rather than on what leans on them."""
    cands, v = candidates(12)
    as_stored(cands, v, own=13, whole={0, 9})
    plan = decide(cands, estimates(v, whole=44, delta=13, raw=67), budget=2.0, max_levels=8)
    c = [plan.choices[x] for x in v]
    assert [x.base for x in c] == [None, *v[0:6], v[8], v[9], None, v[9], None]
    assert [i for i, x in enumerate(c) if x.stored] == [1, 2, 3, 4, 5, 6, 10]
    assert all(x.cost <= 134 and x.levels <= 8 for x in c)
    order = plan.push_order()
    assert all(order.index(c[i].base) < order.index(x) for i, x in enumerate(v) if c[i].base)


def test_the_old_tip_stays_whole_when_the_new_versions_lean_on_it_as_stored() -> None:
    cands, v = candidates(4)
    old = v[0]
    cands.publish, cands.tips = v[1:], {v[3]}
    cands.rotations, cands.replaced = {old: 0}, {old: VersionRef(old, ()).name}
    as_stored(cands, v, own=10, whole=set())
    plan = decide(cands, estimates(v, whole=60, delta=10), budget=2.0, max_levels=8)
    assert plan.choices[v[1]].base == old and plan.choices[v[1]].stored
    assert old not in plan.choices and plan.replaced == {}  # v1 leans on it: it stays whole
    cands.publish, cands.tips, cands.stored = [v[1]], {v[1]}, {}  # one new tip, whole
    plan = decide(cands, estimates(v, whole=60, delta=10), budget=2.0, max_levels=8)
    assert plan.choices[old].base == v[1] and plan.replaced == {old: VersionRef(old, ()).name}


def test_a_tip_leans_on_the_remotes_whole_tip_only_where_the_store_keeps_it() -> None:
    """One more bf16 fine-tune step on Git LFS: the delta `git add` stored goes out as it is,
    and a fresh clone fetches 13 + 44 = 57 of the file's 67; fp32 from scratch stays whole."""
    cands, v = candidates(2)
    cands.publish = [v[1]]
    as_stored(cands, v, own=13, whole={0})
    cands.lean_tips = True
    plan = decide(cands, estimates(v, whole=44, delta=13, raw=67), budget=2.0, max_levels=8)
    tip = plan.choices[v[1]]
    assert (tip.base, tip.stored, tip.cost, tip.levels) == (v[0], True, 57, 1)
    assert list(plan.choices) == [v[1]] and plan.replaced == {}
    cands.lean_tips = False  # the refs store re-publishes the old tip instead
    assert decide(cands, estimates(v, 44, 13, 67), 2.0, 8).choices[v[1]].base is None
    cands.lean_tips = True
    as_stored(cands, v, own=47, whole={0})  # 47 + 54 > 0.9 x 65
    assert decide(cands, estimates(v, 54, 47, 65), 2.0, 8).choices[v[1]].base is None
    as_stored(cands, v, own=13, whole={0})
    assert decide(cands, estimates(v, 44, 13, 67), 2.0, max_levels=0).choices[v[1]].base is None


def test_a_remote_holds_a_tip_whole_or_where_tips_lean_as_one_delta_of_a_whole_parent() -> None:
    from git_mgit.transfer.push import _held_as_tip

    refs = published(A, f"{B}.{A}", f"{C}.{B}", f"{D}.{A}.{B}", f"{E}.{A}")
    edges = {(A, B), (B, C), (A, D)}  # (older, newer); E is older than A
    assert _held_as_tip(refs, A, set()) and _held_as_tip(refs, A, edges)
    assert not _held_as_tip(refs, B, set()) and _held_as_tip(refs, B, edges)
    assert not _held_as_tip(refs, C, edges)  # its base is a delta itself
    assert not _held_as_tip(refs, D, edges)  # two bases
    assert not _held_as_tip(refs, E, edges)  # a delta of a newer version: a tag gone back
    assert not _held_as_tip(refs, "f" * 40, edges)
    orphan = published(f"{B}.{A}")  # a remote that lost the base's ref
    assert not _held_as_tip(orphan, B, edges)


def test_sizes_and_limits_read_from_git_config(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "r")
    run_git("config", "mgit.maxPushSize", "1.5g", cwd=repo)
    run_git("config", "mgit.maxObjectSize", "100k", cwd=repo)
    s = config.load(find_repo(repo))
    assert s.max_push_size == 3 * (1 << 29)
    assert s.chunk_size <= 100 * 1024 - config.HEADER_ROOM and s.chunk_size % 4096 == 0
    assert config.parse_size(" 64M ") == 64 << 20
    for bad in ("1.5x", "", "g", "-1"):
        with pytest.raises(ValueError):
            config.parse_size(bad)
    # A push setting never breaks `git add`: objects follow the smaller of the two.
    run_git("config", "mgit.maxPushSize", "50k", cwd=repo)
    s = config.load(find_repo(repo))
    assert s.max_object_size == 50 * 1024
    assert s.chunk_size <= 50 * 1024 - config.HEADER_ROOM and s.chunk_size % 4096 == 0


def test_remotes_on_this_machine_are_recognised(tmp_path: Path) -> None:
    bare = init_repo(tmp_path / "bare.git", bare=True)
    work = init_repo(tmp_path / "work")
    repo = find_repo(work)
    assert local_git_dir(repo, bare.as_uri()) == bare
    assert local_git_dir(repo, str(bare)) == bare
    assert local_git_dir(repo, "../bare.git") == bare.resolve()
    assert local_git_dir(repo, str(work)) == work / ".git"
    for remote in ("https://example.invalid/x.git", "host:path/x.git", "ssh://h/x", str(tmp_path)):
        assert local_git_dir(repo, remote) is None
    alternates = bare / "objects" / "info" / "alternates"
    alternates.write_text(str(work / ".git" / "objects") + "\n")
    assert local_git_dir(repo, str(bare)) is None  # objects elsewhere too: git fetch
