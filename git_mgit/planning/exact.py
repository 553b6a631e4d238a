"""The optimum of Problem 1 by branch and bound, for graphs small enough to enumerate.

Nodes are decided one at a time (nearest to ROOT first), each trying its
incoming edges from the one that stores least. A partial plan is dropped when
(a) its storage plus the cheapest edge of every undecided node cannot beat
the best plan so far, (b) it closes a cycle, or (c) some group is over budget
even if every undecided node got its shortest-path recreation cost (or a node is
deeper than the cap with every undecided node stored whole): all three are
lower bounds, so nothing better is ever cut off.
"""

from __future__ import annotations

from git_mgit.planning.bounds import spt
from git_mgit.planning.graph import (
    ROOT,
    Edge,
    Plan,
    Scheme,
    StorageGraph,
    check_max_depth,
    combine,
    within,
)

DEFAULT_LIMIT = 200_000


class ExactLimitExceeded(RuntimeError):
    """The search tried more partial plans than its limit allowed."""


def search_space(g: StorageGraph, cap: int) -> int:
    """An upper bound on the partial plans `exact` can try (n times the number of ways to
    pick one incoming edge per node), counted up to just past cap."""
    total = max(g.n, 1)
    for v in range(g.n):
        total *= len(g.into(v))
        if total > cap:
            return cap + 1
    return total


class _Search:
    def __init__(self, g: StorageGraph, scheme: Scheme, max_depth: int | None) -> None:
        self.g, self.scheme, self.max_depth = g, scheme, max_depth
        self.low = [spt(g).recreation(v) for v in range(g.n)]
        self.chosen: list[Edge | None] = [None] * g.n

    def closes_cycle(self, e: Edge) -> bool:
        u = e.src
        while u != ROOT:
            if u == e.dst:
                return True
            above = self.chosen[u]
            if above is None:
                return False
            u = above.src
        return False

    def hopeful(self) -> bool:
        """Whether every budget and the depth cap can still be met, by lower bounds."""
        g, chosen, low = self.g, self.chosen, self.low
        rec: list[float | None] = [None] * g.n
        depth = [0] * g.n
        for x in range(g.n):
            path, u = [], x
            while u != ROOT and rec[u] is None and chosen[u] is not None:
                path.append(u)
                u = chosen[u].src  # type: ignore[union-attr]
            if u == ROOT:
                r, d = 0.0, 0
            elif rec[u] is None:
                r, d = low[u], 1
                rec[u], depth[u] = r, d
            else:
                r, d = rec[u], depth[u]  # type: ignore[assignment]
            for w in reversed(path):
                r += chosen[w].recreation  # type: ignore[union-attr]
                d += 1
                rec[w], depth[w] = r, d
        if self.max_depth is not None and max(depth, default=1) > self.max_depth:
            return False
        return all(
            within(combine((rec[v] for v in grp.nodes), self.scheme), grp.budget)  # type: ignore[misc]
            for grp in g.groups
        )


def exact(
    g: StorageGraph,
    scheme: Scheme,
    limit: int = DEFAULT_LIMIT,
    max_depth: int | None = None,
    incumbent: Plan | None = None,
) -> Plan | None:
    """The least-storage plan meeting every budget (and the depth cap), None if there is
    none. An `incumbent` plan that meets them seeds the bound and is returned when
    nothing stores less. Raises ExactLimitExceeded after `limit` partial plans."""
    check_max_depth(max_depth)
    if g.n == 0:
        return Plan(g, [])  # groups of no nodes cost nothing
    search = _Search(g, scheme, max_depth)
    order = sorted(range(g.n), key=lambda v: (search.low[v], v))
    options = [sorted(g.into(v), key=lambda e: (e.storage, e.recreation)) for v in order]
    rest = [0.0] * (g.n + 1)
    for i in reversed(range(g.n)):
        rest[i] = rest[i + 1] + options[i][0].storage
    best, best_storage = None, float("inf")
    if (
        incumbent is not None
        and incumbent.feasible(scheme)
        and (max_depth is None or all(incumbent.depth(v) <= max_depth for v in range(g.n)))
    ):
        best, best_storage = list(incumbent.chosen), incumbent.storage()
    chosen, states = search.chosen, 0
    pos, acc = [0] * g.n, [0.0] * (g.n + 1)
    level = 0
    while level >= 0:
        v = order[level]
        chosen[v] = None
        advanced = False
        while pos[level] < len(options[level]):
            e = options[level][pos[level]]
            pos[level] += 1
            total = acc[level] + e.storage
            if total + rest[level + 1] >= best_storage:
                break  # the options are sorted by storage: the rest are no better
            if search.closes_cycle(e):
                continue
            states += 1
            if states > limit:
                raise ExactLimitExceeded(f"more than {limit} partial plans for {g.n} nodes")
            chosen[v] = e
            if not search.hopeful():
                continue
            if level + 1 == g.n:
                best, best_storage = list(chosen), total
                continue
            acc[level + 1] = total
            level += 1
            pos[level] = 0
            advanced = True
            break
        if not advanced:
            chosen[v] = None
            level -= 1
    return None if best is None else Plan(g, best)  # type: ignore[arg-type]
