"""The entry point `git mgit repack` calls: a heuristic plan, made optimal where the
instance is small enough to search exhaustively."""

from __future__ import annotations

from collections.abc import Callable

from git_mgit.planning.exact import DEFAULT_LIMIT, exact, search_space
from git_mgit.planning.graph import Plan, Scheme, StorageGraph
from git_mgit.planning.pas_mt import pas_mt
from git_mgit.planning.pas_pt import pas_pt

Heuristic = Callable[[StorageGraph, Scheme, int | None], Plan]
METHODS: dict[str, tuple[Heuristic, ...]] = {
    "pas-mt": (pas_mt,),
    "pas-pt": (pas_pt,),
    "best": (pas_mt, pas_pt),
}


def rank(p: Plan, scheme: Scheme) -> tuple[float, float]:
    """Order of preference: least budget excess first (0 when feasible), then least storage."""
    return (p.excess(scheme), p.storage())


def plan(
    g: StorageGraph,
    scheme: Scheme,
    method: str = "best",
    max_depth: int | None = None,
    exact_limit: int = DEFAULT_LIMIT,
) -> Plan:
    """A storage plan for g: the better of the method's heuristics ("best" runs both),
    replaced by the optimum when g is small enough to enumerate (`search_space` at most
    `exact_limit`, so `exact` is sure to finish).

    Always returns a plan; one that cannot meet some budget is the best effort, and
    its `violations()` say which groups are over.
    """
    if method not in METHODS:
        raise ValueError(f"unknown planning method {method!r}: use one of {', '.join(METHODS)}")
    found = min((h(g, scheme, max_depth) for h in METHODS[method]), key=lambda p: rank(p, scheme))
    if search_space(g, exact_limit) > exact_limit:
        return found
    optimum = exact(g, scheme, exact_limit, max_depth, incumbent=found)
    return found if optimum is None else optimum
