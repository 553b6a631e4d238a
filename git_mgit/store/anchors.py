"""Anchor refs: what keeps tensor objects reachable, so `git gc` never prunes them.

Each batch of new objects gets one commit whose tree files every object as
`ab/cd/<64 hex content hash>`, under its own ref refs/mgit/objects/<commit id>.
Ref names are unique, so two clones pushing at the same time never conflict,
and a push of refs/mgit/objects/* carries every object to any git remote.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence

from git_mgit.gitcmd import Repo
from git_mgit.store.gitobjects import commit_body, tree_body
from git_mgit.store.lookup import ANCHOR_PREFIX
from git_mgit.store.packwriter import PackWriter

IDENT = "git-mgit <git-mgit@localhost>"
TREE, BLOB = "40000", "100644"


def write_anchor(
    pack: PackWriter,
    objects: Sequence[tuple[bytes, bytes]],
    parents: Sequence[str] = (),
    timestamp: int | None = None,
    message: str | None = None,
    suffix: str = "",
) -> str:
    """Add the fan-out trees and the anchor commit for (content hash, oid20) pairs to `pack`.

    Returns the commit id (hex). The caller finishes the pack, then calls set_ref().
    The commit time is the objects' age for gc; a fixed `timestamp` makes the
    anchor a pure function of its objects and message (version refs). A `suffix`
    on the file names files something other than the objects themselves (pointer refs
    were filed so before 2026-11-29; the tests write that layout).
    """
    level2: dict[str, dict[str, list[tuple[str, bytes, bytes]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for content_hash, oid in objects:
        h = content_hash.hex()
        level2[h[:2]][h[2:4]].append((BLOB, (h + suffix).encode(), oid))
    top = []
    for a, subdirs in level2.items():
        mid = [
            (TREE, b.encode(), pack.add("tree", [tree_body(ents)])) for b, ents in subdirs.items()
        ]
        top.append((TREE, a.encode(), pack.add("tree", [tree_body(mid)])))
    msg = message or f"git-mgit objects\n\n{len(objects)} tensor objects\n"
    when = int(time.time()) if timestamp is None else timestamp
    return _commit(pack, tree_body(top), parents, msg, when)


def anchor_size(content_hashes: Iterable[bytes]) -> int:
    """How many objects write_anchor() adds for these chunks: its fan-out trees (one per
    first byte, one per first two bytes), the root tree and the commit."""
    hexes = {h.hex() for h in content_hashes}
    return len({h[:2] for h in hexes}) + len({h[:4] for h in hexes}) + 2


def commit_objects(
    repo: Repo,
    objects: Sequence[tuple[bytes, bytes]],
    parents: Sequence[str] = (),
    timestamp: int | None = None,
    message: str | None = None,
) -> str:
    """write_anchor() into a pack of its own, finished: the commit id (no ref is set)."""
    with PackWriter(repo.objects_dir) as pack:
        commit = write_anchor(pack, objects, parents, timestamp, message)
        pack.finish()
    return commit


def commit_blobs(repo: Repo, blobs: Sequence[bytes], message: str) -> str:
    """A commit (time 0) whose flat tree files `blobs` as 0, 1, 2, ...: no ref is set."""
    with PackWriter(repo.objects_dir) as pack:
        entries = [(BLOB, str(i).encode(), pack.add("blob", [b])) for i, b in enumerate(blobs)]
        commit = write_flat(pack, entries, message)
        pack.finish()
    return commit


def write_flat(pack: PackWriter, entries: Sequence[tuple[str, bytes, bytes]], message: str) -> str:
    """Add a commit (time 0, no parent) whose one tree files `entries` (mode, name, oid20)
    to `pack`: a pure function of them and `message`. Returns its id (hex)."""
    return _commit(pack, tree_body(entries), (), message, 0)


def _commit(
    pack: PackWriter, tree: bytes, parents: Sequence[str], message: str, timestamp: int
) -> str:
    """Add the root `tree` (its body) and a commit of it by IDENT to `pack`: the commit id."""
    root = pack.add("tree", [tree])
    return pack.add(
        "commit", [commit_body(root.hex(), list(parents), message, IDENT, timestamp)]
    ).hex()


def set_ref(repo: Repo, commit: str) -> str:
    """Point refs/mgit/objects/<commit> at the commit (names are content, so this is idempotent)."""
    ref = ANCHOR_PREFIX + commit
    repo.git("update-ref", ref, commit)
    return ref
