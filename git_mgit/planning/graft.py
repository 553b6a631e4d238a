"""The last resort of the repair: graft nodes of over-budget groups onto their shortest
paths from ROOT.

The gain-driven swaps can get stuck: the edge a node needs may start at one of
its own descendants, and moving that descendant first gains nothing by Eq. 1/2.
Re-parenting the nodes of a path onto their shortest-path-tree edges, top-down,
and only where that lowers the node's cost, never raises any node's recreation
cost (so satisfied groups stay satisfied) and never closes a cycle (a base in
the node's own subtree costs at least as much as the node). Grafted groups reach their least possible cost, the one they have
in the SPT; hence, without a depth cap, the repair meets every budget whenever
any plan can. `polish.improve` then wins back storage where the budgets allow.
"""

from __future__ import annotations

from git_mgit.planning.bounds import spt
from git_mgit.planning.graph import ROOT, Scheme, within
from git_mgit.planning.tree import Tree


def graft_shortest_paths(tree: Tree, scheme: Scheme, max_depth: int | None = None) -> None:
    """Graft the nodes of each violated group, the ones furthest above their shortest
    path first, until the group meets its budget (or the depth cap forbids more)."""
    g = tree.graph
    shortest = spt(g)
    for k, group in enumerate(g.groups):
        if within(tree.cost(k, scheme), group.budget):
            continue
        nodes = sorted(set(group.nodes), key=lambda v: shortest.recreation(v) - tree.rec[v])
        for v in nodes:
            path = []
            u = v
            while u != ROOT:
                path.append(u)
                u = shortest.chosen[u].src
            for w in reversed(path):
                e = shortest.chosen[w]
                if tree.rec[e.src] + e.recreation >= tree.rec[w]:
                    continue  # already shortest; also true whenever e.src is below w
                if max_depth is None or tree.chain_fits(e.src, tree.height(w), max_depth):
                    tree.set_parent(w, e)
            if within(tree.cost(k, scheme), group.budget):
                break
