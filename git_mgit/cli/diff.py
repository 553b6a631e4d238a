"""Tensor-level differences between two model versions (also across paths).

git mgit diff HEAD~1:model.safetensors model.safetensors
git mgit diff base finetuned --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from git_mgit.errors import MgitError
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import ModelDiff, TensorChange, diff_manifests
from git_mgit.progress import Progress
from git_mgit.store.chunkstore import ChunkStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", help="a model version: REV:PATH, a name, a path or an id")
    parser.add_argument("new")
    parser.add_argument("--all", action="store_true", help="list unchanged tensors too")
    parser.add_argument("--stat", action="store_true", help="structure only: read no tensor data")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _shape(shape: tuple[int, ...] | None) -> str:
    return "-" if shape is None else "[" + ",".join(map(str, shape)) + "]"


def _num(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:.1%}" if pct else f"{x:.3g}"


def _name(c: TensorChange) -> str:
    if c.old_name and c.new_name and c.old_name != c.new_name:
        return f"{c.old_name} -> {c.new_name}"
    return c.new_name or c.old_name or ""


def _type(c: TensorChange) -> str:
    old = f"{c.old_dtype} {_shape(c.old_shape)}"
    new = f"{c.new_dtype} {_shape(c.new_shape)}"
    if c.old_dtype is None:
        return new
    return old if c.new_dtype is None or old == new else f"{old} -> {new}"


def render(d: ModelDiff, show_all: bool) -> str:
    rows = [c for c in d.changes if show_all or c.status != "unchanged"]
    header = ("tensor", "status", "dtype shape", "changed", "max |diff|", "rel L2")
    cells = [
        (
            _name(c),
            c.status,
            _type(c),
            _num(c.changed_fraction, pct=True),
            _num(c.max_abs),
            _num(c.rel_l2),
        )
        for c in rows
    ]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    lines = []
    for r in [header, *cells] if cells else []:
        lines.append(
            "  ".join(
                v.ljust(w) if i < 3 else v.rjust(w)
                for i, (v, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    counts = d.counts()
    order = ("changed", "added", "removed", "renamed", "matched", "unchanged")
    lines.append(", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "no tensors")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    lin = Lineage()
    old, new = lin.resolve(args.old), lin.resolve(args.new)
    store = ChunkStore(lin.repo)
    try:
        a = contents.manifests(lin.repo, store.reader, old.id, old.kind)
        b = contents.manifests(lin.repo, store.reader, new.id, new.kind)
        if not args.stat:
            hashes = [c.content_hash for m in (*a.values(), *b.values()) for c in m.chunks()]
            if missing := store.missing(hashes):
                raise MgitError(
                    f"{len(missing)} tensor object(s) of {args.old} / {args.new} are not in this "
                    "repository; run `git mgit fetch` (or use --stat, which reads none)"
                )
        total = sum(m.size for m in b.values())
        progress = Progress(f"git-mgit: comparing {args.old} and {args.new}", 2 * total)
        try:
            d = diff_manifests(store, a, b, values=not args.stat, tick=progress.update)
        finally:
            progress.finish()
    finally:
        store.close()
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in d.changes], indent=2))
    else:
        print(render(d, args.all))
    return 0
