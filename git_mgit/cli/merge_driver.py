"""Three-way tensor-level merge of manifests; git runs it as merge.mgit.driver."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from git_mgit import manifest as mf


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name in ("base", "ours", "theirs"):
        parser.add_argument(name, help=f"file holding the {name} version (%%O %%A %%B)")
    parser.add_argument("marker_size", nargs="?", help="conflict marker size (%%L, unused)")
    parser.add_argument("path", nargs="?", default="", help="path in the repository (%%P)")


def run(args: argparse.Namespace) -> int:
    from git_mgit.filters.merge_driver import merge

    texts = [Path(p).read_bytes() for p in (args.base, args.ours, args.theirs)]
    path = args.path or args.ours
    if not all(mf.looks_like_manifest(t) for t in texts):
        print(
            f"git-mgit: {path}: cannot merge: not every side is a git-mgit manifest; "
            f"pick one with `git checkout --ours/--theirs -- {path}`",
            file=sys.stderr,
        )
        return 1
    result = merge(*(mf.parse(t) for t in texts))
    if result.merged is not None:
        Path(args.ours).write_bytes(result.merged.render())
    if result.conflicts:
        print(
            f"git-mgit: {path}: {len(result.conflicts)} tensor(s) changed differently on both sides:",
            file=sys.stderr,
        )
        for name in result.conflicts:
            print(f"    {name}", file=sys.stderr)
        print(
            f"  keep one side with `git checkout --ours -- {path}` or `git checkout --theirs -- {path}`, "
            f"then `git add {path}`",
            file=sys.stderr,
        )
        return 1
    return 0
