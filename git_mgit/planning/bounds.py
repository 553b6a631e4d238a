"""The plans that bound every other: least storage (MST), least recreation (SPT), and
storing everything materialized (what the planners must never do worse than)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from git_mgit.planning.arborescence import min_arborescence
from git_mgit.planning.graph import ROOT, Edge, Plan, StorageGraph


def materialize(g: StorageGraph) -> Plan:
    """Every node stored whole, through its cheapest ROOT edge."""
    return Plan(g, [g.cheapest_root(v) for v in range(g.n)])


def mst(g: StorageGraph) -> Plan:
    """Least total storage, budgets ignored: a minimum spanning arborescence rooted at ROOT
    (Chu-Liu/Edmonds; ties in storage go to the faster edge)."""
    weighted = [
        (g.n if e.src == ROOT else e.src, e.dst, (e.storage, e.recreation)) for e in g.edges
    ]
    chosen = min_arborescence(g.n + 1, g.n, weighted)
    return Plan(g, [g.edges[chosen[v]] for v in range(g.n)])


def spt(g: StorageGraph) -> Plan:
    """Least recreation cost for every node at once: the shortest-path tree from ROOT by c_r."""
    return shortest_path_tree(g, g.edges)


def shortest_path_tree(g: StorageGraph, edges: Iterable[Edge]) -> Plan:
    """Dijkstra from ROOT by recreation over `edges` (which must reach every node).

    Of the edges that realise a node's distance, the one that stores least is kept;
    only edges from nodes settled earlier qualify, so zero-cost edges cannot form a cycle.
    """
    out: dict[int, list[Edge]] = {}
    for e in edges:
        out.setdefault(e.src, []).append(e)
    dist = [float("inf")] * (g.n + 1)
    rank = [-1] * (g.n + 1)
    dist[ROOT], order = 0.0, 0
    heap = [(0.0, ROOT)]
    while heap:
        d, u = heapq.heappop(heap)
        if rank[u] >= 0:
            continue
        rank[u], order = order, order + 1
        for e in out.get(u, ()):
            if rank[e.dst] < 0 and d + e.recreation < dist[e.dst]:
                dist[e.dst] = d + e.recreation
                heapq.heappush(heap, (dist[e.dst], e.dst))
    best: list[Edge | None] = [None] * g.n
    for src, leaving in out.items():
        for e in leaving:
            v = e.dst
            tight = rank[src] >= 0 and rank[src] < rank[v] and dist[src] + e.recreation == dist[v]
            if tight and (best[v] is None or e.storage < best[v].storage):
                best[v] = e
    if any(e is None for e in best):
        raise ValueError("the edges given do not reach every node from ROOT")
    return Plan(g, best)  # type: ignore[arg-type]
