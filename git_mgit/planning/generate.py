"""Storage graphs shaped like a git-mgit repository, for tests and the benchmark.

A lineage of model versions: version 0 is trained from scratch; every later
version follows the one before it in history, and some (`fork_rate`) also
declare an older version as their lineage parent, as a fine-tune of it would.
Each tensor of a version is one node, with the candidate bases git-mgit's
clean filter considers: stored whole (ROOT), or as a delta of the same tensor
in the previous version and in the lineage parent (optionally also the
reverse deltas, older as a delta of newer). A delta stores a fraction of the tensor (less when the versions are
close) and costs about as much to decode as the whole tensor, so recreation
grows with every level of a chain while storage shrinks.
"""

from __future__ import annotations

import math
import random

from git_mgit.planning.bounds import spt
from git_mgit.planning.graph import ROOT, Edge, Group, Scheme, StorageGraph


def generated_graph(
    seed: int,
    versions: int,
    tensors_per_version: int,
    *,
    fork_rate: float = 0.2,
    reverse_deltas: bool = True,
    tensor_bytes: tuple[int, int] = (1 << 12, 1 << 22),
) -> StorageGraph:
    """A reproducible storage graph (same seed, same graph), one group per version with
    no budget (see `scaled_budgets`). Node v * tensors_per_version + t is tensor t of
    version v; sizes are log-uniform within tensor_bytes."""
    rng = random.Random(seed)
    lo, hi = tensor_bytes
    sizes = [round(lo * (hi / lo) ** rng.random()) for _ in range(tensors_per_version)]
    edges: list[Edge] = []
    groups: list[Group] = []

    def node(version: int, t: int) -> int:
        return version * tensors_per_version + t

    def deltas(base: int, version: int, closeness: tuple[float, float]) -> None:
        for t, size in enumerate(sizes):
            ratio = rng.uniform(*closeness)
            storage, decode = size * ratio, size * (0.7 + 0.4 * ratio)
            edges.append(Edge(node(base, t), node(version, t), storage, decode))
            if reverse_deltas:
                edges.append(
                    Edge(node(version, t), node(base, t), storage * rng.uniform(0.95, 1.05), decode)
                )

    for version in range(versions):
        for t, size in enumerate(sizes):
            edges.append(Edge(ROOT, node(version, t), size * rng.uniform(0.8, 0.85), float(size)))
        if version > 0:
            deltas(version - 1, version, (0.25, 0.6))
            if version > 1 and rng.random() < fork_rate:
                deltas(rng.randrange(version - 1), version, (0.4, 0.8))
        members = [node(version, t) for t in range(tensors_per_version)]
        groups.append(Group(f"v{version}", members))
    return StorageGraph(versions * tensors_per_version, edges, groups)


def random_graph(rng: random.Random, n: int, scheme: Scheme) -> StorageGraph:
    """A small unstructured graph for measuring heuristics against `exact`: 1-2 ROOT
    edges per node, n to 3n random deltas, 1-3 random groups with budgets 1-3 times
    their SPT cost (so always feasible). Costs mix small integers (ties) and reals."""

    def cost() -> float:
        return float(rng.randint(0, 12)) if rng.random() < 0.5 else rng.uniform(0, 50)

    extra = rng.randint(n, 3 * n)
    edges = [Edge(ROOT, v, cost(), cost()) for v in range(n) for _ in range(rng.randint(1, 2))]
    for _ in range(extra):
        a, b = rng.sample(range(n), 2)
        edges.append(Edge(a, b, cost(), cost()))
    groups = [
        Group(f"s{k}", rng.sample(range(n), rng.randint(1, n))) for k in range(rng.randint(1, 3))
    ]
    g = StorageGraph(n, edges, groups)
    fastest = spt(g)
    factors = [1.0, 1.2, 1.5, 2.0, 3.0]
    return g.with_budgets([rng.choice(factors) * fastest.cost(grp, scheme) for grp in groups])


def scaled_budgets(g: StorageGraph, scheme: Scheme, factor: float) -> StorageGraph:
    """g with every group's budget set to `factor` times its cost in the shortest-path
    tree: the least any plan can reach, so factor 1 is the tightest feasible budget."""
    if factor == math.inf:
        return g.with_budgets([math.inf] * len(g.groups))
    fastest = spt(g)
    return g.with_budgets([factor * fastest.cost(grp, scheme) for grp in g.groups])
