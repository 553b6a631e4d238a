"""Model versions as torch tensors, read from their objects; several at once with shared storage.

Each tensor's chunks are decoded straight into one buffer that the torch
tensor then owns (no file is written, no pickle is read). load_models()
loads several versions and gives tensors with the same content (dtype,
shape and chunk hashes: the same bytes) one storage shared by every model
that holds them, as MGit does for collocated inference (paper section 4):
a fine-tune with frozen layers costs memory only for what it changed.
`load_state_dict(..., assign=True)` keeps that sharing in torch modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from git_mgit import codecs
from git_mgit.console.progress import Progress, format_size
from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import Tensor, tensors
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors import dtypes
from git_mgit.transfer.fetch import ensure_local

TORCH_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, attr) for name, attr in dtypes.TORCH.items()
}

StateDict = dict[str, torch.Tensor]


def _key(t: Tensor) -> tuple:
    return (t.dtype, t.shape, t.hashes)


def _read(store: ChunkStore, t: Tensor) -> torch.Tensor:
    dtype = TORCH_DTYPES.get(t.dtype)
    if dtype is None:
        raise MgitError(f"tensor {t.name!r}: torch has no {t.dtype} type")
    if t.segment.length == 0:
        return torch.empty(t.shape, dtype=dtype)
    buf = bytearray(t.segment.length)
    view = memoryview(buf)
    for i, h in enumerate(t.hashes):
        decoder = store.decoder(h)
        start = i * t.chunk_size
        codecs.decode_into(decoder, view[start : start + decoder.size])
    return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(t.shape)


@dataclass
class Loaded:
    """Several versions' state dicts, sharing tensors with equal content, and what that saved."""

    models: dict[str, StateDict] = field(default_factory=dict)  # by the reference asked for
    total_bytes: int = 0  # what loading each model on its own would take
    unique_bytes: int = 0  # what was loaded
    shared_tensors: int = 0  # tensors served from another model's storage

    @property
    def saved_bytes(self) -> int:
        return self.total_bytes - self.unique_bytes

    def summary(self) -> str:
        share = self.saved_bytes / self.total_bytes if self.total_bytes else 0.0
        return (
            f"{len(self.models)} models: {format_size(self.unique_bytes)} in memory instead of "
            f"{format_size(self.total_bytes)} ({format_size(self.saved_bytes)} saved, {share:.0%}; "
            f"{self.shared_tensors} tensors shared)"
        )


def load_models(refs: Iterable[str], lineage: Lineage | None = None) -> Loaded:
    """Load model versions (anything `git mgit lineage` accepts) with shared storage."""
    lin = lineage or Lineage()
    store = ChunkStore(lin.repo)
    try:
        wanted = [(ref, lin.resolve(ref)) for ref in refs]
        found = {ref: contents.named_manifests(lin.repo, store.reader, v) for ref, v in wanted}
        ensure_local(store, [pair for pairs in found.values() for pair in pairs])
        return _decode(store, found)
    finally:
        store.close()


def load_manifests(objects: str, manifests: Mapping[str, str]) -> StateDict:
    """One model from its manifests' text (shard path -> manifest; "" for a file model),
    decoded from the objects of the git repository `objects`.

    How a worker on a cluster node loads a version: the head sends the manifests,
    the node's object cache holds what they name (runtime.execution.node).
    """
    repo = find_repo(objects)
    store = ChunkStore(repo)
    try:
        named = [(rel or "model", mf.parse(text.encode())) for rel, text in manifests.items()]
        for name, m in named:
            missing = store.missing([c.content_hash for c in m.chunks()])
            if missing:
                raise MgitError(f"{name}: {len(missing)} tensor object(s) are not in {objects}")
        return _decode(store, {"": named}).models[""]
    finally:
        store.close()


def _decode(store: ChunkStore, found: Mapping[str, list[tuple[str, mf.Manifest]]]) -> Loaded:
    """Each entry's manifests as one state dict; equal tensors decoded once and shared."""
    out = Loaded()
    cache: dict[tuple, torch.Tensor] = {}
    plans = [(ref, tensors(dict(pairs))) for ref, pairs in found.items()]
    total = sum(t.segment.length for _, ts in plans for t in ts.values())
    progress = Progress("git-mgit: loading models", total)
    try:
        for ref, ts in plans:
            model: StateDict = {}
            for name, t in ts.items():
                out.total_bytes += t.segment.length
                key = _key(t)
                if key in cache:
                    out.shared_tensors += 1
                else:
                    cache[key] = _read(store, t)
                    out.unique_bytes += t.segment.length
                model[name] = cache[key]
                progress.update(t.segment.length)
            out.models[ref] = model
    finally:
        progress.finish()
    return out


def load_state_dict(ref: str, lineage: Lineage | None = None) -> StateDict:
    """One model version's tensors."""
    return load_models([ref], lineage).models[ref]


def save_tensors(state: Mapping[str, torch.Tensor], path: str) -> None:
    """A safetensors file (for handing results between processes: never a pickle)."""
    from safetensors.torch import save_file

    save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, path)


def read_tensors(path: str) -> StateDict:
    from safetensors.torch import load_file

    return load_file(path)
