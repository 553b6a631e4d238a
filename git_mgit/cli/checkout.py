"""`git mgit checkout [REV] [-- PATH...]`: write model files straight from the object store.

Without arguments, finishes every direct checkout that did not finish (a
killed git, a full disk, a missing object). With PATHs, rewrites them from
the index; with REV too, from REV, staging REV's version. Model files of
any size go the direct way: streamed from the object store into the file,
with bounded memory, and recorded in the index so `git status` is clean.
"""

from __future__ import annotations

import argparse
import sys

from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.worktree.repair import checkout


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = "git mgit checkout [REV] [-- PATH...]"
    parser.add_argument(
        "words",
        nargs=argparse.REMAINDER,
        metavar="[REV] [-- PATH...]",
        help="the commit to take files from (default: the index), then the paths after --",
    )


def run(args: argparse.Namespace) -> int:
    words = list(args.words)
    if "--" in words:
        cut = words.index("--")
        before, paths = words[:cut], words[cut + 1 :]
    else:
        before, paths = words, []
    if len(before) > 1:
        raise MgitError(f"usage: git mgit checkout [REV] [-- PATH...] (got {' '.join(words)})")
    rev = before[0] if before else None
    repo = find_repo()
    store = ChunkStore(repo)
    try:
        out = checkout(
            repo, store, rev, paths, lambda line: print(f"git-mgit: {line}", file=sys.stderr)
        )
    finally:
        store.close()
    if not out.written and not out.failed:
        print("nothing to finish: every direct checkout completed")
    for path in out.written:
        print(f"wrote {path}")
    return 1 if out.failed else 0
