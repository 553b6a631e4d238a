"""Propose provenance edges from tensor similarity (MGit's automated graph construction).

Scores: MGit's equation 1 counts the edges of two module DAGs that differ;
we have tensors instead, so for a candidate parent P and a version X, after
pairing their tensors as `diff.match` does (name, content, then LCS on
dtype and shape):

- structural = tensors without a partner of the same dtype and shape,
  over |P| + |X| tensors;
- contextual = element-weighted difference: a matched pair counts
  c * min(1, ||X - P|| / ||P||) for each of its elements on both sides,
  where c is the share of its elements that differ at all; an unmatched
  tensor counts 1 per element; over the elements of both models.

The factor c is ours, not the paper's: equation 1 counts parameters that
differ, and the relative L2 norm alone cannot tell a pruned model's parent
(whose surviving weights it holds bit for bit) from that parent's own
parent (which differs in every weight, by a little). A full fine-tune
changes nearly every element, so for it c is about 1.

X's parent is the candidate with the smallest (contextual, structural),
the earlier one on a tie; if even that one's contextual score is above the
threshold, X is a root (trained from scratch).

Which versions get a proposal: the roots of the graph, i.e. versions with
neither a provenance parent nor a previous version. A later version of a
path already descends from the path's first version by a version edge;
giving it a second lineage would contradict that, so proposing for the
first version covers the whole path.

Candidates for X: every other version committed before X that does not
descend from X. "Before" is git's order, `rev-list --date-order` (parents
before children, otherwise commit time), which also orders commits that
share a timestamp. Versions of the same commit tie, and are ordered by
sparsity first (one with PRUNED more of its elements exactly zero comes
after: pruning only adds zeros, while a base's few zero-initialised biases
must not count), then by centrality (see _tie_order: a base is the L2
medoid of its fine-tunes), then by path. Earlier versions of X's own path are not
excluded: a root has one only if its file was deleted and re-added, and then
that old version is a fair candidate.

Cost: a pair with no (dtype, shape) in common has structural 1 and is not
scored. Values are compared on a sample: the chunk hashes say which chunks
of a matched pair differ (identical tensors score 0 unread), and at most
SAMPLE evenly spaced elements of the first chunk that differs stand for
all of them. Each distinct chunk is decoded once and its sample kept (8 KiB
of float64); so the work is about one decode of every version's first
chunks plus arithmetic on samples per pair. Progress shows the bytes decoded.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import Tensor, match, tensors
from git_mgit.lineage.graph import EDGE_KINDS, Graph
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.dtypes import DTYPES
from git_mgit.tensors.numerics import element_width, to_float64

SAMPLE = 1024
DEFAULT_THRESHOLD = 0.5
PRUNED = 0.1  # share of elements: more exact zeros than this marks a pruned version

Model = dict[str, Tensor]


@dataclass(frozen=True)
class Proposal:
    child: str
    parent: str | None  # None: a root (nothing similar enough was committed before it)
    structural: float
    contextual: float


@dataclass(frozen=True)
class _Sample:
    stride: int  # elements between samples
    values: np.ndarray


class _Samples:
    """Evenly spaced elements of a tensor's chunk, decoded once per distinct chunk."""

    def __init__(self, store: ChunkStore, progress: Progress) -> None:
        self.store, self.progress = store, progress
        self._cache: dict[tuple[bytes, str, int], np.ndarray | None] = {}

    def of(self, t: Tensor, index: int = 0) -> _Sample | None:
        width = element_width(t.dtype)
        if not t.hashes or width is None:
            return None
        per_chunk = t.chunk_size // width
        stride = -(-min(per_chunk, t.elements - index * per_chunk) // SAMPLE)
        key = (t.hashes[index], t.dtype, stride)
        if key not in self._cache:
            raw = self.store.get_raw(t.hashes[index])
            self.progress.update(len(raw))
            elements = np.frombuffer(raw, np.dtype((np.void, width)))[::stride]
            self._cache[key] = to_float64(t.dtype, elements.tobytes())
        values = self._cache[key]
        return None if values is None else _Sample(stride, values)


def _paired(x: _Sample, y: _Sample) -> tuple[np.ndarray, np.ndarray]:
    """The sampled elements both hold (strides differ only if the chunk size changed)."""
    if x.stride == y.stride:
        n = min(len(x.values), len(y.values))
        return x.values[:n], y.values[:n]
    px, py = np.arange(len(x.values)) * x.stride, np.arange(len(y.values)) * y.stride
    _, ix, iy = np.intersect1d(px, py, assume_unique=True, return_indices=True)
    return x.values[ix], y.values[iy]


def _pair_sample(
    samples: _Samples, x: Tensor, y: Tensor
) -> tuple[float, np.ndarray, np.ndarray] | None:
    """(share of elements in chunks that differ, samples of x and y from the first of them).

    Chunks with equal hashes are identical, so the hashes alone say where the
    two differ; the values are sampled there. None: no per-element numbers.
    """
    index, share = 0, 1.0
    if x.chunk_size == y.chunk_size and len(x.hashes) > 1:
        per_chunk = x.chunk_size // (element_width(x.dtype) or 1)
        differ = [i for i, (h, k) in enumerate(zip(x.hashes, y.hashes, strict=True)) if h != k]
        index = differ[0]
        inside = sum(min(per_chunk, x.elements - i * per_chunk) for i in differ)
        share = inside / x.elements
    sx, sy = samples.of(x, index), samples.of(y, index)
    if sx is None or sy is None:
        return None
    return share, *_paired(sx, sy)


def _value_divergence(samples: _Samples, parent: Tensor, child: Tensor) -> float:
    """Changed share x min(1, ||child - parent|| / ||parent||), sampled; 1 if no numbers."""
    found = _pair_sample(samples, parent, child)
    if found is None:
        return 1.0
    share, a, b = found
    if not len(a):
        return 0.0
    changed = share * float(np.mean((a != b) & ~(np.isnan(a) & np.isnan(b))))
    finite = np.isfinite(a) & np.isfinite(b)
    norm = float(np.linalg.norm(a[finite]))
    diff = float(np.linalg.norm(b[finite] - a[finite]))
    return changed * (min(1.0, diff / norm) if norm else float(diff > 0))


def _divergence(samples: _Samples, parent: Model, child: Model) -> tuple[float, float]:
    """(structural, contextual) divergence of `child` from `parent`."""
    unmatched, differing = 0, 0.0
    for x, y, _ in match(parent, child):
        if x is None or y is None or x.key != y.key:
            lone = [t for t in (x, y) if t is not None]
            unmatched += len(lone)
            differing += sum(t.elements for t in lone)
        elif x.hashes != y.hashes:
            differing += (x.elements + y.elements) * _value_divergence(samples, x, y)
    count = len(parent) + len(child)
    total = sum(t.elements for m in (parent, child) for t in m.values())
    return (unmatched / count if count else 0.0), (differing / total if total else 0.0)


class _Scores:
    """_divergence() per ordered pair of versions, computed once."""

    def __init__(self, samples: _Samples, models: dict[str, Model]) -> None:
        self.samples, self.models = samples, models
        self.keys = {oid: {t.key for t in m.values()} for oid, m in models.items()}
        self._memo: dict[tuple[str, str], tuple[float, float]] = {}

    def related(self, a: str, b: str) -> bool:
        """Whether the two share a (dtype, shape): if not, both scores are 1."""
        return not self.keys[a].isdisjoint(self.keys[b])

    def __call__(self, parent: str, child: str) -> tuple[float, float]:
        if not self.related(parent, child):
            return 1.0, 1.0
        if (parent, child) not in self._memo:
            self._memo[parent, child] = _divergence(
                self.samples, self.models[parent], self.models[child]
            )
        return self._memo[parent, child]


def _zeros(samples: _Samples, model: Model) -> float:
    """Share of exact zeros among the sampled elements of the floating-point tensors."""
    zeros = count = 0
    for t in model.values():
        kind = DTYPES[t.dtype].kind if t.dtype in DTYPES else None
        s = samples.of(t) if kind == "float" else None
        if s is not None:
            zeros += int(np.count_nonzero(s.values == 0))
            count += len(s.values)
    return zeros / count if count else 0.0


def _sq_distance(samples: _Samples, x: Model, y: Model) -> float:
    """||y - x||^2 over the tensors that match, estimated from the samples."""
    total = 0.0
    for a, b, _ in match(x, y):
        if a is None or b is None or a.key != b.key or a.hashes == b.hashes:
            continue
        found = _pair_sample(samples, a, b)
        if found is not None and len(found[1]):
            share, va, vb = found
            d = np.abs(vb - va)
            total += share * a.elements / len(d) * float(np.sum(d[np.isfinite(d)] ** 2))
    return total


def _tie_order(g: Graph, members: list[str], scores: _Scores, threshold: float) -> list[str]:
    """Versions of one commit, oldest first.

    Sparsity first: one with PRUNED more of its elements exactly zero comes
    after. Then centrality: the most neighbours within the threshold, then
    the smallest sum of squared L2 distances to them. A base is the L2 medoid
    of its fine-tunes: with independent updates, |ft_a - ft_b|^2 is
    |ft_a - base|^2 + |base - ft_b|^2, so the base's sum is the smallest.
    Clearly sparser members are nobody's neighbours here: they come later anyway.
    """
    zeros = {m: _zeros(scores.samples, scores.models[m]) for m in members}

    def centrality(m: str) -> tuple[int, float]:
        near = [
            o
            for o in members
            if o != m and zeros[o] - zeros[m] < PRUNED and scores(*sorted((m, o)))[1] <= threshold
        ]
        spread = sum(_sq_distance(scores.samples, scores.models[m], scores.models[o]) for o in near)
        return -len(near), spread

    left = sorted(members, key=lambda m: (*centrality(m), g.nodes[m].path or "", m))
    out = []
    while left:
        pick = next(m for m in left if all(zeros[m] - zeros[o] < PRUNED for o in left))
        out.append(pick)
        left.remove(pick)
    return out


def _ranks(
    repo: Repo, g: Graph, scores: _Scores, children: set[str], threshold: float
) -> dict[str, tuple[int, int]]:
    """(commit position in git's date order, place within the commit) per version."""
    commits = {g.nodes[oid].commit for oid in scores.models} - {None}
    order = repo.git(
        "rev-list", "--date-order", "--reverse", "--stdin", input="\n".join(commits).encode()
    ).split()
    position = {c: i for i, c in enumerate(order)}
    groups: dict[int, list[str]] = {}
    for oid in scores.models:
        groups.setdefault(position.get(g.nodes[oid].commit or "", len(position)), []).append(oid)
    ranks = {}
    for pos, members in groups.items():
        if len(members) > 1 and not children.isdisjoint(members):
            members = _tie_order(g, members, scores, threshold)
        for i, oid in enumerate(members):
            ranks[oid] = (pos, i)
    return ranks


def _descendants(g: Graph, oid: str, proposed: dict[str, list[str]]) -> set[str]:
    """Everything derived from `oid`, by any edge or an edge proposed so far."""
    seen, stack = {oid}, [oid]
    while stack:
        at = stack.pop()
        for child in [*g.children(at, EDGE_KINDS), *proposed.get(at, ())]:
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def _models(lineage: Lineage, store: ChunkStore) -> dict[str, Model]:
    """The versions whose manifests and tensor objects are here; a warning counts the rest."""
    models, skipped = {}, 0
    for oid, node in lineage.graph.nodes.items():
        try:
            model = tensors(contents.manifests(lineage.repo, store.reader, oid, node.kind))
        except MgitError:
            skipped += 1
            continue
        if store.missing([h for t in model.values() for h in t.hashes]):
            skipped += 1
            continue
        models[oid] = model
    if skipped:
        print(
            f"git-mgit: warning: {skipped} version(s) left out: their manifests or tensor "
            "objects are not here (`git mgit fetch --all` brings them)",
            file=sys.stderr,
        )
    return models


def propose(lineage: Lineage, threshold: float = DEFAULT_THRESHOLD) -> list[Proposal]:
    """A parent (or None: a root) for every root of the graph, oldest first."""
    g = lineage.graph
    store = ChunkStore(lineage.repo)
    progress = Progress("git-mgit: reading tensor samples")
    try:
        models = _models(lineage, store)
        children = {oid for oid in g.roots() if oid in models}
        if not children:
            return []
        scores = _Scores(_Samples(store, progress), models)
        ranks = _ranks(lineage.repo, g, scores, children, threshold)
        proposed: dict[str, list[str]] = {}
        out = []
        for child in sorted(children, key=ranks.__getitem__):
            below = _descendants(g, child, proposed)
            scored = [
                (*reversed(scores(p, child)), ranks[p], p)
                for p in models
                if ranks[p] < ranks[child] and p not in below and scores.related(p, child)
            ]
            contextual, structural, _, parent = min(scored, default=(1.0, 1.0, None, None))
            if parent is None or contextual > threshold:
                out.append(Proposal(child, None, structural, contextual))
            else:
                out.append(Proposal(child, parent, structural, contextual))
                proposed.setdefault(parent, []).append(child)
        return out
    finally:
        progress.finish()
        store.close()


def apply(lineage: Lineage, proposals: Iterable[Proposal]) -> int:
    """Record each proposed edge (function 'inferred'); returns how many were written."""
    n = 0
    for p in proposals:
        if p.parent is not None:
            lineage.add_edge(p.parent, p.child, function="inferred")
            n += 1
    return n
