"""A re-derived model folder laid out as its old version was: the same shards, the same index.

A cascade re-derives a sharded Hugging Face folder (`model-00001-of-00002.safetensors`
... and `model.safetensors.index.json`) from one state dict. Each tensor goes
back to the shard that held it (a new tensor to the last shard), each shard
keeps its header metadata (`{"format": "pt"}`) and has its old version as
delta base, and the index's weight map and total size are written anew.
Other files of the folder (config.json, the tokenizer) stay as they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import torch

from git_mgit.gitcmd import Repo
from git_mgit.lineage import contents
from git_mgit.lineage.history import INDEX_FILE
from git_mgit.lineage.save import ModelFile
from git_mgit.merge.views import load as model_view
from git_mgit.store.chunkstore import ChunkStore


def like(
    repo: Repo, old: str, folder: str, state: Mapping[str, torch.Tensor]
) -> tuple[list[ModelFile], dict[str, bytes]]:
    """The shard files and the index (plain files) of `state` in the layout of folder
    version `old` (a tree) at path `folder`."""
    store = ChunkStore(repo)
    try:
        shards = contents.manifests(repo, store.reader, old, "folder")
        metadata = {rel: model_view(store, m).metadata for rel, m in shards.items()}
    finally:
        store.close()
    owner = {name: rel for rel, m in shards.items() for name in m.tensors()}
    last = list(shards)[-1]
    parts: dict[str, dict[str, torch.Tensor]] = {rel: {} for rel in shards}
    for name in sorted(state):
        parts[owner.get(name, last)][name] = state[name]
    files = [
        ModelFile(f"{folder}/{rel}", tensors, metadata[rel] or None, shards[rel])
        for rel, tensors in parts.items()
    ]
    plain = {}
    index = repo.git_bytes("cat-file", "blob", f"{old}:{INDEX_FILE}", check=False)
    if index:
        data = json.loads(index)
        data["weight_map"] = {n: rel for rel, tensors in parts.items() for n in tensors}
        data.setdefault("metadata", {})["total_size"] = sum(
            t.numel() * t.element_size() for t in state.values()
        )
        plain[f"{folder}/{INDEX_FILE}"] = (
            json.dumps(data, indent=2, sort_keys=True) + "\n"
        ).encode()
    return files, plain
