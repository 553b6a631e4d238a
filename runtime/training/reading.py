"""A checkpoint commit's tensors, read by rows: what a rank restores, whatever wrote them.

Every entry (plan.py's names: `model/fc.weight`, `optimizer/state/...`) is
found in the checkpoint's files: a model file or a sharded model folder
(whole tensors, any grouping), and the training file (whole tensors, or a
sharded entry's row blocks as listed in its `pieces` metadata). read(name,
start, stop) decodes only the chunks that hold rows [start, stop), so a
rank of a run resumed on another number of ranks reads its own rows and no
more, from its own repository: no rank reads for another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from git_mgit import codecs
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.merge import views
from git_mgit.modelfile import manifest as mf
from git_mgit.runtime.loading import TORCH_DTYPES
from git_mgit.runtime.training import layout, runs
from git_mgit.runtime.training.layout import CheckpointError, Info
from git_mgit.runtime.training.plan import MODEL, PIECES, piece_name, row_bytes
from git_mgit.store.chunkstore import ChunkStore


@dataclass(frozen=True)
class Place:
    """Rows [start, stop) of an entry, stored as one tensor segment of a file."""

    start: int
    stop: int
    segment: mf.Segment
    chunk_size: int


@dataclass(frozen=True)
class Shape:
    dtype: str
    shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        return row_bytes(self.dtype, self.shape)


class CheckpointReader:
    """The entries of one checkpoint commit in this rank's repository."""

    def __init__(self, repo: Repo, commit: str, info: Info, remote: str | None = None) -> None:
        """`remote`: where to fetch objects this repository lacks (other nodes published them)."""
        self.repo, self.commit, self.info, self.remote = repo, commit, info, remote
        self.store = ChunkStore(repo)
        self._fetched = False
        self.places: dict[str, list[Place]] = {}
        self.shapes: dict[str, Shape] = {}
        run, sharded = info.run, info.parallel == "fsdp"
        training = self._manifest(layout.training_path(run))
        self._ensure([h for s in training.segments if s.kind == "header" for h in s.hashes])
        self.metadata: dict[str, str] = views.load(self.store, training).metadata or {}
        for path in self._model_files(layout.model_path(run, sharded), sharded):
            self._add(self._manifest(path), MODEL)
        pieces = json.loads(self.metadata.get(PIECES, "{}"))
        for name, p in pieces.items():
            self.shapes[name] = Shape(p["dtype"], tuple(p["shape"]))
        by_piece = {piece_name(n, s): (n, s, e) for n, p in pieces.items() for s, e in p["rows"]}
        for seg in training.segments:
            if seg.kind != "tensor" or seg.name is None:
                continue
            if seg.name in by_piece:
                name, start, stop = by_piece[seg.name]
                self.places.setdefault(name, []).append(
                    Place(start, stop, seg, training.chunk_size)
                )
            else:
                self._whole(seg.name, seg, training.chunk_size)

    def _manifest(self, path: str) -> mf.Manifest:
        data = self.store.reader.read(f"{self.commit}:{path}")
        if data is None or not mf.looks_like_manifest(data):
            raise CheckpointError(
                f"{path} is missing from checkpoint {self.commit[:10]} in {self.repo.git_dir} "
                "(fetch the run branch on every node before resuming)"
            )
        return mf.parse(bytes(data))

    def _model_files(self, path: str, folder: bool) -> list[str]:
        if not folder:
            return [path]
        listing = self.repo.git("ls-tree", "--name-only", f"{self.commit}:{path}")
        return [f"{path}/{n}" for n in listing.split() if n.endswith(".safetensors")]

    def _add(self, m: mf.Manifest, prefix: str) -> None:
        for seg in m.segments:
            if seg.kind == "tensor" and seg.name is not None:
                self._whole(prefix + seg.name, seg, m.chunk_size)

    def _whole(self, name: str, seg: mf.Segment, chunk_size: int) -> None:
        shape = Shape(seg.dtype or "", tuple(seg.shape or ()))
        self.shapes[name] = shape
        rows = shape.shape[0] if shape.shape else 1
        self.places[name] = [Place(0, rows, seg, chunk_size)]

    def names(self) -> Iterable[str]:
        return self.places.keys()

    def read(self, name: str, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Rows [start, stop) of entry `name` (all of them by default), decoded and verified."""
        if name not in self.places:
            raise CheckpointError(f"checkpoint {self.commit[:10]} holds no tensor {name!r}")
        shape = self.shapes[name]
        rows = shape.shape[0] if shape.shape else 1
        stop = rows if stop is None else stop
        rb = shape.row_bytes
        out = bytearray((stop - start) * rb)
        view = memoryview(out)
        for p in self.places[name]:
            lo, hi = max(start, p.start), min(stop, p.stop)
            if lo < hi:
                self._copy(p, (lo - p.start) * rb, (hi - p.start) * rb, view[(lo - start) * rb :])
        dtype = TORCH_DTYPES[shape.dtype]
        t = torch.frombuffer(out, dtype=torch.uint8) if out else torch.empty(0, dtype=torch.uint8)
        return t.view(dtype).reshape((stop - start, *shape.shape[1:]) if shape.shape else ())

    def _ensure(self, hashes: list[bytes]) -> None:
        """Fetch the remote's objects once if any of these chunks is not here."""
        if self.remote is None or self._fetched or not self.store.missing(hashes):
            return
        self._fetched = True
        runs.fetch_objects(self.repo, self.remote)
        self.store.invalidate()

    def _copy(self, p: Place, lo: int, hi: int, dst: memoryview) -> None:
        """Bytes [lo, hi) of a place's segment into dst, chunk by chunk."""
        size = p.chunk_size
        first, stop = lo // size, -(-hi // size)
        self._ensure(list(p.segment.hashes[first:stop]))
        for i in range(first, stop):
            c_lo, c_hi = i * size, min((i + 1) * size, p.segment.length)
            a, b = max(lo, c_lo), min(hi, c_hi)
            try:
                decoder = self.store.decoder(p.segment.hashes[i])
            except MgitError as exc:
                raise CheckpointError(
                    f"checkpoint {self.commit[:10]}: {exc} (this node's clone lacks the objects "
                    "other nodes wrote: resume with --remote NAME, where they published them)"
                ) from exc
            if (a, b) == (c_lo, c_hi):
                codecs.decode_into(decoder, dst[a - lo : b - lo])
            else:
                whole = codecs.decode_all(decoder)
                dst[a - lo : b - lo] = memoryview(whole)[a - c_lo : b - c_lo]

    def json(self, key: str) -> Any:
        """A JSON part of the training file's metadata (skeletons, generator fields)."""
        return json.loads(self.metadata[key]) if key in self.metadata else None

    def close(self) -> None:
        self.store.close()
