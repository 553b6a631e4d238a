"""Three-way merge of manifests, tensor by tensor (git's merge.mgit.driver).

A tensor changed on one side only, or identically on both, is taken
automatically; changed differently on both sides is a conflict, reported by
name, and the driver exits non-zero leaving our version in place so git marks
the file conflicted. Never interactive. Files whose tensor layout (the
safetensors header) changed on both sides cannot be merged tensor-wise.
"""

from __future__ import annotations

from dataclasses import dataclass

from git_mgit import manifest as mf


@dataclass
class MergeResult:
    merged: mf.Manifest | None
    conflicts: list[str]


def _pick(
    base: tuple[bytes, ...], ours: tuple[bytes, ...], theirs: tuple[bytes, ...]
) -> tuple[bytes, ...] | None:
    """Classic three-way choice; None means conflict."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    return None


def _layout(m: mf.Manifest) -> list[tuple]:
    return [(s.kind, s.name, s.dtype, s.shape, s.offset, s.length) for s in m.segments]


def merge(base: mf.Manifest, ours: mf.Manifest, theirs: mf.Manifest) -> MergeResult:
    """Merge segment by segment; conflicting ones keep our chunks and are named."""
    if not (
        _layout(base) == _layout(ours) == _layout(theirs)
        and ours.kind == theirs.kind == "safetensors"
    ):
        return MergeResult(None, ["<the tensor layout changed on both sides>"])
    segments, conflicts = [], []
    for b, o, t in zip(base.segments, ours.segments, theirs.segments, strict=True):
        chosen = _pick(b.hashes, o.hashes, t.hashes)
        if chosen is None:
            conflicts.append(o.name if o.kind == "tensor" else "<safetensors header metadata>")
            chosen = o.hashes
        segments.append(mf.Segment(o.kind, o.offset, o.length, chosen, o.name, o.dtype, o.shape))
    return MergeResult(mf.Manifest(ours.kind, ours.size, ours.chunk_size, segments), conflicts)
