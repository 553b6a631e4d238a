"""Print a manifest as a readable tensor listing (git's diff.mgit.textconv)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from git_mgit import hashing
from git_mgit import manifest as mf
from git_mgit.progress import format_size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="file holding the stored (clean) content")


def listing(m: mf.Manifest) -> str:
    lines = [f"# git-mgit {m.kind} model, {format_size(m.size)}"]
    for s in m.segments:
        short = " ".join(hashing.to_text(h)[:15] for h in s.hashes) or "(empty)"
        if s.kind == "tensor":
            shape = "x".join(map(str, s.shape or ())) or "scalar"
            lines.append(f"{s.name}  {s.dtype}[{shape}]  {short}")
        else:
            lines.append(f"<{s.kind} {format_size(s.length)}>  {short}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    data = Path(args.file).read_bytes()
    out = listing(mf.parse(data)) if mf.looks_like_manifest(data) else data
    sys.stdout.buffer.write(out.encode() if isinstance(out, str) else out)
    return 0
