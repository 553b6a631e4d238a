"""Propose provenance edges from tensor similarity (MGit's automated graph construction).

For a version x and an older version p, MGit's equation 1 scores
divergence as the share of the two models' edges that differ. With tensors
instead of a module DAG:

- structural = tensors that find no partner of the same dtype and shape (by
  name, content or LCS over (dtype, shape); see diff.match) / (|A| + |B|);
- contextual = element-weighted share of difference: a matched pair counts
  min(1, rel L2 of its difference) for each of its elements, an unmatched
  tensor counts 1 per element, over all elements of both.

Which versions get a proposal: the roots of the current graph (no
provenance parent and no previous version), since a later version of a path
already descends from its first one. Candidate parents are the versions
committed before it (git's commit order; within one commit, the one with
fewer exact zeros first, since pruning only adds zeros), not on its own
path. The parent is the candidate with the smallest (contextual,
structural); if even that is above the threshold, the version is a root
(trained from scratch). Values are compared on a sample: up to 4,096
evenly spaced elements of each tensor's first chunk, so the cost per pair
is bounded whatever the model size; identical chunks score 0 unread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from git_mgit.errors import MgitError
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import Tensor, match, tensors
from git_mgit.lineage.values import as_numbers
from git_mgit.progress import Progress
from git_mgit.store.chunkstore import ChunkStore

SAMPLE = 4096
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class Proposal:
    child: str
    parent: str | None  # None: a root (nothing similar enough was committed before it)
    structural: float
    contextual: float


class _Samples:
    """Evenly spaced elements of each chunk's decoded values, decoded once per chunk."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self._cache: dict[bytes, np.ndarray | None] = {}

    def of(self, t: Tensor) -> np.ndarray | None:
        if not t.segment.hashes:
            return None
        h = t.segment.hashes[0]
        if h not in self._cache:
            values = as_numbers(t.dtype, self.store.get_raw(h))
            if values is not None and len(values) > SAMPLE:
                values = values[np.linspace(0, len(values) - 1, SAMPLE).astype(np.int64)]
            self._cache[h] = values
        return self._cache[h]


def divergence(
    samples: _Samples, a: dict[str, Tensor], b: dict[str, Tensor]
) -> tuple[float, float]:
    """(structural, contextual) divergence of two models' tensors."""
    pairs = match(a, b)
    # a same-named tensor of another dtype or shape is a structural change too
    apart = [(x, y) for x, y, _ in pairs if x is None or y is None or x.key != y.key]
    unmatched = sum((x is not None) + (y is not None) for x, y in apart)
    structural = unmatched / (len(a) + len(b)) if a or b else 0.0
    total = sum(t.elements for t in a.values()) + sum(t.elements for t in b.values())
    differing = float(sum(t.elements for pair in apart for t in pair if t is not None))
    for x, y, _ in pairs:
        if x is None or y is None or x.key != y.key:
            continue
        weight = x.elements + y.elements
        if x.segment.hashes == y.segment.hashes and x.key == y.key:
            continue
        sx, sy = samples.of(x), samples.of(y)
        if sx is None or sy is None or len(sx) != len(sy):
            differing += weight
            continue
        finite = np.isfinite(sx) & np.isfinite(sy)
        norm = float(np.linalg.norm(sx[finite]))
        diff = float(np.linalg.norm(sy[finite] - sx[finite]))
        differing += weight * (min(1.0, diff / norm) if norm else float(diff > 0))
    return structural, (differing / total if total else 0.0)


def _zeros(samples: _Samples, ts: dict[str, Tensor]) -> float:
    """Share of exact zeros among the sampled float elements (pruning raises it)."""
    zeros = count = 0
    for t in ts.values():
        s = samples.of(t) if t.dtype.startswith(("F", "BF")) else None
        if s is not None and len(s):
            zeros += int(np.count_nonzero(s == 0))
            count += len(s)
    return zeros / count if count else 0.0


def propose(lineage: Lineage, threshold: float = DEFAULT_THRESHOLD) -> list[Proposal]:
    """A parent (or None: a root) for every version of the graph that has no lineage yet."""
    g = lineage.graph
    repo = lineage.repo
    topo = {
        c: i
        for i, c in enumerate(
            repo.git("rev-list", "--topo-order", "--reverse", "--all", check=False).split()
        )
    }
    store = ChunkStore(repo)
    samples = _Samples(store)
    try:
        models: dict[str, dict[str, Tensor]] = {}
        for oid, node in g.nodes.items():
            try:
                models[oid] = tensors(contents.manifests(repo, store.reader, oid, node.kind))
            except MgitError:
                continue  # objects not here, or not a manifest: it cannot be compared
        zeros = {oid: _zeros(samples, ts) for oid, ts in models.items()}

        def age(oid: str) -> tuple:
            commit = g.nodes[oid].commit
            return (topo.get(commit or "", len(topo)), zeros[oid], oid)

        children = [oid for oid in g.roots() if oid in models]
        progress = Progress("git-mgit: comparing versions", len(children))
        out = []
        try:
            for child in children:
                progress.update(1)
                path = g.nodes[child].path
                older = [
                    p
                    for p in models
                    if p != child and age(p) < age(child) and g.nodes[p].path != path
                ]
                scored = [
                    (*reversed(divergence(samples, models[p], models[child])), p)
                    for p in _candidates(older, models[child], models)
                ]
                best = min(scored, default=None)
                if best is None or best[0] > threshold:
                    ctx, st = (best[0], best[1]) if best else (1.0, 1.0)
                    out.append(Proposal(child, None, st, ctx))
                else:
                    out.append(Proposal(child, best[2], best[1], best[0]))
        finally:
            progress.finish()
        return out
    finally:
        store.close()


def _candidates(
    older: Iterable[str], child: dict[str, Tensor], models: dict[str, dict[str, Tensor]]
) -> list[str]:
    """Candidates sharing at least one (dtype, shape) with the child: the rest score 1 anyway."""
    keys = {t.key for t in child.values()}
    return [p for p in older if any(t.key in keys for t in models[p].values())]


def apply(lineage: Lineage, proposals: Iterable[Proposal]) -> int:
    """Record each proposed edge; returns how many were written."""
    n = 0
    for p in proposals:
        if p.parent is not None:
            lineage.add_edge(p.parent, p.child, function="inferred")
            n += 1
    return n
