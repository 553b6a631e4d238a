"""Chu-Liu/Edmonds: the minimum spanning arborescence of a directed graph.

Kruskal does not apply to directed graphs: the cheapest edge into each node
may form cycles, which are contracted (edges into a cycle are re-weighted by
what they would replace) and solved again, then expanded. Weights are pairs
compared lexicographically (storage, then recreation): pairs under
element-wise subtraction keep their order, so the algorithm is unchanged and
ties in storage go to the edge that decodes faster.
"""

from __future__ import annotations

from collections.abc import Sequence

Weight = tuple[float, float]
WeightedEdge = tuple[int, int, Weight]


def _cycles(
    best: list[int], edges: Sequence[tuple[int, int, Weight, int]], root: int
) -> list[list[int]]:
    """The cycles formed by following every node's cheapest incoming edge backwards."""
    mark = [-1] * len(best)
    found = []
    for start in range(len(best)):
        path, x = [], start
        while x != root and mark[x] == -1:
            mark[x] = start
            path.append(x)
            x = edges[best[x]][0]
        if x != root and mark[x] == start:
            found.append(path[path.index(x) :])
    return found


def min_arborescence(n: int, root: int, edges: Sequence[WeightedEdge]) -> list[int]:
    """For each node, the index in `edges` of its incoming edge in a minimum arborescence
    rooted at `root` (-1 for the root itself). Every other node must have an incoming
    edge and be reachable from the root; edges must not be self-loops."""
    levels = []
    cur = [(u, v, w, i) for i, (u, v, w) in enumerate(edges)]
    size = n
    while True:
        best = [-1] * size
        for j, (_, v, w, _) in enumerate(cur):
            if v != root and (best[v] < 0 or w < cur[best[v]][2]):
                best[v] = j
        if any(best[v] < 0 for v in range(size) if v != root):
            raise ValueError("a node has no incoming edge: no spanning arborescence exists")
        cycles = _cycles(best, cur, root)
        if not cycles:
            break
        cid, in_cycle, size_next = [-1] * size, [False] * size, 0
        for cycle in cycles:
            for x in cycle:
                cid[x], in_cycle[x] = size_next, True
            size_next += 1
        for x in range(size):
            if cid[x] < 0:
                cid[x], size_next = size_next, size_next + 1
        cheapest: dict[tuple[int, int], tuple[Weight, int]] = {}
        for j, (u, v, w, _) in enumerate(cur):
            cu, cv = cid[u], cid[v]
            if cu == cv:
                continue
            if in_cycle[v]:
                b = cur[best[v]][2]
                w = (w[0] - b[0], w[1] - b[1])
            if (cu, cv) not in cheapest or w < cheapest[cu, cv][0]:
                cheapest[cu, cv] = (w, j)
        levels.append((cur, best, cid, in_cycle))
        cur = [(cu, cv, w, j) for (cu, cv), (w, j) in cheapest.items()]
        size, root = size_next, cid[root]
    chosen = best
    for prev, prev_best, cid, in_cycle in reversed(levels):
        expanded = [-1] * len(cid)
        for x in range(len(cid)):
            j = chosen[cid[x]]
            if j < 0:
                continue  # the root
            origin = cur[j][3]
            if not in_cycle[x]:
                expanded[x] = origin
            elif prev[origin][1] == x:
                expanded[x] = origin  # where the cycle is entered
            else:
                expanded[x] = prev_best[x]
        chosen, cur = expanded, prev
    return chosen
