"""Traversals over the lineage graph: generators of version ids.

Every traversal is a plain generator over a `Graph`, so callers can write
their own: anything that takes the graph and a start and yields ids works
where these do. `skip(id)` leaves a version out of the output but still walks
through it; `stop(id)` yields the version but goes no further from it (MGit's
skip_fn and terminate_fn). `bisect` shows the two-way form: the caller
answers each yielded version with `send(True)` (good) or `send(False)` (bad).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator

from git_mgit.lineage.graph import EDGE_KINDS, PROVENANCE, VERSION, Graph

Predicate = Callable[[str], bool]


def _never(_: str) -> bool:
    return False


def bfs(
    g: Graph,
    start: str,
    kinds: Iterable[str] = EDGE_KINDS,
    skip: Predicate = _never,
    stop: Predicate = _never,
) -> Iterator[str]:
    """Breadth first along edges of `kinds`, parents before children where the graph allows."""
    kinds = tuple(kinds)
    seen, queue = {start}, deque([start])
    while queue:
        oid = queue.popleft()
        if not skip(oid):
            yield oid
        if stop(oid):
            continue
        for child in sorted(g.children(oid, kinds), key=g.order_key):
            if child not in seen:
                seen.add(child)
                queue.append(child)


def dfs(
    g: Graph,
    start: str,
    kinds: Iterable[str] = EDGE_KINDS,
    skip: Predicate = _never,
    stop: Predicate = _never,
) -> Iterator[str]:
    """Depth first (pre-order), children in commit order."""
    kinds = tuple(kinds)
    seen: set[str] = set()
    stack = [start]
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        if not skip(oid):
            yield oid
        if not stop(oid):
            stack.extend(sorted(g.children(oid, kinds), key=g.order_key, reverse=True))


def versions(
    g: Graph, start: str, skip: Predicate = _never, stop: Predicate = _never
) -> Iterator[str]:
    """`start` and its later versions, following version edges only."""
    return bfs(g, start, (VERSION,), skip, stop)


def provenance(
    g: Graph, start: str, skip: Predicate = _never, stop: Predicate = _never
) -> Iterator[str]:
    """`start` and everything derived from it, following provenance edges only."""
    return bfs(g, start, (PROVENANCE,), skip, stop)


def all_parents_first(
    g: Graph,
    start: str,
    kinds: Iterable[str] = (PROVENANCE,),
    skip: Predicate = _never,
    stop: Predicate = _never,
) -> Iterator[str]:
    """`start`'s descendants, each only after every parent of it that is also a descendant."""
    kinds = tuple(kinds)
    reach = set(bfs(g, start, kinds, stop=stop))
    waiting = {oid: sum(1 for p in g.parents(oid, kinds) if p in reach) for oid in reach}
    waiting[start] = 0
    ready = [start]
    while ready:
        oid = ready.pop(0)
        if not skip(oid):
            yield oid
        for child in sorted(g.children(oid, kinds), key=g.order_key):
            if child in waiting:
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)


def bisect(chain: list[str]) -> Generator[str, bool, str | None]:
    """Binary search for the first bad version of an ordered chain (good ... bad).

    Yields the version to test; send True if it is good, False if bad. Returns
    the first bad version (None if the chain is empty).
    """
    lo, hi = 0, len(chain) - 1
    if hi < 0:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        good = yield chain[mid]
        if good:
            lo = mid + 1
        else:
            hi = mid
    return chain[lo]


TRAVERSALS: dict[str, Callable[..., Iterator[str]]] = {
    "bfs": bfs,
    "dfs": dfs,
    "versions": versions,
    "provenance": provenance,
    "topological": all_parents_first,
}
