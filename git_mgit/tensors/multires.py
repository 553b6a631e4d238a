"""Multi-resolution reads: a model version's float tensors from their top k byte planes.

Objects keep each byte plane in frames of its own, most significant plane
first, and the layout puts a float's exponent in the top plane and its sign
on top of the second (codecs/planes.py). Reading only the top k planes of an
F16, BF16, F32 or F64 tensor reads about k / width of its bytes and gives
every element's sign, exponent and high mantissa bits: truncated values with
per-element bounds on the true ones (planebounds.py).

Which chains read less: XOR composes plane by plane, so when every level of a
chunk's delta chain is `planes` or `xor` in the current layout, only the top
k planes' frames of each level are read; the rest never leave the pack. A
chain with a `raw`, `sub` or `qdelta` level, or one written before object
format 2 (sign in the low plane), is decoded whole and verified, then
truncated the same way, so the result never depends on how a chunk is
stored. A truncated read cannot be checked against the chunk's BLAKE3 (that
needs every bit); a whole read (planes=None, or k >= the element width)
always is. Tensors of other types are always read whole.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from functools import partial

import numpy as np

from git_mgit import codecs
from git_mgit.codecs import codec
from git_mgit.codecs.decoder import AHEAD, BytesSource, ChunkDecoder, Source
from git_mgit.codecs.objectformat import Codec
from git_mgit.codecs.workers import ordered
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import Tensor, tensors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.dtypes import NUMPY
from git_mgit.tensors.numerics import to_float64
from git_mgit.tensors.planebounds import FLOAT_DTYPES, bounds, known_bits
from git_mgit.transfer.fetch import ensure_local

_EXACT_IN_FLOAT64 = 1 << 53


@dataclass(frozen=True)
class Truncated:
    """One tensor read from its top `planes` byte planes.

    `value`: the truncated elements (unknown bits zero) in the tensor's own
    numpy type (float32 for BF16 and the 8-bit floats); `low` <= true value
    <= `high` per element, float64, equal to the value when every plane was
    read (NaN gets -inf and +inf; complex tensors give the value itself).
    """

    value: np.ndarray
    low: np.ndarray
    high: np.ndarray
    planes: int
    dtype: str


class Model(dict[str, Truncated]):
    """A model version's tensors by name, with what reading them cost.

    `bytes_read`: bytes taken from the object database; `bytes_full`: the
    stored size of every object the read opened, what reading every plane
    would take.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bytes_read = 0
        self.bytes_full = 0


class _Tally:
    def __init__(self) -> None:
        self.read = self.full = 0
        self._lock = threading.Lock()

    def add(self, read: int, full: int = 0) -> None:
        with self._lock:
            self.read += read
            self.full += full


class _Counted:
    """A Source that counts the bytes read through it."""

    def __init__(self, inner: Source, tally: _Tally) -> None:
        self.inner, self.tally, self.size = inner, tally, inner.size

    def view(self, pos: int, n: int, scratch: memoryview | None = None) -> memoryview:
        self.tally.add(n)
        return self.inner.view(pos, n, scratch)

    def read_into(self, pos: int, dst: memoryview) -> None:
        self.tally.add(len(dst))
        self.inner.read_into(pos, dst)


class _CountingStore(ChunkStore):
    """A chunk store that counts what its reads take from the object database."""

    def __init__(self, repo: Repo) -> None:
        super().__init__(repo)
        self.tally = _Tally()

    def source(self, content_hash: bytes, oid: str | None = None) -> Source:
        src = super().source(content_hash, oid)
        if isinstance(src, BytesSource):  # read whole through git already
            self.tally.add(src.size, src.size)
            return src
        self.tally.add(0, src.size)
        return _Counted(src, self.tally)


def _planewise(chunk: ChunkDecoder, width: int, sign_at: int | None) -> bool:
    """Whether the chunk's top planes can be read alone: `planes`/`xor` levels, current layout."""
    return chunk.base is None and all(
        lv.header.codec in (Codec.PLANES, Codec.XOR)
        and lv.header.width == width
        and lv.header.sign_at == sign_at
        for lv in chunk.levels
    )


def read_chunk(chunk: ChunkDecoder, dtype: str, planes: int, out: memoryview) -> bool:
    """The chunk's elements with at least the bits of their top `planes` planes, into out.

    True when only those planes were read (the other bits are then zero, and
    nothing was verified); False when the chunk was decoded whole and verified.
    Either way, `known_bits` of the dtype's layout says which bits count.
    """
    width, sign_at = codec.layout(dtype, chunk.size)
    if planes >= width or not _planewise(chunk, width, sign_at):
        codecs.decode_into(chunk, out)
        return False
    jobs = (
        partial(chunk.decode_block, i, out[slice(*chunk.span(i))], top_planes=planes)
        for i in range(chunk.blocks)
    )
    for _ in ordered(jobs, AHEAD):
        pass
    return True


def _exact(t: Tensor, raw: bytearray) -> Truncated:
    """A tensor read whole (and verified): its values, and bounds that are the values."""
    width = codec.layout(t.dtype, len(raw))[0]
    if t.dtype in FLOAT_DTYPES:
        b = bounds(t.dtype, np.frombuffer(raw, f"<u{width}"), (1 << 8 * width) - 1)
        return Truncated(*_shaped(t, b.value, b.low, b.high), width, t.dtype)
    wide = to_float64(t.dtype, raw)
    if wide is None:
        raise MgitError(
            f"tensor {t.name!r}: {t.dtype} packs several elements per byte and has no "
            "per-element values here; read the file itself"
        )
    if t.dtype == "C64":
        value = np.frombuffer(raw, NUMPY["C64"])
        return Truncated(*_shaped(t, value, wide, wide.copy()), width, t.dtype)
    value = np.frombuffer(raw, NUMPY[t.dtype]) if t.dtype in NUMPY else wide.astype(np.float32)
    low, high = wide, wide.copy()
    if t.dtype in ("I64", "U64"):  # float64 rounds beyond 2**53: widen by the rounding
        inexact = np.abs(wide) >= _EXACT_IN_FLOAT64
        low[inexact] = np.nextafter(low[inexact], -np.inf)
        high[inexact] = np.nextafter(high[inexact], np.inf)
    nan = np.isnan(wide)
    low[nan], high[nan] = -np.inf, np.inf
    return Truncated(*_shaped(t, value, low, high), width, t.dtype)


def _shaped(t: Tensor, *arrays: np.ndarray) -> list[np.ndarray]:
    return [a.reshape(t.shape) for a in arrays]


def read_tensor(store: ChunkStore, t: Tensor, planes: int | None = None) -> Truncated:
    """One tensor from the top `planes` planes of its chunks (None: whole and verified)."""
    raw = bytearray(t.segment.length)
    view = memoryview(raw)
    width, sign_at = codec.layout(t.dtype, len(raw))
    top = planes if t.dtype in FLOAT_DTYPES and planes is not None and planes < width else None
    for i, h in enumerate(t.hashes):
        chunk = store.decoder(h)
        out = view[i * t.chunk_size : i * t.chunk_size + chunk.size]
        if top is None:
            codecs.decode_into(chunk, out)
        else:
            read_chunk(chunk, t.dtype, top, out)
    if top is None:
        return _exact(t, raw)
    b = bounds(t.dtype, np.frombuffer(raw, f"<u{width}"), known_bits(width, sign_at, top))
    return Truncated(*_shaped(t, b.value, b.low, b.high), top, t.dtype)


def load(
    model: str,
    *,
    rev: str | None = None,
    planes: int | None = None,
    repo: str | os.PathLike[str] | Repo | None = None,
) -> Model:
    """A model version's tensors, floats from their top `planes` byte planes.

    `model`: a tracked model's path (with `rev`, at that revision; without,
    as committed at HEAD, else as staged) or anything `git mgit lineage` accepts (a version
    name, a model name from mgit.toml, an id, REV:PATH). `planes=None` reads
    every plane (exact and verified). `repo`: a Repo or a path in one
    (default: the current directory).
    """
    if planes is not None and planes < 1:
        raise MgitError(f"planes must be at least 1 (got {planes}); None reads every plane")
    if rev is not None and ":" in model:
        raise MgitError(f"{model!r} names a revision already; leave out rev={rev!r}")
    lin = Lineage(repo if isinstance(repo, Repo) else find_repo(repo))
    version = lin.resolve(model if rev is None else f"{rev}:{model}")
    store = _CountingStore(lin.repo)
    try:
        ms = contents.manifests(lin.repo, store.reader, version.id, version.kind)
        ensure_local(
            store, [(f"{version.path or model}/{rel}".rstrip("/"), m) for rel, m in ms.items()]
        )
        found = tensors(ms)
        out = Model()
        for name, t in found.items():
            out[name] = read_tensor(store, t, planes)
        out.bytes_read, out.bytes_full = store.tally.read, store.tally.full
        return out
    finally:
        store.close()
