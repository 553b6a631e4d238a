"""LAST (Khuller, Raghavachari, Young), the baseline ModelHub compares against,
adapted to directed graphs.

Walk the minimum spanning arborescence in preorder, tracking the best known
recreation cost d(v) through the edges kept so far; when d(v) exceeds v's
threshold, add the whole shortest path from ROOT to v. The plan is the
shortest-path tree of the kept edges, so every node ends within its threshold
(or at its shortest path, if the threshold is below that). Khuller's storage
bound (1 + 2/alpha times the MST) is for undirected graphs and does not carry
over. LAST knows only per-node constraints: `last_for_budgets` splits each
group's budget over its nodes, as ModelHub does for its baseline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from git_mgit.planning.bounds import mst, shortest_path_tree, spt
from git_mgit.planning.graph import ROOT, Plan, Scheme, StorageGraph, within
from git_mgit.planning.tree import Tree


def _last(g: StorageGraph, threshold: Sequence[float]) -> Plan:
    """The LAST tree for per-node recreation thresholds."""
    base, shortest = mst(g), spt(g)
    kept = set(base.chosen)
    d = [math.inf] * (g.n + 1)
    d[ROOT] = 0.0
    for v in Tree.of(base).preorder():
        e = base.chosen[v]
        d[v] = min(d[v], d[e.src] + e.recreation)
        if within(d[v], threshold[v]):
            continue
        w = v
        while w != ROOT:
            kept.add(shortest.chosen[w])
            d[w] = min(d[w], shortest.recreation(w))
            w = shortest.chosen[w].src
    return shortest_path_tree(g, kept)


def last(g: StorageGraph, alpha: float) -> Plan:
    """Every node within (1 + alpha) times its shortest-path recreation cost."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    shortest = spt(g)
    return _last(g, [(1 + alpha) * shortest.recreation(v) for v in range(g.n)])


def last_for_budgets(g: StorageGraph, scheme: Scheme) -> Plan:
    """LAST with each group budget decomposed into per-node thresholds: under the
    independent scheme in proportion to the nodes' materialized size (equal shares
    for a group of empty nodes), under the parallel scheme the whole budget (a
    maximum is within budget exactly when every node is). A node in several groups
    takes its smallest share; a node in none is unconstrained."""
    threshold = [math.inf] * g.n
    for group in g.groups:
        if math.isinf(group.budget):
            continue
        sizes = [g.cheapest_root(v).storage for v in group.nodes]
        total = math.fsum(sizes)
        for v, size in zip(group.nodes, sizes, strict=True):
            if scheme is Scheme.PARALLEL:
                share = group.budget
            elif total > 0:
                share = group.budget * size / total
            else:
                share = group.budget / len(group.nodes)
            threshold[v] = min(threshold[v], share)
    return _last(g, threshold)
