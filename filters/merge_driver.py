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


def _pick(base, ours, theirs):
    """Classic three-way choice; None means conflict."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    return None


def merge(base: mf.Manifest, ours: mf.Manifest, theirs: mf.Manifest) -> MergeResult:
    layout = [
        [(s.kind, s.name, s.dtype, s.shape, s.offset, s.length) for s in m.segments]
        for m in (base, ours, theirs)
    ]
    header = _pick(
        *(
            m.segments[0].hashes if m.segments and m.segments[0].kind == "header" else ()
            for m in (base, ours, theirs)
        )
    )
    if (
        not (layout[0] == layout[1] == layout[2] and ours.kind == theirs.kind == "safetensors")
        or header is None
    ):
        return MergeResult(None, ["<tensor layout or metadata changed on both sides>"])
    segments, conflicts = [], []
    for b, o, t in zip(base.segments, ours.segments, theirs.segments, strict=True):
        chosen = _pick(b.hashes, o.hashes, t.hashes)
        if chosen is None:
            conflicts.append(o.name or o.kind)
            chosen = o.hashes
        segments.append(mf.Segment(o.kind, o.offset, o.length, chosen, o.name, o.dtype, o.shape))
    segments[0] = mf.Segment("header", 0, ours.segments[0].length, header)
    return MergeResult(mf.Manifest(ours.kind, ours.size, ours.chunk_size, segments), conflicts)
