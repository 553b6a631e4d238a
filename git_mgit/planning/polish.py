"""What every heuristic's tree goes through before it becomes a Plan.

- `cap_depth` makes a tree obey a chain-depth cap, re-parenting top-down.
- `improve` is a local search: move single nodes to an edge that stores less as
  long as no budget that holds breaks and no violated group gets worse. Each
  move strictly lowers the storage, so it ends; it mends the storage a greedy
  repair overspent, but it is no optimality guarantee (Problem 1 is NP-hard).
- `finish` runs `improve` and then never returns more storage than storing
  everything materialized, when that plan meets every budget.
"""

from __future__ import annotations

from git_mgit.planning.bounds import materialize
from git_mgit.planning.graph import ROOT, Plan, Scheme, combine, within
from git_mgit.planning.tree import Tree


def cap_depth(tree: Tree, max_depth: int | None) -> None:
    """Re-parent, top-down, every node deeper than the cap onto the cheapest edge from a
    node within it. Moves only ever make nodes shallower, so one pass suffices."""
    if max_depth is None:
        return
    for v in tree.preorder():
        if tree.depth[v] <= max_depth:
            continue
        # a base within the cap is shallower than v, so never in v's subtree: no cycle
        fits = [e for e in tree.graph.into(v) if tree.chain_fits(e.src, 1, max_depth)]
        tree.set_parent(v, min(fits, key=lambda e: (e.storage, e.recreation)))


def _keeps_budgets(tree: Tree, v: int, shift: float, scheme: Scheme) -> bool:
    """Whether raising the recreation cost of v's subtree by `shift` > 0 keeps every
    group that meets its budget within it and makes no violated group costlier."""
    moved = tree.preorder(v)
    inside = set(moved)
    for k in {k for w in moved for k in tree.graph.groups_of(w)}:
        group = tree.graph.groups[k]
        before = tree.cost(k, scheme)
        after = combine(
            (tree.rec[w] + shift if w in inside else tree.rec[w] for w in group.nodes), scheme
        )
        if after > before and not (within(before, group.budget) and within(after, group.budget)):
            return False
    return True


def improve(tree: Tree, scheme: Scheme, max_depth: int | None = None) -> None:
    """Single-node re-parenting that lowers storage and keeps every budget, until none is left."""
    g = tree.graph
    by_storage = [sorted(g.into(v), key=lambda e: (e.storage, e.recreation)) for v in range(g.n)]
    moved = True
    while moved:
        moved = False
        for v in range(g.n):
            current = tree.parent[v]
            assert current is not None
            height = None
            for e in by_storage[v]:
                if e.storage >= current.storage:
                    break
                if e.src != ROOT and tree.is_below(e.src, v):
                    continue
                if max_depth is not None:
                    height = height or tree.height(v)
                    if not tree.chain_fits(e.src, height, max_depth):
                        continue
                shift = tree.rec[e.src] + e.recreation - tree.rec[v]
                if shift > 0 and not _keeps_budgets(tree, v, shift, scheme):
                    continue
                tree.set_parent(v, e)
                moved = True
                break


def finish(tree: Tree, scheme: Scheme, max_depth: int | None = None) -> Plan:
    """`improve`, then fall back to the materialized plan where that meets every budget and
    stores less."""
    improve(tree, scheme, max_depth)
    result = tree.plan()
    whole = materialize(tree.graph)
    if whole.feasible(scheme) and whole.storage() < result.storage():
        return whole
    return result
