"""Which rank writes which bytes of a checkpoint: its files, their chunks, each chunk's writer.

No torch and no I/O: every rank computes the same plan from the same
global layout, so no rank has to be told what to write.

A checkpoint is a set of *entries*, full tensors by name (`model/fc.weight`,
`optimizer/state/fc.weight/exp_avg`, `scheduler/...`), each with the rows of
dim 0 that each rank holds (`Holding`). Under DDP every rank holds every
entry whole; under FSDP2 each rank holds its own row block of each
parameter and of its optimizer state, and every rank the scalars (Adam's
`step`) and unsharded buffers.

git-mgit stores a file as chunks: each tensor is cut at multiples of its
file's chunk size from the tensor's start, one object per chunk. A chunk is
written by a rank that holds all of its bytes, so no rank ever needs
another's rows, and the plan makes sure that every chunk lies within one
rank's holding:

- a replicated entry's chunks are shared out among the ranks by bytes, so
  each rank writes about 1/N of the replicated state;
- the model's sharded entries go into the files of a sharded model folder
  grouped by the chunk size that puts every rank boundary on a chunk
  boundary (the largest divisor of their row-block bytes up to the
  configured chunk size); a file whose chunk size is not the configured one
  says so in its header (`mgit.chunk`), so that cleaning the same bytes
  gives the same manifest;
- in the training state file, a sharded entry is stored as one tensor per
  row block (`NAME@START`, listed in the file's `pieces` metadata), which
  any chunk size aligns;
- a sharded entry of at most SMALL bytes in all (a norm's weight, a bias) is
  assembled by one rank from its holders' rows, then stored like a
  replicated one: a few KiB, against one object per rank and file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from git_mgit.modelfile.clean import CHUNK_HINT
from git_mgit.runtime.training import layout
from git_mgit.tensors.dtypes import DTYPES

SMALL = 1 << 20  # a sharded entry up to this size is assembled whole by one rank
PIECES = "pieces"  # training file metadata: the row blocks of sharded entries
MODEL, TRAINING = "model/", ""  # entry name prefixes of the two kinds of file


@dataclass(frozen=True)
class Holding:
    """Rows [start, stop) of an entry (dim 0; a 0-d tensor has one row), held by `rank`."""

    rank: int
    start: int
    stop: int


@dataclass(frozen=True)
class Entry:
    """One full tensor of the checkpoint and who holds which of its rows."""

    name: str
    dtype: str  # safetensors dtype
    shape: tuple[int, ...]
    holdings: tuple[Holding, ...]

    @property
    def width(self) -> int:
        return DTYPES[self.dtype].bits // 8

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_bytes(self) -> int:
        return row_bytes(self.dtype, self.shape)

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def sharded(self) -> bool:
        """Whether no rank holds it whole."""
        return not any(h.start == 0 and h.stop == self.rows for h in self.holdings)

    def holders(self, lo: int, hi: int) -> list[int]:
        """The ranks holding every byte of [lo, hi)."""
        rb = self.row_bytes
        return sorted({h.rank for h in self.holdings if h.start * rb <= lo and hi <= h.stop * rb})


@dataclass(frozen=True)
class FileTensor:
    """A tensor of one planned file: rows [start, stop) of `entry` (all of them, or one block)."""

    name: str  # its name in the file
    entry: str
    start: int
    stop: int
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class FilePlan:
    path: str
    chunk_size: int
    tensors: tuple[FileTensor, ...]  # by name
    metadata: dict[str, str] = field(default_factory=dict)  # the planned part (hints, pieces)


@dataclass(frozen=True)
class Chunk:
    """One chunk of one file's tensor: bytes [lo, hi) of its entry, and who writes it."""

    file: str
    tensor: str
    index: int
    entry: str
    lo: int
    hi: int
    writer: int


@dataclass
class Plan:
    files: list[FilePlan]
    chunks: list[Chunk]
    assembled: dict[str, int]  # small sharded entry -> the rank that assembles it
    entries: dict[str, Entry]

    def mine(self, rank: int) -> list[Chunk]:
        return [c for c in self.chunks if c.writer == rank]

    def loads(self, world_size: int) -> list[int]:
        """Bytes each rank writes."""
        out = [0] * world_size
        for c in self.chunks:
            out[c.writer] += c.hi - c.lo
        return out


def row_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of one row (the first dimension) of a tensor; a scalar is one row."""
    width = DTYPES[dtype].bits // 8
    return math.prod(shape[1:]) * width if shape else width


def aligned_chunk(block: int, limit: int, width: int) -> int:
    """The largest divisor of `block` (a multiple of `width`) that is at most `limit` and a
    multiple of `width`: a chunk size that puts a boundary at every multiple of `block`."""
    if block <= limit:
        return block
    for k in range(-(-block // limit), block // width + 1):
        if block % k == 0 and (block // k) % width == 0:
            return block // k
    return width


def _boundary_chunk(entry: Entry, limit: int) -> int | None:
    """The chunk size that aligns the entry's rank boundaries; None when one rank holds it all
    or it is SMALL (assembled)."""
    if not entry.sharded or entry.nbytes <= SMALL:
        return None
    rb = entry.row_bytes
    cuts = {b * rb for h in entry.holdings for b in (h.start, h.stop)} - {0, entry.nbytes}
    block = math.gcd(*cuts) if cuts else entry.nbytes
    return aligned_chunk(block, limit, entry.width)


def _blocks(entry: Entry) -> list[tuple[int, int]]:
    """The distinct row blocks the ranks hold (replicas of a block counted once), in order."""
    return sorted({(h.start, h.stop) for h in entry.holdings if h.stop > h.start})


def piece_name(entry: str, start: int) -> str:
    return f"{entry}@{start}"


def plan(
    entries: Mapping[str, Entry], world_size: int, run: str, parallel: str, limit: int
) -> Plan:
    """The plan of a checkpoint of `entries` (model/... and training state) on `world_size` ranks.

    `parallel` is the run's ("fsdp" makes the model a sharded folder); `limit`
    the repository's chunk size (no chunk is larger).
    """
    model = {n: e for n, e in entries.items() if n.startswith(MODEL)}
    training = {n: e for n, e in entries.items() if not n.startswith(MODEL)}
    loads = [0] * world_size
    assembled: dict[str, int] = {}
    for e in sorted(entries.values(), key=lambda e: (-e.nbytes, e.name)):
        if e.sharded and e.nbytes <= SMALL:
            owner = min(range(world_size), key=lambda r: (loads[r], r))
            assembled[e.name] = owner
            loads[owner] += e.nbytes
    files = _model_files(model, run, parallel == "fsdp", limit)
    files.append(_training_file(training, run, limit, assembled))
    chunks = _assign(files, entries, assembled, loads)
    return Plan(files, chunks, assembled, dict(entries))


def _model_files(model: Mapping[str, Entry], run: str, folder: bool, limit: int) -> list[FilePlan]:
    def whole(e: Entry) -> FileTensor:
        return FileTensor(e.name[len(MODEL) :], e.name, 0, e.rows, e.dtype, e.shape)

    if not folder:
        tensors = tuple(sorted((whole(e) for e in model.values()), key=lambda t: t.name))
        return [FilePlan(layout.model_path(run, False), limit, tensors)]
    groups: dict[int, list[Entry]] = {}
    free: list[Entry] = []
    for e in model.values():
        size = _boundary_chunk(e, limit)
        (free if size is None else groups.setdefault(size, [])).append(e)
    groups.setdefault(max(groups, default=limit), []).extend(free)
    ordered = sorted(groups.items(), key=lambda kv: min(e.name for e in kv[1]))
    folder_path = layout.model_path(run, True)
    out = []
    for i, (size, members) in enumerate(ordered, 1):
        tensors = tuple(sorted((whole(e) for e in members), key=lambda t: t.name))
        meta = {} if size == limit else {CHUNK_HINT: str(size)}
        name = f"model-{i:05d}-of-{len(ordered):05d}.safetensors"
        out.append(FilePlan(f"{folder_path}/{name}", size, tensors, meta))
    return out


def _training_file(
    training: Mapping[str, Entry], run: str, limit: int, assembled: Mapping[str, int]
) -> FilePlan:
    tensors: list[FileTensor] = []
    pieces: dict[str, dict] = {}
    for e in training.values():
        if not e.sharded or e.name in assembled:
            tensors.append(FileTensor(e.name, e.name, 0, e.rows, e.dtype, e.shape))
            continue
        blocks = _blocks(e)
        pieces[e.name] = {"shape": list(e.shape), "dtype": e.dtype, "rows": blocks}
        for start, stop in blocks:
            shape = (stop - start, *e.shape[1:])
            tensors.append(
                FileTensor(piece_name(e.name, start), e.name, start, stop, e.dtype, shape)
            )
    meta = {PIECES: layout.canonical(pieces)} if pieces else {}
    ordered = tuple(sorted(tensors, key=lambda t: t.name))
    return FilePlan(layout.training_path(run), limit, ordered, meta)


def _assign(
    files: Sequence[FilePlan],
    entries: Mapping[str, Entry],
    assembled: Mapping[str, int],
    loads: list[int],
) -> list[Chunk]:
    """Every chunk of every file with its writer: the only holder, else the least loaded one."""
    fixed: list[Chunk] = []
    free: list[tuple[Chunk, list[int]]] = []
    for f in files:
        for t in f.tensors:
            e = entries[t.entry]
            base, end = t.start * e.row_bytes, t.stop * e.row_bytes
            for i, lo in enumerate(range(base, end, f.chunk_size)):
                hi = min(lo + f.chunk_size, end)
                holders = [assembled[e.name]] if e.name in assembled else e.holders(lo, hi)
                if not holders:
                    raise AssertionError(f"{t.name} chunk {i} of {f.path} lies across ranks")
                chunk = Chunk(f.path, t.name, i, e.name, lo, hi, holders[0])
                if len(holders) == 1:
                    fixed.append(chunk)
                    if e.name not in assembled:
                        loads[holders[0]] += hi - lo
                else:
                    free.append((chunk, holders))
    out = list(fixed)
    for chunk, holders in sorted(
        free, key=lambda ch: (ch[0].lo - ch[0].hi, ch[0].file, ch[0].tensor, ch[0].index)
    ):
        writer = min(holders, key=lambda r: (loads[r], r))
        loads[writer] += chunk.hi - chunk.lo
        out.append(
            Chunk(chunk.file, chunk.tensor, chunk.index, chunk.entry, chunk.lo, chunk.hi, writer)
        )
    return out
