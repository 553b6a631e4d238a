"""ModelHub's matrix storage graph (section IV.C) and the plans chosen on it.

Nodes are chunks (one tensor chunk of one model version); an edge (u, v)
says "store v as a delta of u" with a storage cost (bytes it takes) and a
recreation cost (decode work to apply it). ROOT is ModelHub's empty matrix
v0: an edge from ROOT stores a node materialized. Groups are snapshots: the
nodes one model version needs together, with a recreation budget. A plan
picks one incoming edge per node so that every node is reachable from ROOT:
a spanning arborescence (Lemma 2: the optimum under the independent and
parallel schemes is always a tree).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

ROOT = -1
"""v0, the empty matrix. Per-node lists in this package have one extra last slot, so
`values[ROOT]` (index -1) is ROOT's own entry."""

TOLERANCE = 1e-9
"""Relative slack on budget checks: sums taken in a different order differ in the last bits."""


@dataclass(frozen=True)
class Edge:
    src: int  # ROOT or a node index: the base the node is stored as a delta of
    dst: int  # node index
    storage: float  # c_s: bytes this edge stores
    recreation: float  # c_r: cost to apply it (decode work)


@dataclass
class Group:
    """A snapshot: the nodes one model version needs together, and its budget theta.

    A node listed twice counts twice (the scheme sums over the list).
    """

    name: str
    nodes: list[int]
    budget: float = math.inf


class Scheme(str, Enum):
    """Table III: how a snapshot's nodes are decoded, hence what its cost is."""

    INDEPENDENT = "independent"  # one after the other: the sum of the nodes' costs
    PARALLEL = "parallel"  # all at once: the costliest node


def within(cost: float, budget: float) -> bool:
    """cost <= budget, forgiving rounding of the size TOLERANCE says."""
    return cost <= budget + TOLERANCE * max(1.0, abs(budget))


def check_max_depth(max_depth: int | None) -> None:
    """A depth cap counts edges from ROOT, so a node stored whole already has depth 1."""
    if max_depth is not None and max_depth < 1:
        raise ValueError(
            f"max_depth must be >= 1 (a node stored whole has depth 1), got {max_depth}"
        )


def combine(costs: Iterable[float], scheme: Scheme) -> float:
    """A group's recreation cost from its nodes' costs (Table III)."""
    if scheme is Scheme.INDEPENDENT:
        return math.fsum(costs)
    return max(costs, default=0.0)


def _check_cost(value: float, what: str, edge: Edge) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"edge {edge}: {what} must be a finite number >= 0")


class StorageGraph:
    """A directed multigraph over nodes 0..n-1 plus ROOT, with the snapshot groups.

    Every node needs at least one ROOT edge, so materializing it is always possible
    and every instance has at least one plan.
    """

    def __init__(self, n: int, edges: Iterable[Edge], groups: Sequence[Group]) -> None:
        if n < 0:
            raise ValueError(f"node count must be >= 0, got {n}")
        self.n = n
        self.edges = list(edges)
        self.groups = list(groups)
        self._into: list[list[Edge]] = [[] for _ in range(n)]
        self._out: list[list[Edge]] = [[] for _ in range(n + 1)]
        for e in self.edges:
            if not (0 <= e.dst < n and (e.src == ROOT or 0 <= e.src < n)) or e.src == e.dst:
                raise ValueError(
                    f"edge {e}: needs src ROOT or 0..{n - 1}, dst 0..{n - 1}, src != dst"
                )
            _check_cost(e.storage, "storage", e)
            _check_cost(e.recreation, "recreation", e)
            self._into[e.dst].append(e)
            self._out[e.src].append(e)
        self._roots = [[e for e in into if e.src == ROOT] for into in self._into]
        missing = [v for v in range(n) if not self._roots[v]]
        if missing:
            raise ValueError(
                f"nodes {missing[:5]} have no ROOT edge: every node must be storable materialized"
            )
        self._groups_of: list[list[int]] = [[] for _ in range(n)]
        for k, group in enumerate(self.groups):
            if math.isnan(group.budget) or group.budget < 0:
                raise ValueError(f"group {group.name!r}: budget must be >= 0, got {group.budget}")
            for v in group.nodes:
                if not 0 <= v < n:
                    raise ValueError(f"group {group.name!r} lists node {v}, outside 0..{n - 1}")
                self._groups_of[v].append(k)
        self._edge_set = frozenset(self.edges)

    def into(self, node: int) -> list[Edge]:
        """Candidate edges ending at node (the caller must not modify the list)."""
        return self._into[node]

    def out_of(self, node: int) -> list[Edge]:
        """Candidate edges leaving node (or ROOT)."""
        return self._out[node]

    def root_edges(self, node: int) -> list[Edge]:
        """The ways to store node materialized."""
        return self._roots[node]

    def cheapest_root(self, node: int) -> Edge:
        """The ROOT edge that stores least (then decodes fastest)."""
        return min(self._roots[node], key=lambda e: (e.storage, e.recreation))

    def fastest_root(self, node: int) -> Edge:
        """The ROOT edge that decodes fastest (then stores least)."""
        return min(self._roots[node], key=lambda e: (e.recreation, e.storage))

    def groups_of(self, node: int) -> list[int]:
        """Indices of the groups listing node, once per listing."""
        return self._groups_of[node]

    def has_edge(self, edge: Edge) -> bool:
        return edge in self._edge_set

    def with_budgets(self, budgets: Sequence[float]) -> StorageGraph:
        """The same nodes and edges with new group budgets (one per group, in order)."""
        if len(budgets) != len(self.groups):
            raise ValueError(f"{len(budgets)} budgets for {len(self.groups)} groups")
        groups = [
            Group(g.name, list(g.nodes), b) for g, b in zip(self.groups, budgets, strict=True)
        ]
        return StorageGraph(self.n, self.edges, groups)


@dataclass(frozen=True)
class Plan:
    """A spanning arborescence rooted at ROOT: one chosen edge per node.

    Checked on construction (every node covered by one of its own graph edges, no
    cycle), and its per-node costs are computed once; treat it as immutable.
    """

    graph: StorageGraph
    chosen: list[Edge]
    _recreation: list[float] = field(init=False, repr=False, compare=False)
    _depth: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        g, chosen = self.graph, self.chosen
        if len(chosen) != g.n:
            raise ValueError(f"plan has {len(chosen)} edges for {g.n} nodes")
        for v, e in enumerate(chosen):
            if e.dst != v or not g.has_edge(e):
                raise ValueError(f"plan edge for node {v} is {e}, not one of its graph edges")
        rec, depth = [0.0] * (g.n + 1), [0] * (g.n + 1)
        on_path = [False] * g.n
        for v in range(g.n):
            path, u = [], v
            while u != ROOT and depth[u] == 0:
                if on_path[u]:
                    raise ValueError(f"plan has a cycle through node {u}")
                on_path[u] = True
                path.append(u)
                u = chosen[u].src
            for w in reversed(path):
                e = chosen[w]
                rec[w] = rec[e.src] + e.recreation
                depth[w] = depth[e.src] + 1
                on_path[w] = False
        object.__setattr__(self, "_recreation", rec)
        object.__setattr__(self, "_depth", depth)

    def storage(self) -> float:
        """C_s: the bytes all chosen edges store."""
        return math.fsum(e.storage for e in self.chosen)

    def recreation(self, node: int) -> float:
        """C_r(T, v): the recreation costs summed along the path from ROOT."""
        return self._recreation[node]

    def depth(self, node: int) -> int:
        """Edges from ROOT (materialized = 1; the object's delta chain depth is one less)."""
        return self._depth[node]

    def cost(self, group: Group, scheme: Scheme) -> float:
        """The group's recreation cost under scheme (Table III)."""
        return combine((self._recreation[v] for v in group.nodes), scheme)

    def violations(self, scheme: Scheme) -> list[Group]:
        """The groups whose cost is over their budget."""
        return [g for g in self.graph.groups if not within(self.cost(g, scheme), g.budget)]

    def feasible(self, scheme: Scheme) -> bool:
        return not self.violations(scheme)

    def excess(self, scheme: Scheme) -> float:
        """How far over budget, summed over the violated groups (0 when feasible)."""
        return math.fsum(self.cost(g, scheme) - g.budget for g in self.violations(scheme))
