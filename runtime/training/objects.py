"""One rank's chunks into the object store: hashed, delta-encoded, compressed and written on
several threads at once.

Each of `threads` lanes takes chunks from a shared queue and does all of a
chunk's work: BLAKE3 (skip it if the store holds it: a frozen layer costs
nothing), the delta decision against the chunk this rank wrote at the same
place in the previous checkpoint, byte planes and zstd, then an append to
the lane's own pack. BLAKE3, zstd, numpy and the pack writer's SHA-1 and
pwritev release the GIL, so lanes scale with cores; one pack per lane
keeps the packs' two SHA-1 passes (about 1 GB/s each) off the critical
path. All of a call's objects are anchored by one commit under
refs/mgit/objects/ (written into the first lane's pack), whose ref is set
only once every pack is in place: an object is never referenced before it
is stored, and never unreachable once it is.

Delta bases: the chunk this rank wrote at the same place in the previous
checkpoint. Whether a delta pays, and which codec, is decided once, on a few
fixed windows of the chunk (at most 1/8 of it) against the same windows of
the base, which the writer keeps for every chunk it wrote (about 0.4% of a
64 MiB one), so the decision costs no read. Only a chunk whose delta is
chosen decodes its base, and each lane decodes with a chunk store of its own,
so bases decode on every core at once. The first checkpoint of a run started
from a model uses that model's chunks as bases, decoded to decide.

Several ranks (processes) write into the same repository at once: packs
get unique temporary names and content-named final ones, anchor refs are
unique per commit, and the lookup cache is SQLite in WAL mode.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import blake3

from git_mgit import codecs, hashing
from git_mgit.codecs.codec import DELTA_GAIN, encode_as, estimate, layout, standalone
from git_mgit.codecs.objectformat import Codec
from git_mgit.config import Settings
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.packwriter import PackWriter

Key = tuple[str, str, int]  # (file, tensor in the file, chunk index)
_WINDOWS = 4
_MAX_WINDOW = 16384  # elements


@dataclass(frozen=True)
class Job:
    key: Key
    data: memoryview
    dtype: str  # safetensors dtype, or "bytes" for a header


@dataclass
class Written:
    """What one write() stored: every job's content hash, and its volume."""

    hashes: dict[Key, bytes] = field(default_factory=dict)
    raw: int = 0  # bytes hashed
    new_raw: int = 0  # bytes of chunks that were not stored yet
    stored: int = 0  # bytes of the objects written
    objects: int = 0
    anchor: str | None = None


@dataclass(frozen=True)
class _Previous:
    content_hash: bytes
    depth: int | None  # chain depth of the object written for it (None: found stored)
    sample: bytes


def probe(data: memoryview, width: int) -> memoryview:
    """A few fixed windows of a chunk (at most 1/8 of it): what delta decisions are made on."""
    n = len(data) // width
    win = min(_MAX_WINDOW, max(1, n // (8 * _WINDOWS)))
    if n <= win * _WINDOWS:
        return data
    step = n // _WINDOWS
    return memoryview(
        b"".join(data[i * step * width : (i * step + win) * width] for i in range(_WINDOWS))
    )


class ObjectWriter:
    """Writes one rank's chunks, keeping what delta-encoding the next checkpoint needs."""

    def __init__(
        self,
        repo: Repo,
        settings: Settings,
        start: Mapping[tuple[str, int, int], bytes] | None = None,
    ) -> None:
        """`start`: (tensor name, chunk index, length) -> content hash of the model training
        started from, the bases of the first checkpoint's model chunks."""
        self.repo, self.settings = repo, settings
        self.store = ChunkStore(repo)
        self._start = dict(start or {})
        self._previous: dict[tuple[Key, int], _Previous] = {}
        self._written: set[bytes] = set()

    def write(self, jobs: Sequence[Job], threads: int) -> Written:
        """Store every job's chunk (unless stored already); returns their hashes."""
        out = Written()
        todo: queue.Queue[Job] = queue.Queue()
        for job in sorted(jobs, key=lambda j: -len(j.data)):
            todo.put(job)
        lanes = [_Lane(self, todo, out) for _ in range(max(1, min(threads, len(jobs))))]
        single = len(lanes) > 1  # lanes hash on one thread each; one lane may use them all
        workers = [threading.Thread(target=lane.run, args=(single,)) for lane in lanes]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        failed = next((lane.error for lane in lanes if lane.error is not None), None)
        packs = [lane.pack for lane in lanes if lane.pack is not None]
        try:
            if failed is not None:
                raise failed
            if packs:
                objects = [(h, oid) for lane in lanes for h, oid, _ in lane.added]
                out.anchor = anchors.write_anchor(packs[0], objects)
                with ThreadPoolExecutor(len(packs), thread_name_prefix="mgit-finish") as pool:
                    for done in [pool.submit(p.finish) for p in packs]:
                        done.result()
        except BaseException:
            for p in packs:
                p.abort()
            raise
        if out.anchor is not None:
            anchors.set_ref(self.repo, out.anchor)
            entries = [(h, oid.hex(), size) for lane in lanes for h, oid, size in lane.added]
            self.store.cache.add(entries, out.anchor)
            for lane in lanes:
                for oid, base, depth in lane.headers:
                    self.store.cache.set_header(oid, base, depth)
        return out

    def encode(
        self, job: Job, h: bytes, sample: memoryview, store: Callable[[], ChunkStore]
    ) -> codecs.Encoded:
        """The chunk's object: standalone, or a delta of the previous checkpoint's chunk at
        the same place when that pays (decided once, on `sample`; the base decoded from
        `store()`, the calling lane's own, made only if a base is decoded)."""
        prev = self._previous.get((job.key, len(job.data)))
        if prev is not None and prev.content_hash != h:
            est = estimate(sample, job.dtype, memoryview(prev.sample))
            codec = standalone(est)
            delta = min((Codec.XOR, Codec.SUB), key=est.__getitem__)
            if est[delta] < est[codec] * DELTA_GAIN:
                base = self._decoded(store, prev.content_hash, prev.depth)
                if base is not None:
                    return encode_as(delta, job.data, job.dtype, h, base)
            return encode_as(codec, job.data, job.dtype, h)
        _, tensor, index = job.key
        start = self._start.get((tensor, index, len(job.data)))
        base = self._decoded(store, start, None) if prev is None and start is not None else None
        return codecs.encode(job.data, job.dtype, h, base, self.settings.max_chain_depth)

    def _decoded(
        self, store: Callable[[], ChunkStore], h: bytes, depth: int | None
    ) -> codecs.Base | None:
        try:
            if depth is None:
                depth = store().chain_of(h)[1]
            if depth + 1 > self.settings.max_chain_depth:
                return None
            return codecs.Base(store().get_raw(h), h, depth)
        except MgitError:
            return None  # not here (another node wrote it): store it whole

    def remember(self, job: Job, h: bytes, depth: int | None, sample: memoryview) -> None:
        self._previous[(job.key, len(job.data))] = _Previous(h, depth, bytes(sample))

    def close(self) -> None:
        self.store.close()


class _Lane:
    """One thread's share of a write: chunks from the queue into its own pack."""

    def __init__(self, writer: ObjectWriter, todo: queue.Queue[Job], out: Written) -> None:
        self.writer, self.todo, self.out = writer, todo, out
        self.pack: PackWriter | None = None
        self.added: list[tuple[bytes, bytes, int]] = []  # (content hash, oid20, stored size)
        self.headers: list[tuple[str, bytes | None, int]] = []
        self.error: BaseException | None = None
        self._store: ChunkStore | None = None  # decodes this lane's delta bases

    def run(self, single: bool) -> None:
        try:
            while True:
                try:
                    job = self.todo.get_nowait()
                except queue.Empty:
                    return
                self._one(job, single)
        except BaseException as exc:  # raised by write() once every lane has stopped
            self.error = exc
            while not self.todo.empty():
                self.todo.get_nowait()
        finally:
            if self._store is not None:
                self._store.close()

    def store(self) -> ChunkStore:
        """A chunk store of this lane's own: its readers are not shared between threads."""
        if self._store is None:
            self._store = ChunkStore(self.writer.repo)
        return self._store

    def _one(self, job: Job, single: bool) -> None:
        w, data = self.writer, job.data
        h = blake3.blake3(data).digest() if single else hashing.digest(data)
        width, _ = layout(job.dtype, len(data))
        sample = probe(data, width)
        with _shared:
            self.out.hashes[job.key] = h
            self.out.raw += len(data)
            known = h in w._written
            w._written.add(h)
        if known or w.store.has(h):
            w.remember(job, h, None, sample)
            return
        encoded = w.encode(job, h, sample, self.store)
        if self.pack is None:
            self.pack = PackWriter(w.repo.objects_dir)
        oid = self.pack.add("blob", encoded.parts)
        hdr = encoded.header
        self.added.append((h, oid, encoded.size))
        self.headers.append((oid.hex(), hdr.base_hash, hdr.depth))
        w.remember(job, h, hdr.depth, sample)
        with _shared:
            self.out.new_raw += len(data)
            self.out.stored += encoded.size
            self.out.objects += 1


_shared = threading.Lock()
