"""List tracked model files: manifest id, a mark, path.

The mark is `*` when every object is here, `-` when some are on a remote only
(a checkout fetches them), `!` when some are missing and no remote publishes them.
"""

from __future__ import annotations

import argparse

from git_mgit.console.progress import format_size
from git_mgit.gitcmd import find_repo
from git_mgit.modelfile.tracked import tracked_files
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer import availability


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rev", nargs="?", help="list a revision's files instead of the index")
    parser.add_argument(
        "-l", "--long", action="store_true", help="show full ids, sizes and tensor counts"
    )


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    store = ChunkStore(repo)
    try:
        found = availability.known(repo)
        for f in tracked_files(repo, store.reader, args.rev):
            m = f.manifest
            if m is None:
                print(f"{f.blob[:10]} ? {f.path} (plain blob: committed before tracking)")
                continue
            mark = "*"
            if store.missing([c.content_hash for c in m.chunks()]):
                mark = "-" if found.holder(f.blob) else "!"
            if args.long:
                tensors = sum(1 for s in m.segments if s.kind == "tensor")
                print(f"{f.blob} {mark} {f.path}  {m.kind} {format_size(m.size)} {tensors} tensors")
            else:
                print(f"{f.blob[:10]} {mark} {f.path}")
    finally:
        store.close()
    return 0
