"""Storage planning for `git mgit repack`: which chunk to store as a delta of which,
so the repository takes least space while every model version still decodes within
its recreation budget (ModelHub's Problem 1, section IV.C; docs/storage.md).

    from git_mgit.planning import Edge, Group, Scheme, StorageGraph, plan, ROOT

    g = StorageGraph(2, [Edge(ROOT, 0, 100, 100), Edge(ROOT, 1, 100, 100),
                         Edge(0, 1, 10, 120)], [Group("v1", [0, 1], budget=350)])
    p = plan(g, Scheme.INDEPENDENT)      # p.chosen[1] is the delta edge
"""

from __future__ import annotations

from git_mgit.planning.bounds import materialize, mst, spt
from git_mgit.planning.exact import ExactLimitExceeded, exact
from git_mgit.planning.graph import ROOT, Edge, Group, Plan, Scheme, StorageGraph
from git_mgit.planning.last import last, last_for_budgets
from git_mgit.planning.pas_mt import pas_mt
from git_mgit.planning.pas_pt import pas_pt
from git_mgit.planning.solve import METHODS, plan

__all__ = [
    "METHODS",
    "ROOT",
    "Edge",
    "ExactLimitExceeded",
    "Group",
    "Plan",
    "Scheme",
    "StorageGraph",
    "exact",
    "last",
    "last_for_budgets",
    "materialize",
    "mst",
    "pas_mt",
    "pas_pt",
    "plan",
    "spt",
]
