"""Describe a model file as text, a line per tensor (git's diff.mgit.textconv).

git runs it on both sides of a diff, so `git diff`, `git log -p` and
`git show` print the tensors that changed as -/+ pairs of lines, with
dtype, shape, summary statistics and a short content id, and
`git diff --stat` counts changed tensors. Stored versions are read from
their objects; the working-tree side (git hands over the file itself) is
hashed the way `git add` would and read directly. `git mgit install` sets
diff.mgit.cachetextconv, so each version is described once.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from git_mgit import config, hashing
from git_mgit.console.progress import format_size
from git_mgit.errors import NotSafetensors
from git_mgit.gitcmd import find_repo
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.clean import clean
from git_mgit.tensors.safetensors_format import header_length, parse_header
from git_mgit.tensors.stats import collect, file_pieces


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the stored (clean) content, or the working-tree file")


class _HashOnly:
    """A store that claims to hold everything: clean then only hashes, never writes."""

    def has(self, content_hash: bytes) -> bool:
        return True

    def flush(self) -> None:
        pass


def _content_id(seg: mf.Segment) -> str:
    return hashing.to_text(hashing.digest(b"".join(seg.hashes)))[:15]


def _from_objects(seg: mf.Segment, store) -> Iterator[bytes | memoryview]:
    for h in seg.hashes:
        yield store.get_raw(h)


def listing(m: mf.Manifest, metadata: dict | None, figures) -> str:
    """The text: a heading, metadata, then one line per tensor (or opaque segment)."""
    tensors = [s for s in m.segments if s.kind == "tensor"]
    lines = [f"# git-mgit {m.kind} model, {format_size(m.size)}, {len(tensors)} tensors"]
    if metadata:
        lines.append("# metadata " + json.dumps(metadata, sort_keys=True, ensure_ascii=False))
    for s in m.segments:
        if s.kind == "tensor":
            shape = "x".join(map(str, s.shape or ())) or "scalar"
            lines.append(f"{s.name}  {s.dtype}[{shape}]  {figures(s)}  {_content_id(s)}")
        elif s.kind == "bytes":
            lines.append(f"<{format_size(s.length)} opaque>  {_content_id(s)}")
    return "\n".join(lines) + "\n"


def _metadata(head: bytes) -> dict | None:
    try:
        return parse_header(head).metadata
    except NotSafetensors:
        return None


def run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    with path.open("rb") as f:
        head = f.read(len(mf.FIRST_LINE))
        f.seek(0)
        if mf.looks_like_manifest(head):
            m = mf.parse(f.read())
            sys.stdout.write(_describe_stored(m))
            return 0
        # git hands textconv the working-tree file itself: describe it the same
        # way, hashing its chunks, so unchanged tensors diff as equal.
        settings = config.load(find_repo())
        m = mf.parse(clean(f, "", _HashOnly(), settings, warn=lambda _msg: None))
        f.seek(0)
        prefix = f.read(8)
        meta = None
        if m.kind == "safetensors":
            meta = _metadata(prefix + f.read(header_length(prefix)))
        sys.stdout.write(
            listing(
                m,
                meta,
                lambda s: collect(s.dtype, file_pieces(f, s.offset, s.length, s.dtype)).describe(),
            )
        )
    return 0


def _describe_stored(m: mf.Manifest) -> str:
    from git_mgit.store.chunkstore import ChunkStore

    store = ChunkStore(find_repo())
    try:
        # git caches what this prints per version: never describe what is not here.
        from git_mgit.transfer.fetch import ensure_local

        ensure_local(store, [("a model version in this diff", m)])
        meta = None
        if m.kind == "safetensors":
            header = next(s for s in m.segments if s.kind == "header")
            meta = _metadata(b"".join(bytes(store.get_raw(h)) for h in header.hashes))
        return listing(m, meta, lambda s: collect(s.dtype, _from_objects(s, store)).describe())
    finally:
        store.close()
