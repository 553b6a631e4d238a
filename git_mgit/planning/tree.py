"""A mutable arborescence the heuristics edit in place, one swap at a time.

Lemma 3: changing v's parent changes the storage by the difference of the two
edges and shifts the recreation cost of every node in v's subtree by one and
the same amount, so a swap only re-walks that subtree. Nodes may be absent (no parent yet) while
PAS-PT grows the tree.
"""

from __future__ import annotations

from collections.abc import Sequence

from git_mgit.planning.graph import ROOT, Edge, Plan, Scheme, StorageGraph, combine


class Tree:
    def __init__(self, graph: StorageGraph, chosen: Sequence[Edge | None] | None = None) -> None:
        self.graph = graph
        n = graph.n
        self.parent: list[Edge | None] = [None] * n
        self.children: list[set[int]] = [set() for _ in range(n + 1)]  # [ROOT] is the last slot
        self.rec = [0.0] * (n + 1)
        self.depth = [0] * (n + 1)
        if chosen is not None:
            for v, e in enumerate(chosen):
                if e is not None:
                    self.parent[v] = e
                    self.children[e.src].add(v)
            self._refresh(self.preorder())

    @classmethod
    def of(cls, plan: Plan) -> Tree:
        return cls(plan.graph, plan.chosen)

    def plan(self) -> Plan:
        """The finished tree as a Plan (every node must be attached)."""
        return Plan(self.graph, list(self.parent))  # type: ignore[arg-type]

    def attached(self, v: int) -> bool:
        return self.parent[v] is not None

    def preorder(self, top: int = ROOT) -> list[int]:
        """top's attached descendants, parents before children (top itself first unless ROOT)."""
        out, stack = [], [top]
        while stack:
            u = stack.pop()
            if u != ROOT:
                out.append(u)
            stack.extend(self.children[u])
        return out

    def _refresh(self, nodes: list[int]) -> None:
        """Recompute costs top-down, as R(v) = R(parent) + c_r exactly as Plan does."""
        for v in nodes:
            e = self.parent[v]
            assert e is not None
            self.rec[v] = self.rec[e.src] + e.recreation
            self.depth[v] = self.depth[e.src] + 1

    def is_below(self, u: int, v: int) -> bool:
        """Whether u lies in v's subtree (so making u v's parent would close a cycle)."""
        while u != ROOT and self.depth[u] >= self.depth[v]:
            if u == v:
                return True
            e = self.parent[u]
            assert e is not None
            u = e.src
        return False

    def height(self, v: int) -> int:
        """Levels in v's subtree (1 for a leaf)."""
        return max(self.depth[w] for w in self.preorder(v)) - self.depth[v] + 1

    def ancestors(self, v: int) -> list[int]:
        """v and the nodes above it, up to (not including) ROOT."""
        out = []
        while v != ROOT:
            out.append(v)
            v = self.parent[v].src  # type: ignore[union-attr]
        return out

    def set_parent(self, v: int, e: Edge) -> list[int]:
        """Attach v, or move it with its subtree, under e.src (the caller rules out cycles).
        Returns the nodes whose costs changed: v's subtree."""
        old = self.parent[v]
        if old is not None:
            self.children[old.src].discard(v)
        self.parent[v] = e
        self.children[e.src].add(v)
        moved = self.preorder(v)
        self._refresh(moved)
        return moved

    def cost(self, k: int, scheme: Scheme) -> float:
        """Group k's recreation cost (its nodes must be attached)."""
        return combine((self.rec[v] for v in self.graph.groups[k].nodes), scheme)

    def chain_fits(self, src: int, height: int, max_depth: int | None) -> bool:
        """Whether a subtree of `height` levels hung under src keeps every node's depth
        (edges from ROOT, as Plan.depth counts) within max_depth."""
        return max_depth is None or self.depth[src] + height <= max_depth
