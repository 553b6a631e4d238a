"""Tensor-level differences between two model versions, streamed from objects.

Matching, in order: tensors with the same name pair up; among the rest, a
tensor with identical content (same chunk hashes, dtype and shape) is a
rename; what is left is matched as MGit matches parameters across
architectures (paper section 4): the longest common subsequence of the two
tensor lists in natural name order, equal when (dtype, shape) are ("matched",
a rename by structure). Anything still unpaired was added or removed.

Values are compared chunk by chunk, never by smudging a file. A chunk whose
content hash is the same on both sides is identical: the new side's copy is
not read (the old side's is, since ||A|| needs every element). A new chunk
whose delta chain reaches the old chunk just read is decoded against it
rather than by walking the chain down to its bottom. Elements become float64 a window at a time,
so memory stays at the two current chunks. Per pair:

- changed_fraction: elements whose bit patterns differ (NaN payloads and -0.0
  count), or whose values differ when the dtypes do;
- max_abs: the largest |B - A|;
- rel_l2: ||B - A|| / ||A|| (inf when A is all zeros and B is not).

A difference that is NaN (a NaN on either side) is left out of max_abs and
rel_l2; one that is infinite makes both infinite; ||A|| counts A's finite
elements. Packed 4- and 6-bit dtypes have no per-element view: no numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from git_mgit import codecs
from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.numerics import WINDOW, element_width, to_float64

STATUSES = ("changed", "added", "removed", "renamed", "matched", "unchanged")


@dataclass(frozen=True)
class Tensor:
    """One tensor of a model version, as its manifest describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    segment: mf.Segment
    chunk_size: int

    @property
    def hashes(self) -> tuple[bytes, ...]:
        return self.segment.hashes

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        return self.dtype, self.shape


@dataclass(frozen=True)
class TensorChange:
    old_name: str | None
    new_name: str | None
    status: str  # added | removed | renamed | matched | changed | unchanged
    old_dtype: str | None = None
    new_dtype: str | None = None
    old_shape: tuple[int, ...] | None = None
    new_shape: tuple[int, ...] | None = None
    elements: int = 0  # of the new tensor (the old one if removed)
    changed_fraction: float | None = None  # None: not computed (--stat, sizes differ, packed)
    max_abs: float | None = None
    rel_l2: float | None = None


@dataclass
class ModelDiff:
    changes: list[TensorChange] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Tensors per status, in STATUSES order, statuses with none left out."""
        found = [c.status for c in self.changes]
        return {s: found.count(s) for s in STATUSES if s in found}

    def summary(self) -> str:
        """'2 changed, 1 added, 3 unchanged'."""
        return ", ".join(f"{n} {s}" for s, n in self.counts().items()) or "no tensors"


def tensors(manifests: dict[str, mf.Manifest]) -> dict[str, Tensor]:
    """Every tensor of a model (all shards of a folder), by name."""
    out: dict[str, Tensor] = {}
    for path, m in manifests.items():
        for name, seg in m.tensors().items():
            if name in out:
                raise MgitError(f"tensor {name!r} is in two shards of the model (second: {path})")
            out[name] = Tensor(name, seg.dtype or "", tuple(seg.shape or ()), seg, m.chunk_size)
    return out


def natural_key(name: str) -> list[str | int]:
    """'layer.10' after 'layer.9': digit runs compare as numbers."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def lcs(ka: Sequence[Hashable], kb: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of two key lists (MGit's layer matching)."""
    n, m = len(ka), len(kb)
    table = [[0] * (m + 1) for _ in range(n + 1)]  # table[i][j]: the LCS of ka[i:] and kb[j:]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if ka[i] == kb[j] else max(below[j], row[j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if ka[i] == kb[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _lcs(a: list[Tensor], b: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    """Longest common subsequence of the two lists, equal on (dtype, shape)."""
    common = {t.key for t in a} & {t.key for t in b}
    a = [t for t in a if t.key in common]  # the others can match nothing: O(n*m) on fewer
    b = [t for t in b if t.key in common]
    return [(a[i], b[j]) for i, j in lcs([t.key for t in a], [t.key for t in b])]


def match(
    old: dict[str, Tensor], new: dict[str, Tensor]
) -> list[tuple[Tensor | None, Tensor | None, str]]:
    """(old, new, how) for every tensor of both; how: 'name', 'content', 'structure' or ''."""
    pairs: list[tuple[Tensor | None, Tensor | None, str]] = [
        (old[n], new[n], "name") for n in old if n in new
    ]
    left = sorted((t for n, t in old.items() if n not in new), key=lambda t: natural_key(t.name))
    right = sorted((t for n, t in new.items() if n not in old), key=lambda t: natural_key(t.name))
    twins: dict[tuple, list[Tensor]] = {}
    for t in left:
        twins.setdefault((t.hashes, t.key), []).append(t)
    renamed = set()  # names of both sides: a name is on one side only here
    for t in right:
        same = twins.get((t.hashes, t.key))
        if same:
            x = same.pop(0)
            renamed.update((x.name, t.name))
            pairs.append((x, t, "content"))
    left = [t for t in left if t.name not in renamed]
    right = [t for t in right if t.name not in renamed]
    matched = set()
    for x, y in _lcs(left, right):
        matched.update((x.name, y.name))
        pairs.append((x, y, "structure"))
    pairs += [(t, None, "") for t in left if t.name not in matched]
    pairs += [(None, t, "") for t in right if t.name not in matched]
    return pairs


class _Chunks:
    """One tensor's chunks in order, one decoded at a time, taken a window at a time."""

    def __init__(self, store: ChunkStore, t: Tensor, width: int, progress: Progress | None):
        self.store, self.t, self.width, self.progress = store, t, width, progress
        self.index = 0  # of the next chunk
        self.current: tuple[bytes, bytearray] | None = None
        self.view = memoryview(b"")

    @property
    def left(self) -> int:
        """Elements not yet taken from the current chunk."""
        return len(self.view) // self.width

    @property
    def next_hash(self) -> bytes:
        return self.t.hashes[self.index]

    def load(self, known: tuple[bytes, bytearray] | None = None) -> None:
        h = self.next_hash
        self.current, self.view = None, memoryview(b"")  # let the previous chunk go first
        raw = codecs.decode_all(self.store.decoder(h, known))
        if self.progress:
            self.progress.update(len(raw))
        self.current, self.view, self.index = (h, raw), memoryview(raw), self.index + 1

    def skip(self) -> None:
        self.index += 1

    def take(self, n: int) -> memoryview:
        out, self.view = self.view[: n * self.width], self.view[n * self.width :]
        return out


@dataclass
class _Stats:
    changed: int = 0
    max_abs: float = 0.0
    diff_sq: float = 0.0
    base_sq: float = 0.0

    def base(self, dtype: str, raw: memoryview) -> None:
        x = to_float64(dtype, raw)
        assert x is not None
        self.base_sq += float(np.sum(np.abs(x[np.isfinite(x)]) ** 2))

    def pair(self, a: _Chunks, ra: memoryview, b: _Chunks, rb: memoryview) -> None:
        xa, xb = to_float64(a.t.dtype, ra), to_float64(b.t.dtype, rb)
        assert xa is not None and xb is not None
        if a.t.dtype == b.t.dtype:
            bits = f"u{a.width}"
            differs = np.frombuffer(ra, bits) != np.frombuffer(rb, bits)
        else:
            differs = ~((xa == xb) | (np.isnan(xa) & np.isnan(xb)))
        self.changed += int(np.count_nonzero(differs))
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.abs(xb - xa)
            d = d[~np.isnan(d)]
            if d.size:
                self.max_abs = max(self.max_abs, float(d.max()))
                self.diff_sq += float(np.sum(d**2))
            self.base(a.t.dtype, ra)

    def result(self, n: int) -> tuple[float, float, float]:
        if self.base_sq:
            rel = math.sqrt(self.diff_sq) / math.sqrt(self.base_sq)
        else:
            rel = math.inf if self.diff_sq else 0.0
        return (self.changed / n if n else 0.0), self.max_abs, rel


def _compare(
    store: ChunkStore, a: Tensor, b: Tensor, progress: Progress | None
) -> tuple[float, float, float]:
    """(changed fraction, max |B - A|, ||B - A|| / ||A||) of two tensors of equal size."""
    wa, wb = element_width(a.dtype), element_width(b.dtype)
    assert wa is not None and wb is not None
    ca, cb = _Chunks(store, a, wa, progress), _Chunks(store, b, wb, progress)
    aligned = a.dtype == b.dtype and a.chunk_size == b.chunk_size  # chunk i: same elements
    stats, done, n = _Stats(), 0, a.elements
    while done < n:
        if aligned and not ca.left and ca.next_hash == cb.next_hash:
            ca.load()  # an identical chunk: only ||A|| needs it
            cb.skip()
            while ca.left:
                k = min(WINDOW, ca.left)
                stats.base(a.dtype, ca.take(k))
                done += k
            continue
        if not ca.left:
            ca.load()
        if not cb.left:
            cb.load(ca.current)
        k = min(WINDOW, ca.left, cb.left)
        stats.pair(ca, ca.take(k), cb, cb.take(k))
        done += k
    return stats.result(n)


def _comparable(a: Tensor | None, b: Tensor | None) -> bool:
    """Both there, equal in size, with per-element numbers, and not bit-identical."""
    return (
        a is not None
        and b is not None
        and a.elements == b.elements
        and element_width(a.dtype) is not None
        and element_width(b.dtype) is not None
        and not (a.hashes == b.hashes and a.dtype == b.dtype)
    )


def _read_bytes(a: Tensor, b: Tensor) -> int:
    """Bytes _compare decodes: all of A, and those chunks of B that differ."""
    if a.dtype == b.dtype and a.chunk_size == b.chunk_size:
        differ = sum(x != y for x, y in zip(a.hashes, b.hashes, strict=True))
        return a.segment.length + differ * min(b.chunk_size, b.segment.length)
    return a.segment.length + b.segment.length


def diff_manifests(
    store: ChunkStore,
    old: dict[str, mf.Manifest],
    new: dict[str, mf.Manifest],
    values: bool = True,
    progress: Progress | None = None,
) -> ModelDiff:
    """Compare two versions; values=False reads no objects (structure and hashes only).

    `progress` gets its total (the bytes to decode) set here and is updated as chunks decode.
    """
    pairs = sorted(
        match(tensors(old), tensors(new)), key=lambda p: natural_key((p[1] or p[0]).name)
    )
    if progress is not None and values:
        progress.total = sum(_read_bytes(a, b) for a, b, _ in pairs if _comparable(a, b))
    result = ModelDiff()
    for a, b, how in pairs:
        if a is None or b is None:
            t = a or b
            assert t is not None
            result.changes.append(
                TensorChange(
                    a.name if a else None,
                    b.name if b else None,
                    "added" if a is None else "removed",
                    a.dtype if a else None,
                    b.dtype if b else None,
                    a.shape if a else None,
                    b.shape if b else None,
                    t.elements,
                )
            )
            continue
        same = a.hashes == b.hashes and a.key == b.key
        status = {"content": "renamed", "structure": "matched"}.get(how) or (
            "unchanged" if same else "changed"
        )
        stats: tuple[float | None, float | None, float | None] = (None, None, None)
        if a.hashes == b.hashes and a.dtype == b.dtype and a.elements == b.elements:
            stats = (0.0, 0.0, 0.0)
        elif values and _comparable(a, b):
            stats = _compare(store, a, b, progress)
        result.changes.append(
            TensorChange(
                a.name, b.name, status, a.dtype, b.dtype, a.shape, b.shape, b.elements, *stats
            )
        )
    return result
