"""PAS-MT's repair loop (Algorithm 1, lines 2-9): while some group is over budget,
swap in the non-tree edge with the largest gain (Eq. 1 / Eq. 2).

The gain of moving v_i under v_s is the recreation it saves the unsatisfied
groups divided by the storage it adds, c_s(v_s, v_i) - c_s(p_i, v_i):
- numerator: saving = C_r(T, v_i) - C_r(T, v_s) - c_r(v_s, v_i) is what every node
  of v_i's subtree saves (Lemma 3). Eq. 1 (independent) multiplies it by how many
  listings of unsatisfied groups fall in the subtree. Eq. 2 (parallel) counts the
  unsatisfied groups whose costliest node is in the subtree: a swap elsewhere
  cannot lower a group's maximum.
- denominator: a swap that saves recreation without adding storage (zero or
  negative denominator) dominates every other; among those the largest numerator
  wins, then the largest storage drop. Otherwise the largest ratio wins.
Only swaps that save something (numerator > 0) qualify, so no node's recreation
ever grows, a satisfied group stays satisfied, and no swap closes a cycle (a base
in v_i's own subtree costs at least C_r(T, v_i)). When nothing qualifies while
groups are still over budget, `graft` takes over.

Each round scores every edge at once with numpy. The per-node listing counts of
the subtrees are kept up to date along ancestor chains as nodes move and groups
become satisfied, so a round costs O(|E|) array work plus two chains.
"""

from __future__ import annotations

import numpy as np

from git_mgit.planning.graft import graft_shortest_paths
from git_mgit.planning.graph import Scheme, within
from git_mgit.planning.tree import Tree


class _Repair:
    def __init__(self, tree: Tree, scheme: Scheme, max_depth: int | None) -> None:
        g = tree.graph
        self.tree, self.scheme, self.max_depth = tree, scheme, max_depth
        self.src = np.array([e.src for e in g.edges], dtype=np.int64)  # ROOT -1: last slot
        self.dst = np.array([e.dst for e in g.edges], dtype=np.int64)
        self.cs = np.array([e.storage for e in g.edges])
        self.cr = np.array([e.recreation for e in g.edges])
        self.rec = np.array(tree.rec)
        self.parent_cs = np.array([e.storage for e in tree.parent])  # type: ignore[union-attr]
        self.cost = [tree.cost(k, scheme) for k in range(len(g.groups))]
        self.count = np.zeros(g.n + 1)  # unsatisfied listings in each node's subtree
        self.carriers: dict[int, list[int]] = {}  # unsatisfied group -> nodes carrying its weight
        for k, grp in enumerate(g.groups):
            if not within(self.cost[k], grp.budget):
                self._weigh(k, self._carriers(k), +1.0)

    def _carriers(self, k: int) -> list[int]:
        nodes = self.tree.graph.groups[k].nodes
        if self.scheme is Scheme.INDEPENDENT:
            return nodes
        return [max(nodes, key=self.tree.rec.__getitem__)]

    def _weigh(self, k: int, carriers: list[int], sign: float) -> None:
        for v in carriers:
            self.count[self.tree.ancestors(v)] += sign
        if sign > 0:
            self.carriers[k] = carriers
        else:
            del self.carriers[k]

    def _pick(self) -> int | None:
        """The edge with the largest gain that fits the depth cap."""
        dst = self.dst
        saving = self.rec[dst] - (self.rec[self.src] + self.cr)
        numerator = saving * self.count[dst]
        added = self.cs - self.parent_cs[dst]
        ok = (saving > 0) & (numerator > 0)
        while True:
            free = np.flatnonzero(ok & (added <= 0))
            if free.size:
                best = int(free[np.lexsort((-added[free], numerator[free]))[-1]])
            else:
                costly = np.flatnonzero(ok)
                if not costly.size:
                    return None
                with np.errstate(over="ignore"):  # a tiny storage increase: an infinite gain
                    best = int(costly[np.argmax(numerator[costly] / added[costly])])
            if self._allowed(best):
                return best
            ok[best] = False

    def _allowed(self, i: int) -> bool:
        if self.max_depth is None:
            return True
        return self.tree.chain_fits(
            int(self.src[i]), self.tree.height(int(self.dst[i])), self.max_depth
        )

    def _swap(self, i: int) -> None:
        tree, g = self.tree, self.tree.graph
        v = int(self.dst[i])
        carried = self.count[v]
        self.count[tree.ancestors(tree.parent[v].src)] -= carried  # type: ignore[union-attr]
        moved = tree.set_parent(v, g.edges[i])
        self.count[tree.ancestors(tree.parent[v].src)] += carried  # type: ignore[union-attr]
        self.parent_cs[v] = g.edges[i].storage
        self.rec[moved] = [tree.rec[w] for w in moved]
        for k in {k for w in moved for k in g.groups_of(w)}:
            self.cost[k] = tree.cost(k, self.scheme)
            if k not in self.carriers:
                continue
            old = self.carriers[k]
            if within(self.cost[k], g.groups[k].budget):
                self._weigh(k, old, -1.0)
            elif self.scheme is Scheme.PARALLEL and self._carriers(k) != old:
                self._weigh(k, old, -1.0)
                self._weigh(k, self._carriers(k), +1.0)

    def run(self) -> None:
        while self.carriers:
            best = self._pick()
            if best is None:
                return
            self._swap(best)


def reduce_violations(tree: Tree, scheme: Scheme, max_depth: int | None = None) -> None:
    """Swap edges into `tree` until every budget holds or no swap has a positive gain,
    then graft what is still over budget onto shortest paths."""
    repair = _Repair(tree, scheme, max_depth)
    repair.run()
    if repair.carriers:
        graft_shortest_paths(tree, scheme, max_depth)
