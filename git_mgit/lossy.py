"""Lossy delta compression of one model file against its lineage parent (MGit's Algorithm 3).

The storage half of `git mgit compress --lossy`; runtime/compressing.py runs
the model's tests in between.

1. plan() pairs the file's tensors with the parent's (same name, dtype and
   shape; the rest by a longest common subsequence of (dtype, shape) in file
   order, as MGit pairs parameters), quantizes each float chunk's difference
   from the parent's stored chunk (codecs/qdelta.py) and keeps the `qdelta`
   object where it is smaller than the lossless one git-mgit would store
   (codecs.encode with the parent chunk as its base). It writes the
   reconstruction, the file as it will be stored, to a temporary file beside
   the model, and stores nothing.
2. apply() stores the `qdelta` objects (anchored, so `git add` finds every
   chunk by its content hash and encodes nothing again), cleans the
   reconstruction (its manifest names the new model version) and moves it
   over the model file.

Memory stays at a few chunks: every pass reads one chunk of the file and one
of the parent at a time. apply() quantizes again rather than holding the
objects: the result is the same function of the same bytes, checked by hash.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from git_mgit import codecs, hashing
from git_mgit.codecs import qdelta
from git_mgit.config import Settings
from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError, NotSafetensors, ObjectCorrupt, ObjectMissing
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import lcs
from git_mgit.lineage.graph import PROVENANCE
from git_mgit.lineage.resolve import UnknownModel, Version
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.clean import clean
from git_mgit.modelfile.tracked import mgit_filtered
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import object_id
from git_mgit.tensors.safetensors_format import Header, TensorInfo, header_length, parse_header
from git_mgit.transfer.fetch import ensure_local

LCS_LIMIT = 4_000_000  # cells of the pairing table; beyond it, tensors pair by name only


class CompressError(MgitError):
    """A model that cannot be compressed as asked: no parent, not tracked, objects missing."""


# -- which file, which parent ------------------------------------------------------------


def model_path(lin: Lineage, ref: str) -> str:
    """The worktree-relative path of MODEL: a tracked file, or a model named in mgit.toml."""
    root = lin.repo.worktree
    if root is None:
        raise CompressError("compress rewrites a working file: run it in a working tree")
    decl = lin.config.models.get(ref)
    if decl is not None:
        if decl.path.endswith("/"):
            raise CompressError(f"model {ref!r} is a folder ({decl.path}); compress one file of it")
        file = root / decl.path
    else:
        file = Path(ref).absolute()
    try:
        rel = file.relative_to(root).as_posix()
    except ValueError:
        raise CompressError(f"{ref}: not inside this repository ({root})") from None
    if not file.is_file():
        raise CompressError(f"{rel}: no such file in the working tree")
    if rel not in mgit_filtered(lin.repo, [rel]):
        raise CompressError(
            f"{rel} is not tracked by git-mgit; run `git mgit track '*.safetensors'`"
        )
    return rel


def lineage_parent(lin: Lineage, rel: str) -> Version:
    """The version `rel` was derived from: its recorded provenance edge, else mgit.toml's parent."""
    try:
        current = lin.resolve(rel)
    except UnknownModel:
        current = None  # never added: only mgit.toml can say
    if current is not None and current.id in lin.graph:
        parents = [e.parent for e in lin.graph.in_edges(current.id, (PROVENANCE,))]
        if len(parents) > 1:
            raise CompressError(
                f"{rel} has {len(parents)} provenance parents "
                f"({', '.join(p[:10] for p in parents)}); choose one with --parent"
            )
        if parents:
            return lin.resolve(parents[0])
    decl = lin.config.model_at(rel)
    if decl is not None and decl.parents:
        return lin.resolve(decl.parents[0])
    raise CompressError(
        f"{rel} has no lineage parent to compress against: declare `parents` in mgit.toml, "
        f"record one (`git mgit lineage add-edge PARENT {rel}`), or pass --parent REV:PATH"
    )


def parent_manifest(lin: Lineage, store: ChunkStore, parent: Version) -> mf.Manifest:
    """The parent's manifest, once every chunk it names is here (the bases must be)."""
    if parent.kind != "file":
        raise CompressError(f"parent {parent.path or parent.id[:10]} is a model folder, not a file")
    found = contents.manifests(lin.repo, store.reader, parent.id, "file")[""]
    try:
        ensure_local(store, [(f"parent {parent.path or parent.id[:10]}", found)])
    except ObjectMissing as exc:
        raise CompressError(str(exc)) from exc
    return found


# -- pairing ------------------------------------------------------------------------------


def _key(dtype: str | None, shape: Sequence[int] | None) -> tuple:
    return dtype, tuple(shape or ())


def pair(
    children: Sequence[TensorInfo], parents: Mapping[str, mf.Segment]
) -> dict[str, mf.Segment]:
    """Child tensor name -> the parent tensor it is a delta of.

    Same name, dtype and shape first; the tensors left over on both sides are
    paired by a longest common subsequence of their (dtype, shape) in file
    order, which lines up the layers of a renamed or extended architecture.
    """
    out: dict[str, mf.Segment] = {}
    for t in children:
        seg = parents.get(t.name)
        if seg is not None and _key(seg.dtype, seg.shape) == _key(t.dtype, t.shape):
            out[t.name] = seg
    taken = {s.name for s in out.values()}
    a = [t for t in children if t.name not in out]
    b = [s for s in parents.values() if s.name not in taken]
    if not a or not b or len(a) * len(b) > LCS_LIMIT:
        return out
    ka, kb = [_key(t.dtype, t.shape) for t in a], [_key(s.dtype, s.shape) for s in b]
    for i, j in lcs(ka, kb):
        out[a[i].name] = b[j]
    return out


# -- the plan -----------------------------------------------------------------------------


@dataclass
class ChunkPlan:
    """One chunk of the file: what it costs stored losslessly, and as `qdelta` if it can be."""

    tensor: str
    dtype: str
    start: int  # byte offset in the file
    length: int
    lossless: int  # bytes of the object git-mgit would store without quantizing
    base: bytes | None = None  # the parent chunk it is quantized against
    lossy: int | None = None  # bytes of its `qdelta` object
    recon_hash: bytes | None = None  # content hash of its reconstruction

    @property
    def quantized(self) -> bool:
        """Whether the `qdelta` object is kept: only where it saves storage."""
        return self.lossy is not None and self.lossy < self.lossless


@dataclass
class Plan:
    path: str
    parent: Version
    eps: float
    step: float
    reconstruction: Path  # the file as it will be stored (temporary, beside the model)
    header: Header
    chunks: list[ChunkPlan] = field(default_factory=list)
    paired: int = 0  # tensors paired with a parent tensor
    kept: Counter = field(default_factory=Counter)  # paired float chunks left lossless, by reason

    @property
    def quantized(self) -> list[ChunkPlan]:
        return [c for c in self.chunks if c.quantized]

    @property
    def tensors(self) -> int:
        """Tensors with at least one quantized chunk."""
        return len({c.tensor for c in self.quantized})

    @property
    def raw(self) -> int:
        return sum(c.length for c in self.chunks)

    @property
    def stored_before(self) -> int:
        return sum(c.lossless for c in self.chunks)

    @property
    def stored_after(self) -> int:
        return sum(
            c.lossy if c.quantized and c.lossy is not None else c.lossless for c in self.chunks
        )


def _read_header(f: BinaryIO, rel: str) -> tuple[bytes, Header]:
    try:
        prefix = f.read(8)
        head = prefix + f.read(header_length(prefix))
        header = parse_header(head)
    except NotSafetensors as exc:
        raise CompressError(
            f"{rel}: not a safetensors file git-mgit can compress ({exc})"
        ) from None
    size = os.fstat(f.fileno()).st_size
    if size != header.file_size:
        raise CompressError(
            f"{rel}: {size} bytes where its header describes {header.file_size}; "
            "only a valid safetensors file can be compressed"
        )
    return head, header


def _chunks(t: TensorInfo, chunk_size: int) -> Iterator[tuple[int, int, int]]:
    """(index, file offset, length) of each chunk of a tensor, as clean cuts them."""
    length = t.end - t.begin
    for i, off in enumerate(range(0, length, chunk_size)):
        yield i, t.begin + off, min(chunk_size, length - off)


class _Parent:
    """The parent's chunks, read (verified) on demand."""

    def __init__(self, store: ChunkStore, rel: str, aligned: bool = True) -> None:
        """`aligned`: the parent was cut into chunks of the size this repository uses."""
        self.store, self.rel, self.aligned = store, rel, aligned

    def chunk(self, seg: mf.Segment | None, index: int, length: int, whole: int) -> bytes | None:
        """The hash of the parent chunk holding the same bytes, if the two are cut alike."""
        if seg is None or not (self.aligned or (len(seg.hashes) == 1 and length == whole)):
            return None
        return seg.hashes[index]

    def base(self, content_hash: bytes) -> codecs.Base:
        try:
            raw = self.store.get_raw(content_hash)
            depth = self.store.chain_of(content_hash)[1]
        except (ObjectCorrupt, ObjectMissing) as exc:
            raise CompressError(
                f"{self.rel}: a parent object cannot be read ({exc}); run `git mgit fsck`"
            ) from None
        return codecs.Base(raw, content_hash, depth)


def _pread(f: BinaryIO, start: int, length: int) -> bytearray:
    buf = bytearray(length)
    if os.preadv(f.fileno(), [buf], start) != length:
        raise CompressError(f"{f.name}: the file changed while compress read it; run it again")
    return buf


def plan(
    store: ChunkStore,
    settings: Settings,
    rel: str,
    parent: Version,
    parent_files: mf.Manifest,
    eps: float,
) -> Plan:
    """Quantize the model against its parent; the reconstruction goes to plan.reconstruction.

    The caller removes that file (or apply() moves it over the model).
    """
    root = store.repo.worktree
    assert root is not None
    file = root / rel
    step = qdelta.step_for(eps)
    parents = parent_files.tensors()
    fd, tmp = tempfile.mkstemp(prefix=".mgit-compress-", dir=file.parent)
    try:
        with open(file, "rb") as f, os.fdopen(fd, "wb") as out:
            head, header = _read_header(f, rel)
            result = Plan(rel, parent, eps, step, Path(tmp), header)
            out.write(head)
            pairs = pair(header.tensors, parents)
            result.paired = len(pairs)
            source = _Parent(store, rel, parent_files.chunk_size == settings.chunk_size)
            progress = Progress(f"git-mgit: quantizing {rel}", header.file_size - len(head))
            try:
                for t in header.tensors:
                    seg = pairs.get(t.name)
                    for i, start, length in _chunks(t, settings.chunk_size):
                        raw = _pread(f, start, length)
                        base_hash = source.chunk(seg, i, length, t.end - t.begin)
                        if seg is not None and base_hash is None and qdelta.supports(t.dtype):
                            result.kept["parent chunked differently"] += 1
                        c, recon = _plan_chunk(
                            t, start, raw, base_hash, source, settings, step, result.kept
                        )
                        result.chunks.append(c)
                        out.write(recon if c.quantized else raw)
                        progress.update(length)
            finally:
                progress.finish()
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return result


def _plan_chunk(
    t: TensorInfo,
    start: int,
    raw: bytearray,
    base_hash: bytes | None,
    source: _Parent,
    settings: Settings,
    step: float,
    kept: Counter,
) -> tuple[ChunkPlan, bytes | None]:
    """One chunk's plan, and its reconstruction when it has one.

    A chunk equal to its parent's costs nothing either way (it is the parent's
    object); a reconstruction already stored costs what its object takes.
    """
    own = hashing.digest(raw)
    if own == base_hash:
        return ChunkPlan(t.name, t.dtype, start, len(raw), 0), None
    base = source.base(base_hash) if base_hash is not None else None
    lossless = codecs.encode(raw, t.dtype, own, base, settings.max_chain_depth).size
    c = ChunkPlan(t.name, t.dtype, start, len(raw), lossless)
    if base is None or not qdelta.supports(t.dtype):
        return c, None
    if base.depth + 1 > settings.max_chain_depth:
        kept["parent's delta chain at mgit.maxChainDepth"] += 1
        return c, None
    q = qdelta.quantize(t.dtype, raw, base.raw, step)
    if q is None:
        kept["NaN, infinity or a difference beyond 2**31 steps"] += 1
        return c, None
    c.base, c.recon_hash = base_hash, hashing.digest(q.recon)
    held = source.store.locate(c.recon_hash)
    if c.recon_hash == base_hash:
        c.lossy = 0  # every element rounds to its parent's: the parent's object serves
    elif held is not None:
        c.lossy = held[1]  # stored already (an earlier run): what that object takes
    else:
        c.lossy = qdelta.encode(t.dtype, q, step, c.recon_hash, base).size
    if not c.quantized:
        kept["quantized delta not smaller"] += 1
    return c, q.recon


# -- applying it --------------------------------------------------------------------------


def apply(store: ChunkStore, settings: Settings, p: Plan) -> str:
    """Store the plan's `qdelta` objects and move the reconstruction over the model file.

    Returns the new model version (the id of the manifest `git add` will store).
    """
    root = store.repo.worktree
    assert root is not None
    file = root / p.path
    source = _Parent(store, p.path)
    with open(file, "rb") as f:
        for c in p.quantized:
            assert c.base is not None and c.recon_hash is not None
            if c.recon_hash == c.base or store.has(c.recon_hash):
                continue  # the parent's chunk itself, or stored by an earlier chunk or run
            base = source.base(c.base)
            q = qdelta.quantize(c.dtype, _pread(f, c.start, c.length), base.raw, p.step)
            if q is None or hashing.digest(q.recon) != c.recon_hash:
                raise CompressError(f"{p.path} changed since it was quantized; run compress again")
            store.put(c.recon_hash, qdelta.encode(c.dtype, q, p.step, c.recon_hash, base))
    store.flush()
    with open(p.reconstruction, "rb") as f:
        text = clean(f, p.path, store, settings)
    stored = {h for s in mf.parse(text).segments for h in s.hashes}
    if any(c.recon_hash not in stored for c in p.quantized):
        raise CompressError(f"{p.path}: the reconstruction does not hash as planned (a bug)")
    os.replace(p.reconstruction, file)
    _sync_dir(file.parent)
    return object_id("blob", [text]).hex()


def _sync_dir(folder: Path) -> None:
    """Make the rename itself durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def uncommitted(lin: Lineage, rel: str) -> bool:
    """Whether the working file differs from what HEAD holds (overwriting it loses it)."""
    return bool(lin.repo.git("status", "--porcelain", "--untracked-files=all", "--", rel).strip())
