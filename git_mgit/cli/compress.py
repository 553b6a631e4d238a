"""Lossy delta compression of a model against its lineage parent, gated by the model's tests.

git mgit compress --lossy models/ft.safetensors              # eps 1e-4, max drop 1%
git mgit compress --lossy ft --eps 1e-3 --max-drop 0.005 --dry-run
git mgit compress --lossy ft --parent HEAD~3:models/base.safetensors --json

MGit's Algorithm 3: each tensor's difference from the parent's stored tensor
is quantized in steps of 2 ln(1 + eps) and stored as a `qdelta` object where
that is smaller than the lossless delta; the registered tests run on the
original and the reconstruction, and the compression is kept only if no
metric drops by more than --max-drop (relative). Then the working file is
rewritten to the reconstruction: `git add` and commit it. Exit status: 0
kept (or would be, with --dry-run), 1 rejected, 2 error.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from git_mgit.console.progress import format_size
from git_mgit.errors import MgitError

if TYPE_CHECKING:
    from git_mgit.runtime.compressing import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from git_mgit.runtime.compressing import DEFAULT_EPS, DEFAULT_MAX_DROP

    parser.add_argument(
        "model", metavar="MODEL", help="a tracked model file, or its mgit.toml name"
    )
    parser.add_argument(
        "--lossy", action="store_true", help="quantize deltas (required: this is the only mode)"
    )
    parser.add_argument(
        "--eps",
        type=float,
        default=DEFAULT_EPS,
        help=f"error bound: quantization step 2 ln(1 + eps) (default {DEFAULT_EPS:g})",
    )
    parser.add_argument(
        "--max-drop",
        type=float,
        default=DEFAULT_MAX_DROP,
        help=f"largest relative drop of any test metric to accept (default {DEFAULT_MAX_DROP:g})",
    )
    parser.add_argument(
        "--parent", metavar="REV_OR_VERSION", help="compress against this version instead"
    )
    parser.add_argument("--dry-run", action="store_true", help="measure and test; change nothing")
    parser.add_argument(
        "--no-tests", action="store_true", help="keep the compression without running tests"
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite a model file with uncommitted changes"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    if not args.lossy:
        raise MgitError(
            "git mgit compress needs --lossy (lossless delta compression happens on every "
            "`git add`)"
        )
    from git_mgit.runtime.compressing import compress

    out = compress(
        args.model,
        eps=args.eps,
        max_drop=args.max_drop,
        parent=args.parent,
        dry_run=args.dry_run,
        gated=not args.no_tests,
        force=args.force,
    )
    if args.json:
        print(json.dumps(_report(out), indent=2, sort_keys=True))
    else:
        _print(out, args.dry_run)
    return 0 if out.accepted else 1


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def _report(out: Outcome) -> dict:
    p = out.plan
    return {
        "path": p.path,
        "parent": p.parent.id,
        "parent_path": p.parent.path,
        "eps": p.eps,
        "step": p.step,
        "tensors": len(p.header.tensors),
        "paired": p.paired,
        "compressed": p.tensors,
        "kept_lossless": dict(p.kept),
        "raw": p.raw,
        "stored_before": p.stored_before,
        "stored_after": p.stored_after,
        "ratio": _ratio(p.stored_before, p.stored_after),
        "ratio_vs_raw": _ratio(p.raw, p.stored_after),
        "metrics_before": out.before,
        "metrics_after": out.after,
        "drops": out.drops,
        "max_drop": out.max_drop,
        "accepted": out.accepted,
        "rejected": out.rejected,
        "version": out.version,
    }


def _print(out: Outcome, dry_run: bool) -> None:
    from git_mgit.runtime.compressing import original_hint

    p = out.plan
    parent = f"{p.parent.path or '?'}@{p.parent.id[:10]}"
    print(
        f"{p.path}: {p.tensors} of {len(p.header.tensors)} tensors quantized against "
        f"{parent}, eps {p.eps:g} (step {p.step:.3g})"
    )
    ratio, vs_raw = _ratio(p.stored_before, p.stored_after), _ratio(p.raw, p.stored_after)
    gain = (
        f": {ratio:.2f}x smaller ({vs_raw:.2f}x vs raw {format_size(p.raw)})"
        if ratio and vs_raw
        else ": every quantized tensor rounds to its parent's, nothing new to store"
    )
    print(
        f"  stored  {format_size(p.stored_before)} lossless -> "
        f"{format_size(p.stored_after)} lossy{gain}"
    )
    for reason, n in sorted(p.kept.items()):
        print(f"  kept lossless: {n} chunk(s): {reason}")
    for key, drop in sorted(out.drops.items()):
        test, _, metric = key.partition(".")
        before, after = float(out.before[test][metric]), float(out.after[test][metric])
        print(f"  {key}  {before:.6g} -> {after:.6g}  (drop {drop:+.3%}, limit {out.max_drop:.2%})")
    if not out.accepted:
        print(f"rejected: {out.rejected}; {p.path} is unchanged")
    elif dry_run:
        print(f"accepted (dry run): {p.path} is unchanged")
    else:
        print(
            f"accepted: {p.path} now holds the reconstruction (version {out.version[:10]}); "
            f"`git add` and commit it; {original_hint(out)}"
        )
