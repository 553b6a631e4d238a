"""Print a manifest as a readable tensor listing (git's diff.mgit.textconv)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from git_mgit import config, hashing
from git_mgit import manifest as mf
from git_mgit.clean import clean
from git_mgit.gitcmd import find_repo
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


class _HashOnly:
    """A store that claims to hold everything: clean then only hashes, never writes."""

    def has(self, content_hash: bytes) -> bool:
        return True

    def flush(self) -> None:
        pass


def run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    with path.open("rb") as f:
        head = f.read(len(mf.FIRST_LINE))
        f.seek(0)
        if mf.looks_like_manifest(head):
            m = mf.parse(f.read())
        else:
            # git hands textconv the working-tree file itself: describe it the
            # same way, hashing its chunks, so unchanged tensors diff as equal.
            settings = config.load(find_repo())
            m = mf.parse(clean(f, "", _HashOnly(), settings, warn=lambda _msg: None))
    sys.stdout.write(listing(m))
    return 0
