"""Three-way merge of model versions, tensor by tensor (the merge driver, `git mgit resolve`).

merge_manifests() takes the base, ours and theirs manifests and returns the
merged manifest, the conflicts left (their tensors kept as ours meanwhile,
so the working file is always a loadable model), the conflicts strategies
settled, and the possible conflict between dependent changes. It never asks
anything: what it cannot decide is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from git_mgit.config import Settings
from git_mgit.merge import result, threeway, views
from git_mgit.merge.strategy import Rules, Strategy
from git_mgit.merge.threeway import Conflict
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore

WHOLE_FILE = "<whole file>"


@dataclass
class Outcome:
    manifest: mf.Manifest
    conflicts: list[Conflict] = field(default_factory=list)
    settled: list[tuple[str, Strategy]] = field(default_factory=list)
    dependent: tuple[list[str], list[str]] | None = None
    same_as: str | None = None  # "ours" | "theirs": one side already is the result


def _whole_file(
    base: mf.Manifest | None, ours: mf.Manifest, theirs: mf.Manifest, rules: Rules
) -> Outcome:
    """Files that are not tensor-wise mergeable (opaque, or safetensors on one side only)."""
    s = rules.for_name(WHOLE_FILE)
    if s is not None and not s.arithmetic:
        kept = s.keep(base, ours, theirs)
        if kept is not None:
            return Outcome(kept, settled=[(WHOLE_FILE, s)])
    why = "the file is not safetensors on every side: keep one version (ours, theirs or base)"
    return Outcome(ours, [Conflict(WHOLE_FILE, "changed", "changed", why)])


def merge_manifests(
    base: mf.Manifest | None,
    ours: mf.Manifest,
    theirs: mf.Manifest,
    store: ChunkStore,
    settings: Settings,
    rules: Rules | None = None,
    independent: tuple[str, ...] = (),
    path: str = "",
) -> Outcome:
    rules = rules or Rules()
    side = threeway.choose(base, ours, theirs)
    if side is not None:
        return Outcome(ours if side == "ours" else theirs, same_as=side)
    if (
        ours.kind != "safetensors"
        or theirs.kind != "safetensors"
        or (base is not None and base.kind != "safetensors")
    ):
        return _whole_file(base, ours, theirs, rules)
    b, o, t = (views.load(store, m) for m in (base, ours, theirs))
    p = threeway.plan(b, o, t, rules, independent)
    merged = result.build(p, o, t, store, settings, path)
    return Outcome(merged, p.conflicts, p.settled, p.dependent)
