"""PAS-MT (ModelHub Algorithm 1): start from the least-storage tree, then buy back
recreation where budgets are broken, one edge swap at a time."""

from __future__ import annotations

from git_mgit.planning.bounds import mst
from git_mgit.planning.gain import reduce_violations
from git_mgit.planning.graph import Plan, Scheme, StorageGraph, check_max_depth
from git_mgit.planning.polish import cap_depth, finish
from git_mgit.planning.tree import Tree


def pas_mt(g: StorageGraph, scheme: Scheme, max_depth: int | None = None) -> Plan:
    """MST, capped to max_depth, repaired by the Eq. 1 / Eq. 2 gain, then polished."""
    check_max_depth(max_depth)
    tree = Tree.of(mst(g))
    cap_depth(tree, max_depth)
    reduce_violations(tree, scheme, max_depth)
    return finish(tree, scheme, max_depth)
