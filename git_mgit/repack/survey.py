"""What a repack plans over: every chunk the model versions in history use, and which
pairs of chunks may be stored as deltas of each other.

A candidate pair is the same tensor chunk (same tensor name, chunk index,
dtype and length) in two versions joined by a lineage edge: consecutive
versions of a path (implicit version edges), declared versions, and
provenance parents and children, both ways round, so an old checkpoint may
become a delta of a newer one. The delta base each object has now is a
candidate too. Each version is a group whose budget the plan must meet;
versions at a branch tip or a tag get the tighter budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.lineage import contents
from git_mgit.lineage.graph import Graph
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore

# (relative file, tensor name or segment kind, chunk index, dtype, length)
Key = tuple[str, str, int, str, int]


@dataclass(frozen=True)
class ChunkInfo:
    content_hash: bytes
    dtype: str  # "" for headers and opaque bytes
    length: int


@dataclass
class Survey:
    chunks: dict[bytes, ChunkInfo] = field(default_factory=dict)
    versions: dict[str, list[bytes]] = field(default_factory=dict)  # id -> its chunks, once each
    labels: dict[str, str] = field(default_factory=dict)  # id -> path@short id
    heads: set[str] = field(default_factory=set)  # versions at a branch tip or a tag
    pairs: set[tuple[bytes, bytes]] = field(default_factory=set)  # (base, chunk) candidates
    unreadable: list[str] = field(default_factory=list)  # versions whose manifests are not here
    missing: int = 0  # chunks a manifest names that are not in this clone (left out)

    def components(self) -> list[list[bytes]]:
        """Chunks connected by candidate pairs (one tensor's chunk across versions)."""
        parent = {h: h for h in self.chunks}

        def find(h: bytes) -> bytes:
            while parent[h] != h:
                parent[h] = parent[parent[h]]
                h = parent[h]
            return h

        for a, b in self.pairs:
            parent[find(a)] = find(b)
        groups: dict[bytes, list[bytes]] = {}
        for h in self.chunks:
            groups.setdefault(find(h), []).append(h)
        return list(groups.values())


def _keyed(ms: dict[str, mf.Manifest]) -> dict[Key, mf.Chunk]:
    out = {}
    for rel, m in ms.items():
        for c in m.chunks():
            seg = c.segment
            out[(rel, seg.name or seg.kind, c.index, seg.dtype or "", c.length)] = c
    return out


def head_versions(repo: Repo, folders: Iterable[str]) -> set[str]:
    """Versions held by a branch tip or a tag: the ones users check out most."""
    folders = list(folders)
    tips = repo.git("for-each-ref", "--format=%(objectname)", "refs/heads", "refs/tags")
    out: set[str] = set()
    for tip in dict.fromkeys(tips.split()):
        commit = repo.git("rev-parse", "--verify", "--quiet", f"{tip}^{{commit}}", check=False)
        if commit:
            out.update(contents.versions_at(repo, folders, commit))
    return out


def survey(store: ChunkStore, graph: Graph, folders: Iterable[str]) -> Survey:
    """Read every version's manifests (no tensor data) and the candidate pairs."""
    repo = store.repo
    out = Survey()
    keyed: dict[str, dict[Key, mf.Chunk]] = {}
    for oid, node in graph.nodes.items():
        if node.commit is None:
            continue  # known from notes only: not in this clone's history
        try:
            ms = contents.manifests(repo, store.reader, oid, node.kind)
        except MgitError:
            out.unreadable.append(oid)
            continue
        keyed[oid] = _keyed(ms)
        out.labels[oid] = node.label
        out.versions[oid] = list(dict.fromkeys(c.content_hash for c in keyed[oid].values()))
        for c in keyed[oid].values():
            out.chunks.setdefault(
                c.content_hash, ChunkInfo(c.content_hash, c.segment.dtype or "", c.length)
            )
    for edge in graph.edges():
        a, b = keyed.get(edge.parent), keyed.get(edge.child)
        if a is None or b is None:
            continue
        for key, ca in a.items():
            cb = b.get(key)
            if cb is not None and cb.content_hash != ca.content_hash:
                out.pairs.add((ca.content_hash, cb.content_hash))
                out.pairs.add((cb.content_hash, ca.content_hash))
    _drop_missing(store, out)
    for h in out.chunks:
        base = store.chain_of(h)[0]
        if base is not None and base in out.chunks:
            out.pairs.add((base, h))
    out.heads = head_versions(repo, folders) & set(out.versions)
    return out


def _drop_missing(store: ChunkStore, sv: Survey) -> None:
    """Leave out chunks this clone lacks: a repack can only re-plan what it can read."""
    gone = {h for h in sv.chunks if store.locate(h) is None}
    if not gone:
        return
    sv.missing = len(gone)
    for h in gone:
        del sv.chunks[h]
    for oid, hashes in sv.versions.items():
        sv.versions[oid] = [h for h in hashes if h not in gone]
    sv.pairs = {(a, b) for a, b in sv.pairs if a not in gone and b not in gone}
