"""Clean: stream a file's bytes in, store its chunks, return its manifest.

A version is stored as deltas of the previous one (its chunks leaning on that
one's chunk of the same tensor), or whole where that chain would not fit in
mgit.fetchBudget or mgit.maxChainDepth (store/chains.py): a push then sends
it as it is stored.

The file arrives from git as a stream of unknown length. The safetensors
header is read and validated first; then each tensor is read chunk by chunk
into one of two reusable buffers, hashed on this thread and, when new,
encoded and written on a background thread, so memory stays at a few chunks
whatever the file size. Anything the parser rejects, and any bytes the header
does not account for, are stored as opaque `bytes` segments: never fail
`git add`, never lose a byte.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import BinaryIO, Protocol

from git_mgit import codecs, hashing
from git_mgit.config import Settings
from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError, NotSafetensors
from git_mgit.modelfile import manifest as mf
from git_mgit.resources import malloc
from git_mgit.store.chains import Chain, Chains
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.dtypes import DTYPES
from git_mgit.tensors.safetensors_format import (
    GIT_LFS_SPEC,
    Header,
    TensorInfo,
    header_length,
    parse_header,
    why_not,
)

Warn = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"git-mgit: warning: {msg}", file=sys.stderr)


class Reader(Protocol):
    """Where a builder's bytes come from: fills the view, returns how many it could."""

    def read_into(self, view: memoryview) -> int: ...


class _Source:
    """Exact-length reads from a stream that may return short reads."""

    def __init__(self, src: BinaryIO) -> None:
        self.src = src
        self.pos = 0

    def read_into(self, view: memoryview) -> int:
        got = 0
        while got < len(view):
            n = self.src.readinto(view[got:])
            if not n:
                break
            got += n
        self.pos += got
        return got

    def read(self, n: int) -> bytes:
        buf = bytearray(n)
        return bytes(buf[: self.read_into(memoryview(buf))])


class ManifestBuilder:
    """Accumulates segments and drives hashing, dedup and background encoding.

    clean() feeds it a file; a merge feeds it the merged file's pieces, some
    already hashed (add_known), so both produce the same manifest for the same bytes.
    """

    def __init__(
        self,
        store: ChunkStore,
        settings: Settings,
        previous: mf.Manifest | None,
        progress: Progress,
    ) -> None:
        self.store, self.settings, self.progress = store, settings, progress
        self.segments: list[mf.Segment] = []
        self.base = previous
        self.chains: Chains | None = None
        self.base_chain: Chain | None = None
        self.whole = False  # its new chunks stored whole, as no deltas
        if previous is not None:  # (nothing to lean on, or hashed only: no chain to keep)
            self.chains = Chains(store.repo)
            self.base_chain = self.chains.of(store, previous)
            self.whole = _starts_chain(self.base_chain, settings, previous)
        self.previous = previous.tensors() if previous is not None and not self.whole else {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mgit-encode")
        self._buffers: list[memoryview | None] = [None, None]
        self._busy: list[Future | None] = [None, None]
        self._submitted: set[bytes] = set()

    def _buffer(self, size: int) -> tuple[int, memoryview]:
        """`size` bytes of a chunk buffer no encode job is reading (waits if both are busy).

        The first idle buffer is taken, so a file whose chunks are all stored
        already (re-added unchanged) touches the pages of one buffer, not two.
        """
        if all(job is not None and not job.done() for job in self._busy):
            wait(self._busy, return_when=FIRST_COMPLETED)  # type: ignore[arg-type]
        i = next(i for i, job in enumerate(self._busy) if job is None or job.done())
        job = self._busy[i]
        if job is not None:
            self._busy[i] = None
            job.result()  # an encoding error surfaces here
        buffer = self._buffers[i]
        if buffer is None:
            buffer = self._buffers[i] = malloc.take_buffer(self.settings.chunk_size)
        return i, buffer[:size]

    def _store(self, slot: int, view: memoryview, dtype: str, base: bytes | None) -> bytes:
        h = hashing.digest(view)
        self.progress.update(len(view))
        if h in self._submitted or self.store.has(h):
            return h  # stored as it is, in either case (a file added again stays as it was)
        self._submitted.add(h)
        self._busy[slot] = self._pool.submit(self._encode, view, h, dtype, base)
        return h

    def _encode(self, view: memoryview, h: bytes, dtype: str, base_hash: bytes | None) -> None:
        base = None
        if base_hash is not None and self.store.has(base_hash):
            _, depth = self.store.chain_of(base_hash)
            if depth < self.settings.max_chain_depth:
                base = codecs.Base(self.store.get_raw(base_hash), base_hash, depth)
        self.store.put(h, codecs.encode(view, dtype, h, base, self.settings.max_chain_depth))

    @property
    def end(self) -> int:
        """The file offset where the next segment starts."""
        return self.segments[-1].offset + self.segments[-1].length if self.segments else 0

    def add_known(self, segment: mf.Segment) -> None:
        """A segment whose chunks (at this builder's chunk size) are already stored."""
        self.segments.append(dataclasses.replace(segment, offset=self.end))

    def add_bytes(self, kind: str, data: bytes, src: Reader | None = None) -> None:
        """A header or opaque segment: `data` first, then (if src) the rest of the stream."""
        start = self.end
        hashes, length, pending = [], 0, memoryview(data)
        chunk = self.settings.chunk_size
        while True:
            slot, buf = self._buffer(chunk)
            n = min(len(pending), len(buf))
            buf[:n] = pending[:n]
            pending = pending[n:]
            if src is not None and n < len(buf):
                n += src.read_into(buf[n:])
            if n == 0:
                break
            hashes.append(self._store(slot, buf[:n], "bytes", None))
            length += n
            if n < len(buf) and not pending:
                break
        self.segments.append(mf.Segment(kind, start, length, tuple(hashes)))

    def add_tensor(self, t: TensorInfo, src: Reader) -> bool:
        """Stream one tensor's chunks; False if the stream ended inside it.

        A truncated tensor becomes one `bytes` segment over everything read.
        """
        prev = self.previous.get(t.name)
        if prev is not None and (prev.dtype, prev.shape) != (t.dtype, t.shape):
            prev = None
        hashes: list[bytes] = []
        length = t.end - t.begin
        for i, off in enumerate(range(0, length, self.settings.chunk_size)):
            size = min(self.settings.chunk_size, length - off)
            slot, buf = self._buffer(size)
            got = src.read_into(buf)
            if got < size:
                if got:
                    hashes.append(self._store(slot, buf[:got], "bytes", None))
                self.segments.append(mf.Segment("bytes", t.begin, off + got, tuple(hashes)))
                return False
            base = prev.hashes[i] if prev is not None and i < len(prev.hashes) else None
            hashes.append(self._store(slot, buf, t.dtype, base))
        self.segments.append(
            mf.Segment("tensor", t.begin, length, tuple(hashes), t.name, t.dtype, t.shape)
        )
        return True

    def finish(self, kind: str) -> mf.Manifest:
        for job in self._busy:
            if job is not None:
                job.result()
        self._pool.shutdown()
        for buffer in self._buffers:
            if buffer is not None:
                malloc.give_buffer(buffer)
        self._buffers = [None, None]
        self.store.flush()
        size = sum(s.length for s in self.segments)
        m = mf.Manifest(kind, size, self.settings.chunk_size, self.segments)
        if self.chains is not None and self.base is not None and not self.whole:
            self.chains.stored(self.store, m, self.base, self.base_chain)
        return m


def _starts_chain(chain: Chain | None, settings: Settings, previous: mf.Manifest) -> bool:
    """Whether a version after `previous` is stored whole: that one's chain is unknown, or
    one more version on it (about as large as the last delta on it) would not fit. The first
    delta on a whole version is always tried: it is stored whole where it does not pay, and
    the push checks every chain as stored (transfer/layout.py)."""
    return (
        chain is None
        or chain.levels + 1 > settings.max_chain_depth
        or chain.cost + (chain.own if chain.levels else 0) > settings.fetch_budget * previous.size
    )


def previous_manifest(store: ChunkStore, path: str) -> mf.Manifest | None:
    """The staged (else committed) manifest of `path`: the delta bases for this version."""
    for rev in (":" + path, "HEAD:" + path):
        data = store.reader.read(rev)
        if data is not None and mf.looks_like_manifest(data):
            try:
                return mf.parse(bytes(data))
            except mf.ManifestError:
                return None
    return None


def declared_parent_manifest(store: ChunkStore, path: str) -> mf.Manifest | None:
    """The manifest of the first parent that mgit.toml declares for the model at `path`.

    mgit.toml is read as data (never executed), and only for a path with no
    previous version, so a new fine-tune is stored as a delta from its base.
    """
    worktree = store.repo.worktree
    if worktree is None or not (worktree / "mgit.toml").is_file():
        return None
    from git_mgit import repoconfig  # only here: most cleans never need it

    try:
        cfg = repoconfig.load(worktree)
    except MgitError:
        return None
    decl = cfg.model_at(path)
    parent = cfg.models.get(decl.parents[0]) if decl and decl.parents else None
    if parent is None or parent.path.endswith("/"):
        return None
    return previous_manifest(store, parent.path)


CHUNK_HINT = "mgit.chunk"


def _chunk_hint(settings: Settings, header: Header) -> Settings:
    """The chunk size the file asks for in its metadata, if it may have it.

    A distributed training checkpoint stores a sharded tensor in chunks that
    end where each rank's rows end (runtime/training/plan.py) and says so in
    the file, so that cleaning the same bytes again gives the same manifest.
    Honoured when it is no larger than the configured chunk size and every
    tensor's elements divide it; ignored otherwise.
    """
    text = (header.metadata or {}).get(CHUNK_HINT)
    if text is None or not text.isdigit():
        return settings
    size = int(text)
    widths = {DTYPES[t.dtype].bits // 8 for t in header.tensors if t.dtype in DTYPES}
    if not 0 < size <= settings.chunk_size or any(w and size % w for w in widths):
        return settings
    return dataclasses.replace(settings, chunk_size=size)


def clean(
    src: BinaryIO,
    path: str,
    store: ChunkStore,
    settings: Settings,
    warn: Warn = _stderr,
    base: mf.Manifest | None = None,
    from_index: bool = True,
) -> bytes:
    """Consume the whole stream; return the canonical manifest bytes.

    Delta bases come from the previous version of `path` (staged, else
    committed; not when `from_index` is False, as when rewriting history),
    else from `base` (a lineage parent or an earlier version the caller
    knows), else from the parent mgit.toml declares.
    """
    source = _Source(src)
    prefix = source.read(8)
    header = None
    head = prefix
    try:
        head += source.read(header_length(prefix))
        if len(head) < 8 + header_length(prefix):
            raise NotSafetensors("the file ends inside its header")
        header = parse_header(head)
    except NotSafetensors as exc:
        if GIT_LFS_SPEC.startswith(head):  # its first 8 bytes: read enough to tell
            head += source.read(len(GIT_LFS_SPEC) - len(head))
        if head:
            reason = why_not(head, exc)
            warn(f"{path}: not a valid safetensors file ({reason}); storing it as opaque bytes")
    if header is not None:
        settings = _chunk_hint(settings, header)
    progress = Progress(f"git-mgit: storing {path}", header.file_size if header else None)
    previous = None
    if header is not None and path:
        staged = previous_manifest(store, path) if from_index else None
        previous = staged or base or declared_parent_manifest(store, path)
    builder = ManifestBuilder(store, settings, previous, progress)
    try:
        if header is None:
            if head:
                builder.add_bytes("bytes", head, source)
            return builder.finish("opaque").render()
        builder.add_bytes("header", head)
        for t in header.tensors:
            if not builder.add_tensor(t, source):
                warn(
                    f"{path}: file ends inside tensor {t.name!r} (truncated?); stored as opaque bytes"
                )
                return builder.finish("opaque").render()
        extra = source.read(1)
        if extra:
            warn(
                f"{path}: {header.file_size}-byte safetensors file has trailing bytes; storing them opaque"
            )
            builder.add_bytes("bytes", extra, source)
            return builder.finish("opaque").render()
        return builder.finish("safetensors").render()
    finally:
        progress.finish()
