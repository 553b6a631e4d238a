"""Verify that every object any manifest reaches is present and decodes to its hash."""

from __future__ import annotations

import argparse
import sys

from git_mgit import codecs, hashing
from git_mgit import manifest as mf
from git_mgit.errors import ObjectCorrupt, ObjectMissing
from git_mgit.gitcmd import find_repo
from git_mgit.progress import Progress
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tracked import reachable_manifests


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", "-q", action="store_true", help="print problems only")


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    store = ChunkStore(repo)
    problems: list[str] = []
    try:
        store.cache.refresh()
        users: dict[bytes, str] = {}
        manifests = 0
        for oid, path, m in reachable_manifests(repo, store.reader):
            if isinstance(m, mf.ManifestError):
                problems.append(f"{path}: manifest {oid[:12]} is damaged: {m}")
                continue
            manifests += 1
            for chunk in m.chunks():
                users.setdefault(chunk.content_hash, path)
        anchored = store.cache.all()
        todo = list(dict.fromkeys([*users, *anchored]))
        progress = Progress(
            "git-mgit: verifying objects",
            sum(size for h in todo for _, size in anchored.get(h, ())),
        )
        for h in todo:
            where = users.get(h, "unreferenced object")
            if h not in anchored:
                problems.append(
                    f"{where}: object {hashing.to_text(h)} is missing; run `git mgit fetch` "
                    "or push it from a clone that has it"
                )
                continue
            for oid, size in anchored[h]:  # every object that holds the chunk
                try:
                    codecs.decode_all(store.decoder(h, oid=oid))
                except (ObjectCorrupt, ObjectMissing) as exc:
                    problems.append(
                        f"{where}: object {hashing.to_text(h)} ({oid[:12]}) is bad: {exc}"
                    )
                progress.update(size)
        progress.finish()
    finally:
        store.close()
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if not args.quiet:
        print(f"checked {manifests} manifests and {len(todo)} objects: {len(problems)} problems")
    return 1 if problems else 0
