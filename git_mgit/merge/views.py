"""One side of a merge: a model version's tensors, header metadata, and readers for their bytes.

Two versions hold the same tensor under a name when dtype, shape and chunk
hashes agree; that needs no object to be read. Bytes are read only for what
a merge must write anew: a tensor an arithmetic strategy computes (window by
window, so memory stays at a few windows of float64), or one re-chunked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from git_mgit.errors import NotSafetensors, ObjectCorrupt
from git_mgit.merge.strategy import Strategy
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.numerics import WINDOW, element_width, from_float64, to_float64
from git_mgit.tensors.safetensors_format import parse_header


@dataclass(frozen=True)
class TensorState:
    """What a version holds under one name: equal keys, equal tensors."""

    segment: mf.Segment
    chunk_size: int

    @property
    def dtype(self) -> str:
        assert self.segment.dtype is not None
        return self.segment.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.segment.shape or ()

    @property
    def key(self) -> tuple:
        # Chunk hashes depend on the chunk size: across sizes the same bytes
        # compare unequal, which can only cause a conflict, never a wrong merge.
        return (self.dtype, self.shape, self.segment.hashes, self.chunk_size)


@dataclass
class ModelView:
    manifest: mf.Manifest | None  # None: the version does not exist (no common base)
    header: mf.Segment | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    tensors: dict[str, TensorState] = field(default_factory=dict)  # in file order

    @property
    def layout(self) -> list[tuple[str, str, tuple[int, ...]]]:
        return [(n, t.dtype, t.shape) for n, t in self.tensors.items()]


def load(store: ChunkStore, manifest: mf.Manifest | None) -> ModelView:
    """The view of a safetensors manifest (or of no version); opaque files have no tensors."""
    if manifest is None or manifest.kind != "safetensors":
        return ModelView(manifest)
    header = next(s for s in manifest.segments if s.kind == "header")
    data = b"".join(bytes(store.get_raw(h)) for h in header.hashes)
    try:
        parsed = parse_header(data)
    except NotSafetensors as exc:
        raise ObjectCorrupt(f"a stored safetensors header no longer parses ({exc})") from exc
    tensors = {
        s.name: TensorState(s, manifest.chunk_size)
        for s in manifest.segments
        if s.kind == "tensor" and s.name is not None
    }
    return ModelView(manifest, header, dict(parsed.metadata or {}), tensors)


class TensorBytes:
    """A stored tensor's bytes in order, one decoded chunk at a time (a clean.Reader)."""

    def __init__(self, store: ChunkStore, segment: mf.Segment) -> None:
        self._store = store
        self._hashes = iter(segment.hashes)
        self._current = memoryview(b"")

    def read_into(self, view: memoryview) -> int:
        got = 0
        while got < len(view):
            if not self._current:
                h = next(self._hashes, None)
                if h is None:
                    break
                self._current = memoryview(self._store.get_raw(h))
            n = min(len(self._current), len(view) - got)
            view[got : got + n] = self._current[:n]
            self._current = self._current[n:]
            got += n
        return got


class Computed:
    """An arithmetic strategy's result for one tensor, as bytes (a clean.Reader).

    The operands share dtype and shape; each window of elements is read from
    all of them, combined in float64 and rounded once to the dtype.
    """

    def __init__(
        self,
        strategy: Strategy,
        dtype: str,
        base: TensorBytes | None,
        ours: TensorBytes,
        theirs: TensorBytes,
    ) -> None:
        self.strategy, self.dtype = strategy, dtype
        self._operands = (base, ours, theirs)
        width = element_width(dtype)
        assert width is not None
        self._window = WINDOW * width

    def _read(self, src: TensorBytes | None, n: int):
        if src is None:
            return None
        buf = bytearray(n)
        if src.read_into(memoryview(buf)) != n:
            raise ObjectCorrupt("a stored tensor is shorter than its manifest says")
        return to_float64(self.dtype, buf)

    def read_into(self, view: memoryview) -> int:
        for start in range(0, len(view), self._window):
            n = min(self._window, len(view) - start)
            b, o, t = (self._read(src, n) for src in self._operands)
            assert o is not None and t is not None
            view[start : start + n] = from_float64(self.dtype, self.strategy.combine(b, o, t))
        return len(view)
