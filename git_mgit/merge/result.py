"""Write the merged version: a safetensors file assembled from the plan, as a manifest.

It goes through clean's ManifestBuilder, so the manifest is exactly what
`git add` of the merged file would produce (`git status` stays clean after
the merge): tensors kept whole from one side add their chunk hashes and read
nothing; computed tensors stream through hashing and encoding like any file,
as deltas against ours. The header is ours' or theirs' byte for byte when
the merged layout and metadata equal that side's, else written anew (compact
JSON, metadata first, tensors in file order, padded to 8 bytes, as the
safetensors writers do).
"""

from __future__ import annotations

import json
import struct

from git_mgit.config import Settings
from git_mgit.console.progress import Progress
from git_mgit.errors import ObjectCorrupt
from git_mgit.merge.threeway import Pick, Plan
from git_mgit.merge.views import Computed, ModelView, TensorBytes
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.clean import ManifestBuilder, Reader
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.safetensors_format import TensorInfo, parse_header


def header_bytes(plan: Plan) -> bytes:
    doc: dict[str, object] = {}
    if plan.metadata:
        doc["__metadata__"] = plan.metadata
    offset = 0
    for p in plan.tensors:
        n = p.state.segment.length
        doc[p.name] = {
            "dtype": p.state.dtype,
            "shape": list(p.state.shape),
            "data_offsets": [offset, offset + n],
        }
        offset += n
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _reuse_header(plan: Plan, sides: list[ModelView], chunk_size: int) -> mf.Segment | None:
    layout = [(p.name, p.state.dtype, p.state.shape) for p in plan.tensors]
    for side in sides:
        if (
            side.header is not None
            and side.manifest is not None
            and side.manifest.chunk_size == chunk_size
            and side.layout == layout
            and side.metadata == plan.metadata
        ):
            return side.header
    return None


def _reader(store: ChunkStore, p: Pick) -> Reader:
    if p.source != "computed":
        return TensorBytes(store, p.state.segment)
    assert p.strategy is not None and p.operands is not None
    b, o, t = p.operands
    return Computed(
        p.strategy,
        p.state.dtype,
        None if b is None or not p.strategy.needs_base else TensorBytes(store, b.segment),
        TensorBytes(store, o.segment),
        TensorBytes(store, t.segment),
    )


def build(
    plan: Plan, ours: ModelView, theirs: ModelView, store: ChunkStore, settings: Settings, path: str
) -> mf.Manifest:
    total = sum(p.state.segment.length for p in plan.tensors if p.source == "computed")
    progress = Progress(f"git-mgit: merging {path}", total or None)
    builder = ManifestBuilder(store, settings, ours.manifest, progress)
    try:
        reused = _reuse_header(plan, [ours, theirs], settings.chunk_size)
        if reused is not None:
            builder.add_known(reused)
        else:
            head = header_bytes(plan)
            parse_header(head)  # the same parser clean runs: never write what it would reject
            builder.add_bytes("header", head)
        for p in plan.tensors:
            seg = p.state.segment
            if p.source != "computed" and p.state.chunk_size == settings.chunk_size:
                builder.add_known(seg)
                continue
            begin = builder.end
            info = TensorInfo(p.name, p.state.dtype, p.state.shape, begin, begin + seg.length)
            if not builder.add_tensor(info, _reader(store, p)):
                raise ObjectCorrupt(
                    f"{path}: tensor {p.name!r} is shorter in storage than its manifest says; "
                    "run `git mgit fsck`"
                )
        return builder.finish("safetensors")
    finally:
        progress.finish()
