"""Versions as chains of versions: how this clone stores one, and what fetching it costs.

A version is stored *whole* (every chunk held by an object that stands alone)
or *as deltas of the version before it* (every chunk that one lacks held as a
delta of its chunk of the same tensor, or whole). A push publishes a version
in the form it is stored in where the chain fits (transfer/layout.py), so its
*fetch cost*, what checking it out fetches into an empty clone, is its own
objects plus its base's fetch cost, and its *levels* the versions below it.
`git add` keeps every chain within mgit.fetchBudget times the version's size
and mgit.maxChainDepth versions as it stores it (modelfile/clean.py): a version whose
chain would not fit is stored whole, so the push has nothing to encode.

A whole version's cost is read off the objects here. A delta version's is
remembered when it is stored, in `.git/mgit/chains` (one line per version:
its id, fetch cost, levels and own bytes): the objects name the chunks their
deltas lean on, not the version. A version missing there (stored by an older
git-mgit, or the file removed) has no known cost: the next version after it
is stored whole, which starts a new chain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import object_id

FILE = "chains"

# A chunk's place in a version: (tensor name or segment kind, chunk index, dtype, length).
Key = tuple[str, int, str, int]


@dataclass(frozen=True)
class Chain:
    cost: float  # bytes a checkout fetches into an empty clone
    levels: int  # versions below it
    own: float  # bytes of its own objects (all of them, for a whole version)


def keyed(m: mf.Manifest) -> dict[Key, mf.Chunk]:
    return {
        (c.segment.name or c.segment.kind, c.index, c.segment.dtype or "", c.length): c
        for c in m.chunks()
    }


def hashes(m: mf.Manifest) -> set[bytes]:
    return {c.content_hash for c in m.chunks()}


def version_id(m: mf.Manifest) -> str:
    """The git blob id of the manifest: the name version refs give the version."""
    return object_id("blob", [m.render()]).hex()


def own_objects(
    store: ChunkStore, m: mf.Manifest, base: mf.Manifest | None
) -> tuple[float, int] | None:
    """(bytes, deltas among them) of the objects here that file `m`'s chunks `base` lacks,
    each a delta of `base`'s chunk of the same tensor where there is one, else whole (the
    first such object: publish's `_Objects.stored` takes the same); None when a chunk has
    neither. With no `base`: every chunk, whole."""
    theirs = keyed(base) if base is not None else {}
    shared = hashes(base) if base is not None else set()
    total, deltas, seen = 0.0, 0, set()
    for key, c in keyed(m).items():
        h = c.content_hash
        if h in shared or h in seen:
            continue
        seen.add(h)
        other = theirs.get(key)
        holders = store.holders(h)
        lean = [n for _, n, b in holders if other is not None and b == other.content_hash]
        standalone = [n for _, n, b in holders if b is None]
        if lean:
            total, deltas = total + lean[0], deltas + 1
        elif standalone:
            total += standalone[0]
        else:
            return None
    return total, deltas


class Chains:
    """The chains of one clone's versions: read off its objects, else remembered."""

    def __init__(self, repo: Repo) -> None:
        self.path = repo.mgit_dir / FILE
        self._known: dict[str, Chain] = {}
        self._read_to = 0

    def of(self, store: ChunkStore, m: mf.Manifest) -> Chain | None:
        """The version's chain as stored here; None if unknown."""
        whole = own_objects(store, m, None)
        if whole is not None:
            return Chain(whole[0], 0, whole[0])
        return self._lookup(version_id(m))

    def stored(
        self, store: ChunkStore, m: mf.Manifest, base: mf.Manifest, below: Chain | None
    ) -> None:
        """Remember the chain of `m`, just stored with `base` (whose chain is `below`, as
        `of` gave it before the add) as its delta base."""
        if own_objects(store, m, None) is not None:
            return  # whole: read off its objects
        vid = version_id(m)
        if self._lookup(vid) is not None:
            return  # added again: stored as it was
        own = own_objects(store, m, base)
        if below is None or own is None:
            return  # unknown: the next version starts a new chain
        line = f"{vid} {own[0] + below.cost:.0f} {below.levels + 1} {own[0]:.0f}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one short append: whole lines, whoever else writes
        finally:
            os.close(fd)

    def _lookup(self, vid: str) -> Chain | None:
        if vid not in self._known:
            self._load()
        return self._known.get(vid)

    def _load(self) -> None:
        """Read what was appended since the last read (other adds may have written)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._read_to)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._read_to += end
        for line in data[:end].decode(errors="replace").splitlines():
            parts = line.split()
            try:
                vid, cost, levels, own = parts[0], float(parts[1]), int(parts[2]), float(parts[3])
            except (IndexError, ValueError):
                continue  # a damaged line: that version's chain is unknown
            self._known[vid] = Chain(cost, levels, own)
