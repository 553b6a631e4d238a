"""Storage planners on generated storage graphs.

Every property is checked against costs the test recomputes from the chosen
edges itself, never against Plan's own bookkeeping alone; optimality claims
are checked against a naive enumeration of every arborescence.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_mgit.planning import (
    ROOT,
    Edge,
    ExactLimitExceeded,
    Group,
    Plan,
    Scheme,
    StorageGraph,
    exact,
    last,
    last_for_budgets,
    materialize,
    mst,
    pas_mt,
    pas_pt,
    plan,
    spt,
)
from git_mgit.planning.exact import DEFAULT_LIMIT, search_space
from git_mgit.planning.generate import generated_graph, scaled_budgets
from git_mgit.planning.polish import finish, improve
from git_mgit.planning.solve import METHODS
from git_mgit.planning.tree import Tree

SLACK = 1e-9  # the same relative rounding allowance the planners use


def fits(cost: float, budget: float) -> bool:
    return cost <= budget + SLACK * max(1.0, abs(budget))


# --- independent recomputation --------------------------------------------------


def walk(g: StorageGraph, chosen: list[Edge]) -> tuple[list[float], list[int]]:
    """Per node, the recreation cost and edge count of its path from ROOT; asserts the
    chosen edges form a spanning arborescence of g's own edges."""
    assert len(chosen) == g.n
    for v, e in enumerate(chosen):
        assert e.dst == v and e in g.edges
    rec, depth = [], []
    for v in range(g.n):
        r, d, u = 0.0, 0, v
        path = []
        while u != ROOT:
            path.append(chosen[u])
            u = chosen[u].src
            assert len(path) <= g.n, "cycle"
        for e in reversed(path):
            r, d = r + e.recreation, d + 1
        rec.append(r)
        depth.append(d)
    return rec, depth


def group_costs(g: StorageGraph, chosen: list[Edge], scheme: Scheme) -> list[float]:
    rec, _ = walk(g, chosen)
    if scheme is Scheme.INDEPENDENT:
        return [sum(rec[v] for v in grp.nodes) for grp in g.groups]
    return [max((rec[v] for v in grp.nodes), default=0.0) for grp in g.groups]


def meets(
    g: StorageGraph, chosen: list[Edge], scheme: Scheme, max_depth: int | None = None
) -> bool:
    costs = group_costs(g, chosen, scheme)
    _, depth = walk(g, chosen)
    deep = max_depth is not None and any(d > max_depth for d in depth)
    return not deep and all(fits(c, grp.budget) for c, grp in zip(costs, g.groups, strict=True))


def storage(chosen: list[Edge]) -> float:
    return sum(e.storage for e in chosen)


def every_plan(g: StorageGraph) -> list[list[Edge]]:
    """All spanning arborescences, by brute force."""
    out = []
    for chosen in itertools.product(*(g.into(v) for v in range(g.n))):
        try:
            walk(g, list(chosen))
        except AssertionError:
            continue
        out.append(list(chosen))
    return out


def brute_optimum(g: StorageGraph, scheme: Scheme, max_depth: int | None = None) -> float | None:
    best = [storage(c) for c in every_plan(g) if meets(g, c, scheme, max_depth)]
    return min(best, default=None)


# --- generated graphs -----------------------------------------------------------

costs = st.one_of(st.integers(0, 12).map(float), st.floats(0, 50, allow_nan=False))
FACTORS = [0.5, 1.0, 1.0, 1.3, 2.0, 3.0, math.inf]


@st.composite
def graphs(draw: st.DrawFn, max_nodes: int = 6, max_extra: int = 10) -> StorageGraph:
    """Small random multigraphs: 1-2 ROOT edges per node, random (parallel, two-way)
    deltas, up to 3 groups with budgets from below the shortest-path cost to none."""
    n = draw(st.integers(1, max_nodes))
    edges = [
        Edge(ROOT, v, draw(costs), draw(costs))
        for v in range(n)
        for _ in range(draw(st.integers(1, 2)))
    ]
    for _ in range(draw(st.integers(0, max_extra if n > 1 else 0))):
        a, b = draw(st.permutations(range(n)))[:2]
        edges.append(Edge(a, b, draw(costs), draw(costs)))
    members = st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True)
    groups = [Group(f"s{k}", draw(members)) for k in range(draw(st.integers(0, 3)))]
    g = StorageGraph(n, edges, groups)
    scheme = draw(st.sampled_from(Scheme))
    fastest = spt(g)
    factors = [draw(st.sampled_from(FACTORS)) for _ in groups]
    return g.with_budgets(
        [
            f * fastest.cost(grp, scheme) if f < math.inf else f
            for f, grp in zip(factors, groups, strict=True)
        ]
    )


schemes = st.sampled_from(Scheme)


def solvers(scheme: Scheme) -> dict[str, Callable[[StorageGraph], Plan]]:
    return {
        "materialize": materialize,
        "mst": mst,
        "spt": spt,
        "last": lambda g: last(g, 0.5),
        "last_for_budgets": lambda g: last_for_budgets(g, scheme),
        "pas_mt": lambda g: pas_mt(g, scheme),
        "pas_pt": lambda g: pas_pt(g, scheme),
        "plan": lambda g: plan(g, scheme),
    }


@given(g=graphs(), scheme=schemes)
@settings(max_examples=150, deadline=None)
def test_every_solver_returns_a_valid_plan_and_its_bookkeeping_is_right(g, scheme) -> None:
    plans = {name: solve(g) for name, solve in solvers(scheme).items()}
    lightest, fastest = storage(plans["mst"].chosen), walk(g, plans["spt"].chosen)[0]
    whole = plans["materialize"]
    for name, p in plans.items():
        rec, depth = walk(g, p.chosen)
        assert [p.recreation(v) for v in range(g.n)] == pytest.approx(rec), name
        assert [p.depth(v) for v in range(g.n)] == depth, name
        assert p.storage() == pytest.approx(storage(p.chosen)), name
        reported = {grp.name for grp in p.violations(scheme)}
        really = {
            grp.name
            for grp, c in zip(g.groups, group_costs(g, p.chosen, scheme), strict=True)
            if not fits(c, grp.budget)
        }
        assert reported == really, name
        assert storage(p.chosen) >= lightest - 1e-9, f"{name} stores less than the MST"
        assert all(fastest[v] <= rec[v] + 1e-9 for v in range(g.n)), f"{name} beats the SPT"
        if name.startswith(("pas", "plan")):
            if meets(g, whole.chosen, scheme):
                assert storage(p.chosen) <= storage(whole.chosen) + 1e-9, (
                    f"{name} stores more than materialized"
                )
            if meets(g, plans["spt"].chosen, scheme):
                assert meets(g, p.chosen, scheme), f"{name} misses budgets that the SPT meets"


@given(g=graphs(max_nodes=5, max_extra=6), scheme=schemes)
@settings(max_examples=120, deadline=None)
def test_exact_mst_and_spt_match_brute_force(g, scheme) -> None:
    everything = every_plan(g)
    assert storage(mst(g).chosen) == pytest.approx(min(storage(c) for c in everything))
    fastest = walk(g, spt(g).chosen)[0]
    for v in range(g.n):
        assert fastest[v] == pytest.approx(min(walk(g, c)[0][v] for c in everything))
    optimum = exact(g, scheme)
    best = brute_optimum(g, scheme)
    if best is None:
        assert optimum is None
    else:
        assert optimum is not None and meets(g, optimum.chosen, scheme)
        assert storage(optimum.chosen) == pytest.approx(best)


@given(g=graphs(), scheme=schemes)
@settings(max_examples=100, deadline=None)
def test_plan_is_optimal_where_the_graph_can_be_enumerated(g, scheme) -> None:
    """Whichever planner repack is told to use (exact itself is checked by brute force above)."""
    if search_space(g, DEFAULT_LIMIT) > DEFAULT_LIMIT:
        return
    optimum = exact(g, scheme)
    for method in METHODS:
        chosen = plan(g, scheme, method=method)
        if optimum is None:
            assert not meets(g, chosen.chosen, scheme), method
        else:
            assert meets(g, chosen.chosen, scheme), method
            assert storage(chosen.chosen) == pytest.approx(storage(optimum.chosen)), method


@given(g=graphs(max_nodes=5, max_extra=6), scheme=schemes, cap=st.integers(1, 3))
@settings(max_examples=80, deadline=None)
def test_depth_cap_is_never_exceeded(g, scheme, cap) -> None:
    for solve in (pas_mt, pas_pt, plan):
        _, depth = walk(g, solve(g, scheme, max_depth=cap).chosen)
        assert max(depth, default=1) <= cap
    optimum, best = exact(g, scheme, max_depth=cap), brute_optimum(g, scheme, cap)
    assert (optimum is None) == (best is None)
    if optimum is not None:
        assert meets(g, optimum.chosen, scheme, cap)
        assert storage(optimum.chosen) == pytest.approx(best)


@given(g=graphs(), scheme=schemes, alpha=st.sampled_from([0.0, 0.25, 1.0, 3.0]))
@settings(max_examples=80, deadline=None)
def test_last_keeps_every_node_within_its_threshold(g, scheme, alpha) -> None:
    fastest = walk(g, spt(g).chosen)[0]
    rec = walk(g, last(g, alpha).chosen)[0]
    assert all(fits(rec[v], (1 + alpha) * fastest[v]) for v in range(g.n))
    rec = walk(g, last_for_budgets(g, scheme).chosen)[0]
    for grp in g.groups:
        if scheme is Scheme.PARALLEL:
            assert all(fits(rec[v], max(grp.budget, fastest[v])) for v in grp.nodes)


def test_modelhub_example_2() -> None:
    """ModelHub Fig. 5 / Example 2, rebuilt with weights that give the paper's numbers:
    the MST stores 19 at snapshot costs 3 and 7.5; under budgets 3 and 6 the optimum
    stores 24 at costs 3 and 6."""
    deltas = [
        (0, 1, 2, 1),
        (1, 2, 4, 0.5),
        (1, 4, 4, 0.5),
        (1, 3, 5, 0.5),
        (2, 3, 8, 0.5),
        (3, 4, 6, 0.5),
    ]
    edges = [
        Edge(ROOT, v, s, r)
        for v, s, r in [(0, 4, 1), (1, 9, 1.5), (2, 7, 1.5), (3, 10, 1), (4, 8, 1.5)]
    ]
    edges += [Edge(a, b, s, r) for x, y, s, r in deltas for a, b in ((x, y), (y, x))]
    g = StorageGraph(5, edges, [Group("s1", [0, 1]), Group("s2", [2, 3, 4])])
    cheapest = mst(g)
    assert storage(cheapest.chosen) == 19
    assert group_costs(g, cheapest.chosen, Scheme.INDEPENDENT) == [3, 7.5]
    g = g.with_budgets([3, 6])
    assert brute_optimum(g, Scheme.INDEPENDENT) == 24
    for solve in (exact, pas_mt, pas_pt, plan):
        p = solve(g, Scheme.INDEPENDENT)
        assert storage(p.chosen) == 24, solve.__name__
        assert group_costs(g, p.chosen, Scheme.INDEPENDENT) == [3, 6]
        assert p.violations(Scheme.INDEPENDENT) == []


@pytest.mark.parametrize("scheme", list(Scheme))
@pytest.mark.parametrize("factor", [1.0, 1.5, 3.0])
def test_planners_on_a_repository_shaped_graph(scheme: Scheme, factor: float) -> None:
    g = scaled_budgets(generated_graph(3, 12, 4), scheme, factor)
    whole, lightest = materialize(g), storage(mst(g).chosen)
    assert meets(g, spt(g).chosen, scheme)  # factor >= 1: the shortest-path tree fits
    for solve in (pas_mt, pas_pt, plan):
        p = solve(g, scheme)
        assert p.feasible(scheme) and meets(g, p.chosen, scheme), solve.__name__
        assert lightest - 1e-6 <= storage(p.chosen)
        if meets(g, whole.chosen, scheme):
            assert storage(p.chosen) <= storage(whole.chosen) + 1e-6
    baseline = last_for_budgets(g, scheme)
    assert baseline.feasible(scheme) == meets(g, baseline.chosen, scheme)
    assert lightest - 1e-6 <= storage(baseline.chosen)


def test_budgets_the_swaps_alone_cannot_meet_are_met() -> None:
    """Version {1} needs node 1 under node 0, but the MST hangs 0 below 1: moving 0
    first helps no over-budget group (Eq. 1/2 gain 0), so the swaps stall and the
    shortest-path graft has to finish the job."""
    edges = [Edge(ROOT, 1, 1, 10), Edge(1, 0, 1, 1), Edge(ROOT, 0, 10, 1), Edge(0, 1, 1, 1)]
    g = StorageGraph(2, edges, [Group("v", [1], budget=2)])
    assert not meets(g, mst(g).chosen, Scheme.INDEPENDENT)
    for solve in (pas_mt, pas_pt):
        for scheme in Scheme:
            p = solve(g, scheme)
            assert meets(g, p.chosen, scheme) and storage(p.chosen) == 11


def test_a_local_optimum_worse_than_storing_whole_is_replaced() -> None:
    """Node 0 as a delta of 2 stores 30 where whole it stores 10, but moving it alone
    breaks the budget (node 1's chain has used it up): single moves are stuck at 33,
    while storing everything whole meets the budget with 21."""
    edges = [Edge(ROOT, 0, 10, 5), Edge(ROOT, 1, 10, 5), Edge(ROOT, 2, 1, 0)]
    edges += [Edge(2, 1, 2, 10), Edge(2, 0, 30, 0)]
    g = StorageGraph(3, edges, [Group("v", [0, 1], budget=10)])
    stuck = Tree(g, [edges[4], edges[3], edges[2]])
    improve(stuck, Scheme.INDEPENDENT)
    assert storage(stuck.plan().chosen) == 33
    assert finish(stuck, Scheme.INDEPENDENT).chosen == materialize(g).chosen


def test_budgets_no_plan_can_meet_give_the_best_effort_and_name_the_groups() -> None:
    g = generated_graph(5, 4, 3)
    g = g.with_budgets([0.5 * spt(g).cost(grp, Scheme.PARALLEL) for grp in g.groups])
    for solve in (pas_mt, pas_pt, plan):
        p = solve(g, Scheme.PARALLEL)
        assert {grp.name for grp in p.violations(Scheme.PARALLEL)} == {grp.name for grp in g.groups}
    assert exact(g, Scheme.PARALLEL) is None


def test_exact_gives_up_past_its_limit() -> None:
    g = scaled_budgets(generated_graph(1, 10, 3), Scheme.INDEPENDENT, 1.2)
    with pytest.raises(ExactLimitExceeded):
        exact(g, Scheme.INDEPENDENT, limit=50)


def test_generated_graph_is_reproducible_and_repository_shaped() -> None:
    g = generated_graph(11, 30, 5)
    again = generated_graph(11, 30, 5)
    assert g.edges == again.edges and [x.nodes for x in g.groups] == [x.nodes for x in again.groups]
    assert g.n == 150 and len(g.groups) == 30
    for v in range(g.n):
        whole = g.cheapest_root(v)
        for e in g.into(v):
            assert e.src == ROOT or e.src % 5 == v % 5  # deltas only between the same tensor
            assert e.src == ROOT or e.storage < whole.storage
    chain = max(walk(g, mst(g).chosen)[1])
    assert chain > 3  # least storage means long delta chains, which budgets must break


@pytest.mark.parametrize(
    ("n", "edges", "groups", "message"),
    [
        (2, [Edge(ROOT, 0, 1, 1)], [], "no ROOT edge"),
        (1, [Edge(ROOT, 0, 1, 1), Edge(0, 0, 1, 1)], [], "src != dst"),
        (1, [Edge(ROOT, 1, 1, 1)], [], "dst 0..0"),
        (1, [Edge(ROOT, 0, -1, 1)], [], "storage must be"),
        (1, [Edge(ROOT, 0, 1, math.nan)], [], "recreation must be"),
        (1, [Edge(ROOT, 0, 1, 1)], [Group("v", [3])], "outside 0..0"),
        (1, [Edge(ROOT, 0, 1, 1)], [Group("v", [0], -1.0)], "budget must be"),
    ],
)
def test_bad_graphs_are_refused(n, edges, groups, message) -> None:
    with pytest.raises(ValueError, match=message):
        StorageGraph(n, edges, groups)


def test_plans_that_are_not_arborescences_are_refused() -> None:
    a, b = Edge(0, 1, 1, 1), Edge(1, 0, 1, 1)
    g = StorageGraph(2, [Edge(ROOT, 0, 5, 1), Edge(ROOT, 1, 5, 1), a, b], [])
    with pytest.raises(ValueError, match="cycle"):
        Plan(g, [b, a])
    with pytest.raises(ValueError, match="not one of its graph edges"):
        Plan(g, [Edge(ROOT, 0, 4, 1), a])
    with pytest.raises(ValueError, match="1 edges for 2 nodes"):
        Plan(g, [Edge(ROOT, 0, 5, 1)])
    with pytest.raises(ValueError, match="unknown planning method"):
        plan(g, Scheme.PARALLEL, method="kruskal")
    with pytest.raises(ValueError, match="max_depth must be >= 1"):
        plan(g, Scheme.PARALLEL, max_depth=0)
