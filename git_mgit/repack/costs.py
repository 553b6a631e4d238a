"""The storage graph of a survey: what each candidate edge would store and cost to apply.

Storage cost: the encoded size of the chunk stored whole (the edge from the
root) or as a delta of a candidate base, estimated the way the encoder
chooses codecs: by encoding the same sample windows of both chunks and
scaling to the chunk's length (exact for chunks up to the sample size).
The edge an object is stored with now costs its real size; the others 2%
more than estimated, so a repack moves an object only for a gain larger
than the estimate's error. Recreation cost: the bytes one level of a delta chain decodes, so a
version's cost is its size times the average chain length it reads
through, and a budget is a multiple of the version's size.

Chunks are decoded (and verified) one connected component at a time, so
memory holds one tensor's samples across versions, never the repository.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from git_mgit.codecs import codec
from git_mgit.codecs.objectformat import Codec
from git_mgit.planning.graph import ROOT, Edge, Group, Plan, StorageGraph
from git_mgit.progress import Progress
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
    graph: StorageGraph
    nodes: list[bytes]  # node index -> content hash
    index: dict[bytes, int]
    inflated: frozenset[Edge]  # estimated edges, their cost raised by SWITCH

    def assuming(self, plan: Plan) -> StorageGraph:
        """The graph as the next repack would cost it had this plan been carried out:
        the plan's edges at their estimate, the others still raised by SWITCH."""
        return self._deflated(set(plan.chosen) & self.inflated)

    def estimated(self) -> StorageGraph:
        """Every edge at its estimate, none raised: the graph the MST and SPT bounds use."""
        return self._deflated(self.inflated)

    def _deflated(self, which: frozenset[Edge] | set[Edge]) -> StorageGraph:
        edges = [
            replace(e, storage=e.storage / SWITCH) if e in which else e for e in self.graph.edges
        ]
        return StorageGraph(self.graph.n, edges, self.graph.groups)

    def settled(self, plan: Plan) -> float:
        """The plan's storage once carried out: its estimated edges without the SWITCH margin."""
        return math.fsum(
            e.storage / SWITCH if e in self.inflated else e.storage for e in plan.chosen
        )

    def plan_of(self, other: Plan) -> Plan:
        """A plan of a re-costed copy of the graph, on this graph's edges."""
        edges = {(e.src, e.dst): e for e in self.graph.edges}
        return Plan(self.graph, [edges[e.src, e.dst] for e in other.chosen])


def _sample(store: ChunkStore, h: bytes, dtype: str) -> tuple[memoryview, float]:
    """The chunk's sample windows (decoded and verified) and the factor to scale sizes by."""
    raw = memoryview(store.get_raw(h))
    width, _ = codec.layout(dtype, len(raw))
    sample = codec.sample(raw, width)
    return sample, len(raw) / max(len(sample), 1)


def measure(store: ChunkStore, sv: Survey, budgets: Budgets) -> Costed:
    nodes = list(sv.chunks)
    index = {h: i for i, h in enumerate(nodes)}
    into: dict[bytes, list[bytes]] = {}
    for base, h in sv.pairs:
        into.setdefault(h, []).append(base)
    edges: list[Edge] = []
    inflated: set[Edge] = set()
    progress = Progress("measuring deltas", sum(c.length for c in sv.chunks.values()))
    try:
        for component in sv.components():
            samples = {}
            for h in component:
                info = sv.chunks[h]
                samples[h] = _sample(store, h, info.dtype)
                progress.update(info.length)
            for h in component:
                info = sv.chunks[h]
                sample, scale = samples[h]
                # The object as it is stored now: its real size, not an estimate (a
                # `qdelta` object is smaller than any lossless estimate says).
                current, size = store.chain_of(h)[0], store.locate(h)[1]
                if current is None:
                    edges.append(Edge(ROOT, index[h], float(size), info.length))
                else:
                    sizes = codec.estimate(sample, info.dtype)
                    stored = sizes[codec.standalone(sizes)] * scale * SWITCH
                    edges.append(Edge(ROOT, index[h], stored, info.length))
                    inflated.add(edges[-1])
                for base in into.get(h, ()):
                    if base == current:
                        edges.append(Edge(index[base], index[h], float(size), info.length))
                        continue
                    sizes = codec.estimate(sample, info.dtype, samples[base][0])
                    delta = min(sizes[Codec.XOR], sizes[Codec.SUB]) * scale * SWITCH
                    edges.append(Edge(index[base], index[h], delta, info.length))
                    inflated.add(edges[-1])
    finally:
        progress.finish()
    groups = [
        Group(sv.labels[v], [index[h] for h in hashes], budgets.of(sv, v))
        for v, hashes in sv.versions.items()
        if hashes
    ]
    return Costed(StorageGraph(len(nodes), edges, groups), nodes, index, frozenset(inflated))
