"""Rank 0's part of a checkpoint: the files' headers and manifests, and the commit.

By the time rank 0 gets here, every rank has stored its own chunks and
sent rank 0 their content hashes (and its generator states). A tracked
file's manifest is a function of its bytes, so it can be written without
the bytes: the safetensors header (serialized here from the plan, the
only chunks rank 0 stores besides the generators'), then each tensor's
segment at its offset with the hashes of its chunks. The result is what
`git add` of the same file would give, so the checkpoint is an ordinary
model version that checkout, diff, test and load_state_dict read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from git_mgit.gitcmd import Repo
from git_mgit.lineage.save import serialize_header
from git_mgit.modelfile import manifest as mf
from git_mgit.runtime.training import layout
from git_mgit.runtime.training.holdings import SAFETENSORS_DTYPES
from git_mgit.runtime.training.layout import Info
from git_mgit.runtime.training.objects import Job, Key, ObjectWriter
from git_mgit.runtime.training.plan import FilePlan, FileTensor, Plan
from git_mgit.tensors.dtypes import DTYPES

HEADER = "<header>"  # the key of a header's chunks (no tensor has that name)
RngStates = list[tuple[dict[str, Any], dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class _Sized:
    nbytes: int


@dataclass
class Files:
    """A checkpoint's files as git stores them: manifests (tracked) and plain files."""

    manifests: dict[str, bytes]
    plain: dict[str, bytes]
    anchor: str | None = None  # what anchors the headers' and generators' objects


def _bytes(t: torch.Tensor) -> memoryview:
    t = t.detach().cpu().contiguous()
    flat = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    return memoryview(flat.numpy()).cast("B")


def rng_tensors(rng: RngStates, rng_epoch: RngStates | None) -> dict[str, torch.Tensor]:
    """Every rank's generator tensors, named as the training file holds them."""
    out = {}
    for key, states in (("rng", rng), ("rng-epoch", rng_epoch)):
        for rank, (_, tensors) in enumerate(states or []):
            out.update({f"{key}/{rank}/{n}": t for n, t in tensors.items()})
    return out


def assemble(
    plan: Plan,
    hashes: Mapping[Key, bytes],
    info: Info,
    skeletons: Mapping[str, Any],
    rng: RngStates,
    rng_epoch: RngStates | None,
    objects: ObjectWriter,
    threads: int,
) -> Files:
    """Every file's manifest from the ranks' chunk hashes; stores headers and generators."""
    extra = rng_tensors(rng, rng_epoch)
    training = layout.training_path(info.run)
    files: list[tuple[FilePlan, list[FileTensor], dict[str, str], bytes]] = []
    jobs: list[Job] = []
    for f in plan.files:
        tensors = list(f.tensors)
        meta = dict(f.metadata)
        if f.path == training:
            meta.update(layout.training_metadata(info, skeletons, rng, rng_epoch))
            tensors += [
                FileTensor(n, n, 0, 1, SAFETENSORS_DTYPES[t.dtype], tuple(t.shape))
                for n, t in extra.items()
            ]
            tensors.sort(key=lambda t: t.name)
            for n, t in extra.items():
                data = _bytes(t)
                jobs += [
                    Job((f.path, n, i), data[lo : lo + f.chunk_size], SAFETENSORS_DTYPES[t.dtype])
                    for i, lo in enumerate(range(0, len(data), f.chunk_size))
                ]
        elif info.parallel != "fsdp":
            meta.update(layout.model_metadata(info))
        else:
            meta["format"] = "pt"
        header = serialize_header(
            [(t.name, t.dtype, list(t.shape), _Sized(_length(plan, t))) for t in tensors], meta
        )
        jobs += [
            Job((f.path, HEADER, i), memoryview(header)[lo : lo + f.chunk_size], "bytes")
            for i, lo in enumerate(range(0, len(header), f.chunk_size))
        ]
        files.append((f, tensors, meta, header))
    stored = dict(hashes)
    written = objects.write(jobs, threads)
    stored.update(written.hashes)
    manifests = {
        f.path: _manifest(f, tensors, header, stored, plan).render()
        for f, tensors, _, header in files
    }
    plain = {}
    if info.parallel == "fsdp":
        folder = layout.model_path(info.run, True)
        weight_map, total = {}, 0
        for f, tensors, _, _ in files:
            if f.path.startswith(folder + "/"):
                for t in tensors:
                    weight_map[t.name] = f.path.rsplit("/", 1)[1]
                    total += _length(plan, t)
        plain[f"{folder}/{layout.INDEX_FILE}"] = layout.folder_index(info, weight_map, total)
    return Files(manifests, plain, written.anchor)


def _length(plan: Plan, t: FileTensor) -> int:
    e = plan.entries.get(t.entry)
    if e is None:  # a generator's tensor, whole
        return math.prod(t.shape) * DTYPES[t.dtype].bits // 8
    return (t.stop - t.start) * e.row_bytes


def _manifest(
    f: FilePlan,
    tensors: list[FileTensor],
    header: bytes,
    hashes: Mapping[Key, bytes],
    plan: Plan,
) -> mf.Manifest:
    def chunk_hashes(name: str, length: int) -> tuple[bytes, ...]:
        return tuple(hashes[(f.path, name, i)] for i in range(mf.chunk_count(length, f.chunk_size)))

    segments = [mf.Segment("header", 0, len(header), chunk_hashes(HEADER, len(header)))]
    at = len(header)
    for t in tensors:
        length = _length(plan, t)
        segments.append(
            mf.Segment("tensor", at, length, chunk_hashes(t.name, length), t.name, t.dtype, t.shape)
        )
        at += length
    return mf.Manifest("safetensors", at, f.chunk_size, segments)


def write_blobs(repo: Repo, files: Files) -> dict[str, str]:
    """Every file as a git blob: path -> blob id."""
    return {
        path: repo.git("hash-object", "-w", "--stdin", input=data)
        for path, data in {**files.manifests, **files.plain}.items()
    }
