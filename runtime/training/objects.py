"""One rank's chunks into the object store: hashed, delta-encoded, compressed and written by
several encoder processes at once.

Each encoder (encoders.py, encoding.py) takes chunks as the rank hands them
out, largest first, and does all of a chunk's work: BLAKE3 (nothing more if
the store holds it: a frozen layer costs its hash), the delta decision
against the keyframe at the chunk's place (below), byte planes and zstd,
then an append to the encoder's own pack.
The rank keeps what the next checkpoint's decisions need: every chunk's
content hash and a few fixed windows of it (at most 1/8, about 0.4% of a
64 MiB chunk), so a decision reads nothing; only a chosen delta decodes its
base, in the encoder that chose it. The first checkpoint of a run started
from a model uses that model's chunks as bases.

The base at a place is its keyframe: the chunk last stored there whole (or
found stored), not the last one written. A chunk stored as a delta leaves
the keyframe as it was, so the next checkpoint's delta is of the keyframe
too, and one that does not pay against it is stored whole and becomes the
next keyframe. Chains stay one level deep (two after a start model's
bases) however long a run is: a commit decodes one level to write a delta,
and a resume one to read it. Deltas of the previous checkpoint instead grew
a chain by a level per checkpoint, and each level cost an encoder ~5 ns a
byte to decode (an H200 host: 21 CPU s for a 4.26 GB checkpoint stored
whole, 29 s with deltas of depth 1, 35 s of depth 2).

All of a call's objects are anchored by one commit under
refs/mgit/objects/, written into a small pack of the rank's own, whose ref
is set only once every encoder's pack is in place: an object is never
referenced before it is stored, and never unreachable once it is.

Several ranks (processes) write into the same repository at once: packs
get unique temporary names and content-named final ones, anchor refs are
unique per commit, and the lookup cache is SQLite in WAL mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from git_mgit.config import Settings
from git_mgit.gitcmd import Repo
from git_mgit.runtime.training.encoders import Chunk, EncoderError, EncoderPool
from git_mgit.runtime.training.encoding import Previous, Result, Task
from git_mgit.runtime.training.layout import CheckpointError
from git_mgit.runtime.training.sharedmem import Where
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.packwriter import PackWriter

Key = tuple[str, str, int]  # (file, tensor in the file, chunk index)


@dataclass(frozen=True)
class Job:
    key: Key
    data: memoryview
    dtype: str  # safetensors dtype, or "bytes" for a header
    place: tuple[Where, int] | None = None  # the shared arena and offset holding `data`


@dataclass
class Written:
    """What one write() stored: every job's content hash, and its volume."""

    hashes: dict[Key, bytes] = field(default_factory=dict)
    raw: int = 0  # bytes hashed
    new_raw: int = 0  # bytes of chunks that were not stored yet
    stored: int = 0  # bytes of the objects written
    objects: int = 0
    deltas: int = 0  # objects written as deltas of an earlier chunk
    anchor: str | None = None
    cpu_s: float = 0.0  # the encoders' CPU time
    peak_anon: int = 0  # the encoders' private memory at their peaks, summed
    encode_s: float = 0.0  # until every chunk was encoded
    finish_s: float = 0.0  # until every encoder's pack was finished (durable)


class ObjectWriter:
    """Writes one rank's chunks, keeping what delta-encoding the next checkpoint needs."""

    def __init__(
        self,
        repo: Repo,
        settings: Settings,
        start: Mapping[tuple[str, int, int], bytes] | None = None,
        encoders: int = 1,
    ) -> None:
        """`start`: (tensor name, chunk index, length) -> content hash of the model training
        started from, the bases of the first checkpoint's model chunks. `encoders`: how many
        encoder processes to start now (a write may start more)."""
        self.repo, self.settings = repo, settings
        self.store = ChunkStore(repo)
        self._start = dict(start or {})
        self._previous: dict[tuple[Key, int], Previous] = {}
        self._pool = EncoderPool(repo, settings, encoders)

    def write(self, jobs: Sequence[Job], threads: int) -> Written:
        """Store every job's chunk (unless stored already) on `threads` encoders; returns their
        hashes."""
        out = Written()
        jobs = sorted(jobs, key=lambda j: -len(j.data))
        added: dict[
            bytes, tuple[bytes, int, bytes | None, int]
        ] = {}  # hash -> oid, size, base, depth

        def done(n: int, r: Result) -> None:
            job = jobs[n]
            out.hashes[job.key] = r.content_hash
            out.raw += len(job.data)
            depth = None
            if r.oid is not None:
                out.new_raw += len(job.data)
                out.stored += r.size
                out.objects += 1
                out.deltas += r.base is not None
                # two encoders may store the same content: the first one's object is the one
                # anchored and looked up (the other, unreferenced, goes at the next gc)
                depth = added.setdefault(r.content_hash, (r.oid, r.size, r.base, r.depth))[3]
            place = (job.key, len(job.data))
            keyframe = self._previous.get(place)
            if r.base is None or keyframe is None or r.base != keyframe.content_hash:
                self._previous[place] = Previous(r.content_hash, depth, r.sample)

        pack: PackWriter | None = None

        def anchor() -> None:
            """The anchor's pack, written while the encoders' packs become durable (its ref is
            set after they are)."""
            nonlocal pack
            if added:
                pack = PackWriter(self.repo.objects_dir)
                out.anchor = anchors.write_anchor(pack, [(h, a[0]) for h, a in added.items()])
                pack.finish()

        chunks = [Chunk(j.data, self._task(j), j.place) for j in jobs]
        try:
            report = self._pool.run(chunks, threads, done, anchor)
        except BaseException as exc:
            if pack is not None:
                pack.abort()  # unless finished: then nothing references its objects
            if isinstance(exc, EncoderError):
                raise CheckpointError(f"storing this rank's chunks failed: {exc}") from None
            raise
        out.cpu_s, out.peak_anon = report["cpu_s"], report["peak_anon"]
        out.encode_s, out.finish_s = report["encode_s"], report["finish_s"]
        if out.anchor is None:
            return out
        anchors.set_ref(self.repo, out.anchor)
        self.store.cache.add([(h, a[0].hex(), a[1]) for h, a in added.items()], out.anchor)
        for oid, _, base, depth in added.values():
            self.store.cache.set_header(oid.hex(), base, depth)
        return out

    def wait_ready(self) -> None:
        """Return once the encoder processes have started."""
        self._pool.wait_ready()

    def _task(self, job: Job) -> Task:
        prev = self._previous.get((job.key, len(job.data)))
        _, tensor, index = job.key
        start = self._start.get((tensor, index, len(job.data))) if prev is None else None
        return Task(job.dtype, prev, start)

    def close(self) -> None:
        self._pool.close()
        self.store.close()
