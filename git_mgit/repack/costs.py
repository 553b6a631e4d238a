"""The storage graph of a survey: what each candidate edge would store and cost to apply.

Storage cost: the encoded size of the chunk stored whole (the edge from the
root) or as a delta of a candidate base, estimated the way the encoder
chooses codecs: by encoding the same sample windows of both chunks and
scaling to the chunk's length (exact for chunks up to the sample size).
The edge an object is stored with now costs its real size; the others 2%
more than estimated, so a repack moves an object only for a gain larger
than the estimate's error. `Costed.assuming` costs a plan the way the next
repack would see it once carried out, so a repack can settle its own plan
and one run is final. Recreation cost: the bytes one level of a delta chain decodes, so a
version's cost is its size times the average chain length it reads
through, and a budget is a multiple of the version's size.

Chunks are decoded (and verified) one connected component at a time, so
memory holds one tensor's samples across versions, never the repository.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from git_mgit.codecs import codec
from git_mgit.codecs.objectformat import Codec
from git_mgit.console.progress import Progress
from git_mgit.planning.graph import ROOT, Edge, Group, Plan, StorageGraph
from git_mgit.repack.survey import Survey
from git_mgit.store.chunkstore import ChunkStore

# Estimates of edges an object does not have are inflated this much: sampling is
# not exact, and re-encoding for a gain within the error would churn every run.
SWITCH = 1.02


@dataclass(frozen=True)
class Budgets:
    """Recreation budgets as multiples of a version's size (its decode work stored whole)."""

    heads: float = 2.0  # versions at a branch tip or a tag
    others: float = 8.0

    def of(self, sv: Survey, version: str) -> float:
        size = sum(sv.chunks[h].length for h in sv.versions[version])
        return size * (self.heads if version in sv.heads else self.others)


@dataclass
class Costed:
    graph: StorageGraph  # as this repack costs it: edges objects have now at their real size
    nodes: list[bytes]  # node index -> content hash
    index: dict[bytes, int]
    estimates: dict[Edge, float]  # every edge of graph -> its estimate, no SWITCH margin
    current: frozenset[Edge]  # the edges objects are stored with now

    def assuming(self, plan: Plan) -> StorageGraph:
        """The graph as the next repack would cost it had this plan been carried out: the
        plan's edges at their real size (or estimate, if new), every other edge raised by SWITCH."""
        chosen = set(plan.chosen)
        return self._costed(lambda e: self._size(e) if e in chosen else self.estimates[e] * SWITCH)

    def estimated(self) -> StorageGraph:
        """Every edge at its real size or estimate, none raised: what the MST and SPT bounds use."""
        return self._costed(self._size)

    def settled(self, plan: Plan) -> float:
        """The plan's storage once carried out: its estimated edges without the SWITCH margin."""
        return math.fsum(self._size(e) for e in plan.chosen)

    def plan_of(self, other: Plan) -> Plan:
        """A plan of a re-costed copy of the graph, on this graph's edges."""
        edges = {(e.src, e.dst): e for e in self.graph.edges}
        return Plan(self.graph, [edges[e.src, e.dst] for e in other.chosen])

    def _size(self, e: Edge) -> float:
        return e.storage if e in self.current else self.estimates[e]

    def _costed(self, storage: Callable[[Edge], float]) -> StorageGraph:
        edges = [replace(e, storage=storage(e)) for e in self.graph.edges]
        return StorageGraph(self.graph.n, edges, self.graph.groups)


def measure(store: ChunkStore, sv: Survey, budgets: Budgets) -> Costed:
    nodes = list(sv.chunks)
    index = {h: i for i, h in enumerate(nodes)}
    into: dict[bytes, list[bytes]] = {}
    for base, h in sorted(sv.pairs):  # sorted: the same repository always plans the same
        into.setdefault(h, []).append(base)
    edges: list[Edge] = []
    estimates: dict[Edge, float] = {}
    current: set[Edge] = set()

    def add(src: int, dst: int, estimate: float, real: float | None) -> None:
        """An edge at its real size where its object is stored so now, else estimate + SWITCH."""
        edge = Edge(
            src, dst, estimate * SWITCH if real is None else real, sv.chunks[nodes[dst]].length
        )
        edges.append(edge)
        estimates[edge] = estimate
        if real is not None:
            current.add(edge)

    progress = Progress("measuring deltas", sum(c.length for c in sv.chunks.values()))
    try:
        for component in sv.components():
            samples = {}
            for h in component:
                info = sv.chunks[h]
                samples[h] = codec.sampled(store.get_raw(h), info.dtype)
                progress.update(info.length)
            for h in component:
                dtype = sv.chunks[h].dtype
                sample, scale = samples[h]
                # The object as it is stored now counts at its real size, not an estimate
                # (a `qdelta` object is smaller than any lossless estimate says).
                base_now, size = store.chain_of(h)[0], float(store.locate(h)[1])
                whole = codec.estimate_whole(sample, dtype) * scale
                add(ROOT, index[h], whole, size if base_now is None else None)
                for base in into.get(h, ()):
                    sizes = codec.estimate(sample, dtype, samples[base][0])
                    delta = min(sizes[Codec.XOR], sizes[Codec.SUB]) * scale
                    add(index[base], index[h], delta, size if base == base_now else None)
    finally:
        progress.finish()
    groups = [
        Group(sv.labels[v], [index[h] for h in hashes], budgets.of(sv, v))
        for v, hashes in sv.versions.items()
        if hashes
    ]
    graph = StorageGraph(len(nodes), edges, groups)
    return Costed(graph, nodes, index, estimates, frozenset(current))
