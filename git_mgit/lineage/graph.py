"""The lineage graph in memory: versions, provenance edges and version edges.

Built from three sources, each authoritative for one thing: git history
(which versions exist, where and when they were committed, implicit version
edges between consecutive versions of a path), the notes (names, explicit
provenance and version edges, removals), and `mgit.toml` (model folders and
types). Loading reads each once; every query after that is in memory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from git_mgit.gitcmd import Repo
from git_mgit.lineage import history, notes, pending, records

PROVENANCE, VERSION = "provenance", "version"
EDGE_KINDS = (PROVENANCE, VERSION)


@dataclass
class Node:
    """One model version: the manifest blob (file) or tree (folder) it is stored as."""

    id: str
    path: str | None = None
    kind: str = "file"  # "file" | "folder"
    name: str | None = None
    type: str | None = None
    commit: str | None = None  # the commit that first held it
    time: int | None = None  # that commit's time (seconds)
    details: dict = field(default_factory=dict)  # what made it, beyond its edges (a schedule)

    @property
    def short(self) -> str:
        return self.id[:10]

    @property
    def label(self) -> str:
        """The name if it has one, else path@short id."""
        return self.name or f"{self.path or '?'}@{self.id[:7]}"


@dataclass(frozen=True)
class Edge:
    parent: str
    child: str
    kind: str  # PROVENANCE | VERSION
    implicit: bool = False  # a version edge read from history, not from a note
    attrs: tuple[tuple[str, str], ...] = ()  # function, code commit, ...

    @property
    def info(self) -> dict[str, str]:
        return dict(self.attrs)


@dataclass
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)  # tombstoned versions (hidden)
    # merged versions whose two sides changed dependent tensors: tests must decide
    possible_conflicts: dict[str, dict] = field(default_factory=dict)
    # recorded test results: version -> "TEST:CODE" -> the record's fields
    test_results: dict[str, dict[str, dict]] = field(default_factory=dict)
    _up: dict[str, list[Edge]] = field(default_factory=lambda: defaultdict(list))
    _down: dict[str, list[Edge]] = field(default_factory=lambda: defaultdict(list))
    notes_tip: str | None = None

    # -- editing --------------------------------------------------------------

    def ensure(self, oid: str) -> Node:
        """The node for `oid`, created bare if the graph has none yet."""
        node = self.nodes.get(oid)
        if node is None:
            node = self.nodes[oid] = Node(oid)
        return node

    def link(self, edge: Edge) -> None:
        """Add an edge (a no-op if one of that kind already joins the two)."""
        if any(e.parent == edge.parent and e.kind == edge.kind for e in self._up[edge.child]):
            return
        self._up[edge.child].append(edge)
        self._down[edge.parent].append(edge)

    def unlink(self, edge: Edge) -> None:
        self._up[edge.child].remove(edge)
        self._down[edge.parent].remove(edge)

    def drop(self, oid: str) -> None:
        """Remove a version and every edge touching it."""
        self.nodes.pop(oid, None)
        for edge in self._up.pop(oid, []):
            self._down[edge.parent].remove(edge)
        for edge in self._down.pop(oid, []):
            self._up[edge.child].remove(edge)

    # -- queries --------------------------------------------------------------

    def __contains__(self, oid: str) -> bool:
        return oid in self.nodes

    def __len__(self) -> int:
        return len(self.nodes)

    def in_edges(self, oid: str, kinds: Iterable[str] = EDGE_KINDS) -> list[Edge]:
        kinds = tuple(kinds)
        return [e for e in self._up.get(oid, ()) if e.kind in kinds]

    def out_edges(self, oid: str, kinds: Iterable[str] = EDGE_KINDS) -> list[Edge]:
        kinds = tuple(kinds)
        return [e for e in self._down.get(oid, ()) if e.kind in kinds]

    def parents(self, oid: str, kinds: Iterable[str] = (PROVENANCE,)) -> list[str]:
        return [e.parent for e in self.in_edges(oid, kinds)]

    def children(self, oid: str, kinds: Iterable[str] = (PROVENANCE,)) -> list[str]:
        return [e.child for e in self.out_edges(oid, kinds)]

    def edges(self) -> Iterable[Edge]:
        for lst in self._up.values():
            yield from lst

    def named(self, name: str) -> list[str]:
        return [n.id for n in self.nodes.values() if n.name == name]

    def roots(self) -> list[str]:
        """Versions with no provenance parent and no previous version, oldest first."""
        found = [oid for oid in self.nodes if not self._up.get(oid)]
        return sorted(found, key=self.order_key)

    def order_key(self, oid: str) -> tuple:
        node = self.nodes[oid]
        return (node.time is None, node.time or 0, node.path or "", oid)

    def next_versions(self, oid: str) -> list[str]:
        return sorted(self.children(oid, (VERSION,)), key=self.order_key)

    def ancestors(self, oid: str, kinds: Iterable[str] = (PROVENANCE,)) -> set[str]:
        seen: set[str] = set()
        stack = [oid]
        while stack:
            for parent in self.parents(stack.pop(), kinds):
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return seen


def build(
    hist: history.History,
    note_texts: dict[str, str],
    types: dict[str, str] | None = None,
) -> Graph:
    """Combine history, note records and declared types (path -> type) into a Graph."""
    g = Graph()
    for oid, seen in hist.versions.items():
        node = g.ensure(oid)
        node.path, node.kind, node.commit, node.time = seen.path, seen.kind, seen.commit, seen.time
    winners = {oid: records.current(text.splitlines()) for oid, text in note_texts.items()}
    for oid, recs in winners.items():
        rec = recs.get(("node", ""))
        if rec is None:
            continue
        if rec.removed:
            g.removed.add(oid)
            continue
        node = g.ensure(oid)
        node.name = rec.fields.get("name") or node.name
        node.type = rec.fields.get("type") or node.type
        node.path = node.path or rec.fields.get("path")
        node.kind = rec.fields.get("model_kind", node.kind)
        node.details = rec.fields.get("details") or node.details
    for old, new, _path, commit in hist.edges:
        g.link(Edge(old, new, VERSION, implicit=True, attrs=(("commit", commit),)))
    for oid, recs in winners.items():
        for (kind, other), rec in recs.items():
            if rec.removed:
                continue
            if kind == pending.POSSIBLE_CONFLICT:
                g.possible_conflicts[oid] = rec.fields
            elif kind == "test":
                g.test_results.setdefault(oid, {})[other] = rec.fields
            if kind not in EDGE_KINDS:
                continue
            if kind == PROVENANCE:
                attrs = tuple(sorted((k, str(v)) for k, v in rec.fields.items() if k != "parent"))
                g.link(Edge(other, oid, PROVENANCE, attrs=attrs))
                g.ensure(other).path = g.ensure(other).path or rec.fields.get("parent_path")
            else:
                g.link(Edge(other, oid, VERSION))
            g.ensure(oid)
    for oid in g.removed:
        g.drop(oid)
    for node in g.nodes.values():
        if node.type is None and types and node.path in types:
            node.type = types[node.path]
    return g


def load(repo: Repo, folders: Iterable[str] = (), types: dict[str, str] | None = None) -> Graph:
    """Read history and notes (three git calls) and build the graph.

    Merges whose version has reached history since are recorded first (pending.py).
    """
    hist = history.read(repo, folders)
    if pending.waiting(repo):
        pending.finalize(repo, hist.versions)
    snapshot = notes.load(repo)
    g = build(hist, snapshot.texts, types)
    g.notes_tip = snapshot.tip
    return g
