"""Carrying out `slice` and `construct` plans: read tensors, mutate, commit with provenance.

The plan (git_mgit/dql/derive.py) already says which tensor of which
version each derived tensor is, and whether it is cast or re-initialised;
here the tensors are read (one version's equal tensors share storage), the
casts and initialisations done, and each model committed with
`commit_model`: provenance edges to its source (and to any model tensors
were copied from) whose function is the query, `query:<canonical text>`,
so `git mgit log` and `git mgit graph` say which query made it. The query
is also written into the file's safetensors metadata, beside the source's
own (a Hugging Face checkpoint keeps its `format`).
"""

from __future__ import annotations

import torch

from git_mgit.dql import syntax as s
from git_mgit.dql.derive import Derivation, Part
from git_mgit.errors import MgitError
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.records import QUERY_FUNCTION
from git_mgit.lineage.save import Saved, commit_model, version_manifests
from git_mgit.merge.views import load as model_view
from git_mgit.runtime.loading import TORCH_DTYPES, load_models
from git_mgit.store.chunkstore import ChunkStore

METADATA_KEY = "mgit_query"


def commit(lin: Lineage, plans: list[Derivation], query: str, what: str) -> list[Saved]:
    """Make and commit every planned model, one at a time (memory: one model's tensors)."""
    if lin.repo.worktree is None:
        raise MgitError("queries that make models need a working tree (this repository is bare)")
    saved = []
    for d in plans:
        state = tensors(lin, d)
        metadata = {**source_metadata(lin, d.source), METADATA_KEY: query}
        label = lin.graph.nodes[d.source].label if d.source in lin.graph else d.source[:10]
        saved.append(
            commit_model(
                state,
                lin.repo.worktree / d.place.path,
                f"{what} {label} -> {d.place.path}\n\n{query}\n",
                parents=list(d.parents),
                function=QUERY_FUNCTION + query,
                name=d.place.name,
                metadata=metadata,
                lineage=lin,
            )
        )
    return saved


def tensors(lin: Lineage, d: Derivation) -> dict[str, torch.Tensor]:
    """The derived model's state dict, as the plan describes it."""
    origins = sorted({p.origin for p in d.parts if p.origin is not None})
    loaded = load_models(origins, lin).models
    generators: dict[s.Reinit, torch.Generator] = {}
    state = {}
    for p in sorted(d.parts, key=lambda p: p.name):
        if p.origin is None:
            assert p.init is not None
            gen = generators.setdefault(p.init, torch.Generator().manual_seed(p.init.seed))
            state[p.name] = initialised(p, p.init, gen)
        else:
            assert p.origin_name is not None
            t = loaded[p.origin][p.origin_name]
            want = TORCH_DTYPES[p.dtype]
            state[p.name] = t if t.dtype == want else t.to(want)
    return state


def initialised(p: Part, init: s.Reinit, gen: torch.Generator) -> torch.Tensor:
    """A fresh tensor: drawn in float32 from `gen` (so the values do not depend on the dtype's
    kernels), then cast to the part's dtype."""
    t = torch.empty(p.shape, dtype=torch.float32)
    if init.init == "zeros":
        t.zero_()
    elif init.init == "ones":
        t.fill_(1.0)
    elif init.init == "constant":
        t.fill_(init.args[0])
    elif init.init == "uniform":
        t.uniform_(init.args[0], init.args[1], generator=gen)
    else:
        t.normal_(init.args[0], init.args[1], generator=gen)
    return t.to(TORCH_DTYPES[p.dtype])


def source_metadata(lin: Lineage, version: str) -> dict[str, str]:
    """The `__metadata__` of a file model's header ({} for a folder model)."""
    node = lin.graph.nodes.get(version)
    if node is None or node.kind != "file":
        return {}
    manifest = version_manifests(lin.repo, version, "file")[""]
    store = ChunkStore(lin.repo)
    try:
        return model_view(store, manifest).metadata
    finally:
        store.close()
