"""Tensor-level differences between two model versions, streamed from objects.

Tensors pair up by name; then unpaired tensors with identical content are
renames; then what is left is matched, as MGit does across architectures, by
the longest common subsequence of the two tensor lists in natural name order
with (dtype, shape) as the key ("matched by structure"). For each pair the
values are compared chunk by chunk (a chunk whose content hash is the same
on both sides is read once, for the norm of the old tensor): the fraction of elements whose bits differ, the largest
absolute difference and the relative L2 norm of the difference. Memory stays
at two decoded chunks; no file is ever smudged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from git_mgit import manifest as mf
from git_mgit.errors import MgitError
from git_mgit.lineage.values import as_numbers, element_width
from git_mgit.store.chunkstore import ChunkStore

Tick = Callable[[int], None]


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    segment: mf.Segment
    chunk_size: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        return self.dtype, self.shape


@dataclass(frozen=True)
class TensorChange:
    status: str  # added | removed | renamed | matched | changed | unchanged
    old_name: str | None
    new_name: str | None
    old_dtype: str | None = None
    new_dtype: str | None = None
    old_shape: tuple[int, ...] | None = None
    new_shape: tuple[int, ...] | None = None
    elements: int = 0
    changed_fraction: float | None = None
    max_abs: float | None = None
    rel_l2: float | None = None


@dataclass
class ModelDiff:
    changes: list[TensorChange] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.changes:
            out[c.status] = out.get(c.status, 0) + 1
        return out


def tensors(manifests: dict[str, mf.Manifest]) -> dict[str, Tensor]:
    """Every tensor of a model (all shards of a folder), by name."""
    out: dict[str, Tensor] = {}
    for path, m in manifests.items():
        for name, seg in m.tensors().items():
            if name in out:
                raise MgitError(f"tensor {name!r} is in two shards of the model (second: {path})")
            out[name] = Tensor(name, seg.dtype or "", tuple(seg.shape or ()), seg, m.chunk_size)
    return out


def natural_key(name: str) -> list:
    """'layer.10' after 'layer.9': digit runs compare as numbers."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _lcs(a: list[Tensor], b: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    """Longest common subsequence of the two lists by (dtype, shape)."""
    n, m = len(a), len(b)
    table = np.zeros((n + 1, m + 1), dtype=np.int32)
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            table[i, j] = (
                table[i + 1, j + 1] + 1
                if a[i].key == b[j].key
                else max(table[i + 1, j], table[i, j + 1])
            )
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if a[i].key == b[j].key:
            pairs.append((a[i], b[j]))
            i, j = i + 1, j + 1
        elif table[i + 1, j] >= table[i, j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def match(
    old: dict[str, Tensor], new: dict[str, Tensor]
) -> list[tuple[Tensor | None, Tensor | None, str]]:
    """(old, new, how) for every tensor of both: how is 'name', 'content', 'structure' or ''."""
    pairs: list[tuple[Tensor | None, Tensor | None, str]] = [
        (old[n], new[n], "name") for n in old if n in new
    ]
    left = {n: t for n, t in old.items() if n not in new}
    right = {n: t for n, t in new.items() if n not in old}
    by_content = {t.segment.hashes: n for n, t in left.items()}
    for n, t in list(right.items()):
        twin = by_content.pop(t.segment.hashes, None)
        if twin is not None and twin in left:
            pairs.append((left.pop(twin), right.pop(n), "content"))
    a = sorted(left.values(), key=lambda t: natural_key(t.name))
    b = sorted(right.values(), key=lambda t: natural_key(t.name))
    for x, y in _lcs(a, b):
        pairs.append((left.pop(x.name), right.pop(y.name), "structure"))
    pairs += [(t, None, "") for t in left.values()]
    pairs += [(None, t, "") for t in right.values()]
    return pairs


class _Stream:
    """A tensor's elements as numbers, read chunk by chunk and sliced to any window."""

    def __init__(self, store: ChunkStore, t: Tensor, tick: Tick) -> None:
        self.store, self.t, self.tick = store, t, tick
        self.width = element_width(t.dtype) or 1
        self.chunk_elems = t.chunk_size // self.width
        self.index = 0  # next chunk
        self.bits = np.empty(0, dtype=np.uint8)
        self.values: np.ndarray | None = None

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The next n elements: (raw bytes as rows of `width`, numbers or None)."""
        while len(self.bits) < n * self.width:
            raw = self.store.get_raw(self.t.segment.hashes[self.index])
            self.tick(len(raw))
            self.index += 1
            nums = as_numbers(self.t.dtype, raw)
            self.bits = np.concatenate([self.bits, np.frombuffer(raw, dtype=np.uint8)])
            if nums is not None:
                self.values = nums if self.values is None else np.concatenate([self.values, nums])
        bits, self.bits = self.bits[: n * self.width], self.bits[n * self.width :]
        vals = None
        if self.values is not None:
            vals, self.values = self.values[:n], self.values[n:]
        return bits.reshape(n, self.width), vals

    def skip(self, n: int) -> None:
        """Skip n elements known to be identical, reading nothing when chunk-aligned."""
        last = self.index == len(self.t.segment.hashes) - 1
        if not len(self.bits) and (n % self.chunk_elems == 0 or last):
            self.index += -(-n // self.chunk_elems)
            return
        self.take(n)


def _compare(store: ChunkStore, a: Tensor, b: Tensor, tick: Tick) -> tuple[float, float, float]:
    """(changed fraction, max |b - a|, ||b - a|| / ||a||) over the elements, streaming."""
    n = a.elements
    changed, max_abs, diff_sq, base_sq = 0, 0.0, 0.0, 0.0
    same_layout = a.dtype == b.dtype and a.chunk_size == b.chunk_size
    sa, sb = _Stream(store, a, tick), _Stream(store, b, tick)
    step = sa.chunk_elems if same_layout else min(sa.chunk_elems, sb.chunk_elems)
    for i in range(0, n, step):
        size = min(step, n - i)
        if same_layout and a.segment.hashes[i // step] == b.segment.hashes[i // step]:
            # identical chunk: B's copy is not read; A's is, for ||a||
            xa = sa.take(size)[1]
            if xa is not None:
                base_sq += float(np.sum(np.abs(np.where(np.isfinite(xa), xa, 0.0)) ** 2))
            sb.skip(size)
            continue
        ba, xa = sa.take(size)
        bb, xb = sb.take(size)
        if a.dtype == b.dtype:
            differs = np.any(ba != bb, axis=1)
        elif xa is not None and xb is not None:
            differs = ~((xa == xb) | (np.isnan(xa) & np.isnan(xb)))
        else:
            differs = np.ones(size, dtype=bool)
        changed += int(np.count_nonzero(differs))
        if xa is not None and xb is not None:
            d = np.abs(xb - xa)
            with np.errstate(invalid="ignore"):
                finite = d[np.isfinite(d)]
            if finite.size:
                max_abs = max(max_abs, float(finite.max()))
            diff_sq += float(np.sum(np.where(np.isfinite(d), d, 0.0) ** 2))
            base_sq += float(np.sum(np.abs(np.where(np.isfinite(xa), xa, 0.0)) ** 2))
    rel = math.sqrt(diff_sq) / math.sqrt(base_sq) if base_sq else (0.0 if not diff_sq else math.inf)
    return (changed / n if n else 0.0), max_abs, rel


def diff_manifests(
    store: ChunkStore,
    old: dict[str, mf.Manifest],
    new: dict[str, mf.Manifest],
    values: bool = True,
    tick: Tick = lambda n: None,
) -> ModelDiff:
    """Compare two versions; values=False reads no objects (structure and hashes only)."""
    result = ModelDiff()
    for a, b, how in match(tensors(old), tensors(new)):
        if a is None or b is None:
            t = a or b
            assert t is not None
            result.changes.append(
                TensorChange(
                    "removed" if b is None else "added",
                    a.name if a else None,
                    b.name if b else None,
                    a.dtype if a else None,
                    b.dtype if b else None,
                    a.shape if a else None,
                    b.shape if b else None,
                    t.elements,
                )
            )
            continue
        same = a.segment.hashes == b.segment.hashes and a.key == b.key
        status = {"content": "renamed", "structure": "matched"}.get(how) or (
            "unchanged" if same else "changed"
        )
        stats: tuple[float | None, float | None, float | None] = (None, None, None)
        if same:
            stats = (0.0, 0.0, 0.0)
        elif values and a.elements == b.elements:
            stats = _compare(store, a, b, tick)
        result.changes.append(
            TensorChange(
                status, a.name, b.name, a.dtype, b.dtype, a.shape, b.shape, b.elements, *stats
            )
        )
    return result
