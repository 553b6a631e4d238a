"""PAS-PT (ModelHub Algorithm 2): grow the tree from ROOT, cheapest storage first,
admitting an edge only if the groups of the node it adds can still meet their budgets.

A node not yet in the tree is estimated at the recreation cost of its fastest ROOT
edge: a lower bound in the usual case, and a cost it can always get, so a group
that was admissible stays completable. A group already over budget on those
estimates admits an edge as long as it does not make the group worse than that
fallback, instead of refusing every edge of its nodes. Adding v_j also re-parents
nodes already in the tree under v_j when that stores less and decodes no slower
(line 13). Nodes left out at the end are stored through their fastest ROOT edge
and the PAS-MT repair takes over (lines 17-19).
"""

from __future__ import annotations

import heapq
import itertools

from git_mgit.planning.gain import reduce_violations
from git_mgit.planning.graph import Plan, Scheme, StorageGraph, check_max_depth, combine, within
from git_mgit.planning.polish import finish
from git_mgit.planning.tree import Tree


class _Estimates:
    """Group costs with actual values for nodes in the tree and estimates for the rest."""

    def __init__(self, tree: Tree, scheme: Scheme) -> None:
        g = tree.graph
        self.tree, self.scheme = tree, scheme
        self.estimate = [g.fastest_root(v).recreation for v in range(g.n)]

    def _group(self, k: int, j: int, value: float) -> float:
        tree, estimate = self.tree, self.estimate
        return combine(
            (
                value if w == j else tree.rec[w] if tree.attached(w) else estimate[w]
                for w in tree.graph.groups[k].nodes
            ),
            self.scheme,
        )

    def admits(self, j: int, rec: float) -> bool:
        """Whether node j may join the tree at recreation cost rec."""
        for k in set(self.tree.graph.groups_of(j)):
            with_edge = self._group(k, j, rec)
            over = not within(with_edge, self.tree.graph.groups[k].budget)
            if over and with_edge > self._group(k, j, self.estimate[j]):
                return False
        return True


def pas_pt(g: StorageGraph, scheme: Scheme, max_depth: int | None = None) -> Plan:
    """Priority-based tree construction, then the PAS-MT repair if needed, then polished."""
    check_max_depth(max_depth)
    tree = Tree(g)
    estimates = _Estimates(tree, scheme)
    seq = itertools.count()
    heap = [(e.storage, e.recreation, next(seq), e) for v in range(g.n) for e in g.root_edges(v)]
    heapq.heapify(heap)
    while heap:
        *_, e = heapq.heappop(heap)
        j = e.dst
        if tree.attached(j) or not tree.chain_fits(e.src, 1, max_depth):
            continue
        if not estimates.admits(j, tree.rec[e.src] + e.recreation):
            continue
        tree.set_parent(j, e)
        for out in g.out_of(j):
            k = out.dst
            if not tree.attached(k):
                heapq.heappush(heap, (out.storage, out.recreation, next(seq), out))
            elif (
                out.storage < tree.parent[k].storage  # type: ignore[union-attr]
                and tree.rec[j] + out.recreation <= tree.rec[k]
                and not tree.is_below(j, k)
                and (max_depth is None or tree.chain_fits(j, tree.height(k), max_depth))
            ):
                tree.set_parent(k, out)
    for v in range(g.n):
        if not tree.attached(v):
            tree.set_parent(v, g.fastest_root(v))
    reduce_violations(tree, scheme, max_depth)
    return finish(tree, scheme, max_depth)
