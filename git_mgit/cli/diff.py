"""Tensor-level differences between two model versions (also across paths).

git mgit diff HEAD~1:model.safetensors model.safetensors
git mgit diff base finetuned --json

A and B are anything `git mgit lineage` accepts: REV:PATH, a version or
model name, a path, an id. --json writes strict JSON: an infinite number
(rel_l2 of a tensor that was all zeros) is the string "inf".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

from git_mgit.console.progress import Progress
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.diff import ModelDiff, TensorChange, diff_manifests
from git_mgit.lineage.resolve import Version
from git_mgit.store.chunkstore import ChunkStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", metavar="A", help="REV:PATH, a name, a path or an id")
    parser.add_argument("new", metavar="B", help="the version to compare with A")
    parser.add_argument("--all", action="store_true", help="list unchanged tensors too")
    parser.add_argument("--stat", action="store_true", help="structure only: read no tensor data")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _shape(shape: tuple[int, ...] | None) -> str:
    return "-" if shape is None else "[" + ",".join(map(str, shape)) + "]"


def _num(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:.3g}%" if pct else f"{x:.3g}"


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
    """A table of the tensors that differ (all with show_all), then the summary line."""
    header = ("tensor", "status", "dtype shape", "changed", "max |diff|", "rel L2")
    rows = [
        (
            _name(c),
            c.status,
            _type(c),
            _num(c.changed_fraction, pct=True),
            _num(c.max_abs),
            _num(c.rel_l2),
        )
        for c in d.changes
        if show_all or c.status != "unchanged"
    ]
    lines = []
    if rows:
        widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
        for r in (header, *rows):
            cells = [v.ljust(w) for v, w in zip(r[:3], widths, strict=False)]
            cells += [v.rjust(w) for v, w in zip(r[3:], widths[3:], strict=True)]
            lines.append("  ".join(cells).rstrip())
    lines.append(d.summary())
    return "\n".join(lines)


def _finite(x: object) -> object:
    return str(x) if isinstance(x, float) and not math.isfinite(x) else x


def as_json(old: Version, new: Version, d: ModelDiff) -> dict:
    return {
        "old": dataclasses.asdict(old),
        "new": dataclasses.asdict(new),
        "summary": d.counts(),
        "changes": [{k: _finite(v) for k, v in dataclasses.asdict(c).items()} for c in d.changes],
    }


def run(args: argparse.Namespace) -> int:
    lin = Lineage()
    old, new = lin.resolve(args.old), lin.resolve(args.new)
    store = ChunkStore(lin.repo)
    try:
        a = contents.manifests(lin.repo, store.reader, old.id, old.kind)
        b = contents.manifests(lin.repo, store.reader, new.id, new.kind)
        if not args.stat:
            from git_mgit.transfer.fetch import ensure_local

            wanted = [(f"{args.old}:{rel}".rstrip(":"), m) for rel, m in a.items()]
            wanted += [(f"{args.new}:{rel}".rstrip(":"), m) for rel, m in b.items()]
            ensure_local(store, wanted)
        progress = Progress(f"git-mgit: comparing {args.old} and {args.new}")
        try:
            d = diff_manifests(store, a, b, values=not args.stat, progress=progress)
        finally:
            progress.finish()
    finally:
        store.close()
    if args.json:
        print(json.dumps(as_json(old, new, d), indent=2, allow_nan=False))
    else:
        print(render(d, args.all))
    return 0
