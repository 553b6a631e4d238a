"""MGit's lineage API (the paper's Table 4) over git notes and mgit.toml.

Each mutation validates against the graph as loaded, appends records to the
notes of the versions it touches (one notes commit per call), and updates
the in-memory graph, so a script can chain calls without reloading.
Method names match MGit's; the command line uses the same names with dashes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Iterator

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.lineage import graph as graphs
from git_mgit.lineage import notes, records, traversal
from git_mgit.lineage.graph import PROVENANCE, VERSION, Edge, Graph
from git_mgit.lineage.resolve import Version, resolve
from git_mgit.repoconfig import RepoConfig
from git_mgit.repoconfig import load as load_config


class LineageError(MgitError):
    """A lineage edit that would make the graph wrong (cycle, missing edge, ...)."""


class Lineage:
    """The lineage graph of one repository: queries and MGit's mutations."""

    def __init__(self, repo: Repo | None = None) -> None:
        self.repo = repo or find_repo()
        self.config: RepoConfig = load_config(self.repo.worktree)
        self._graph: Graph | None = None

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            self._graph = graphs.load(self.repo, self.config.folders(), self.config.types())
        return self._graph

    def reload(self) -> None:
        self._graph = None

    def resolve(self, ref: str) -> Version:
        return resolve(self.repo, self.graph, self.config, ref)

    def _ensure_node(self, v: Version) -> graphs.Node:
        node = self.graph.ensure(v.id)
        node.path = node.path or v.path
        node.kind = v.kind
        return node

    def _write(self, changes: dict[str, list[records.Record]], message: str) -> None:
        def edit(snapshot: notes.Notes) -> dict[str, str]:
            return {
                oid: records.merge_text(snapshot.texts.get(oid, ""), recs)
                for oid, recs in changes.items()
            }

        tip = notes.write(self.repo, edit, message).tip
        if self._graph is not None:  # a graph not loaded yet will read the new notes
            self._graph.notes_tip = tip

    # -- nodes ------------------------------------------------------------------

    def add_node(self, ref: str, name: str | None = None, type: str | None = None) -> Version:
        """Record a model version in the graph, optionally naming it (names are unique)."""
        v = self.resolve(ref)
        if name is not None:
            others = [o for o in self.graph.named(name) if o != v.id]
            if others:
                raise LineageError(
                    f"the name {name!r} already names version {others[0][:10]}; pick another name "
                    f"or `git mgit lineage remove-node {name}` first"
                )
        node = self._ensure_node(v)
        node.name = name or node.name
        node.type = type or node.type
        rec = records.make(
            "node",
            name=node.name,
            path=node.path,
            type=node.type,
            model_kind=node.kind,
            details=node.details or None,
        )
        self._write({v.id: [rec]}, f"add node {node.label}")
        return v

    def remove_node(self, ref: str, subtree: bool = False) -> list[str]:
        """Hide a version (and with subtree=True everything derived from it); returns the ids."""
        v = self.resolve(ref)
        if v.id not in self.graph:
            raise LineageError(f"{ref!r} is not in the lineage graph")
        doomed = list(traversal.provenance(self.graph, v.id)) if subtree else [v.id]
        self._write(
            {oid: [records.make("node", removed=True)] for oid in doomed},
            f"remove node {self.graph.nodes[v.id].label}" + (" and its subtree" if subtree else ""),
        )
        for oid in doomed:
            self.graph.drop(oid)
            self.graph.removed.add(oid)
        return doomed

    # -- edges ------------------------------------------------------------------

    def _edge_ends(self, parent: str, child: str, kind: str) -> tuple[Version, Version]:
        p, c = self.resolve(parent), self.resolve(child)
        if p.id == c.id:
            raise LineageError(f"a {kind} edge needs two different versions ({parent!r} twice)")
        self._ensure_node(p)
        self._ensure_node(c)
        if c.id in self.graph.ancestors(p.id, (kind,)):
            raise LineageError(
                f"a {kind} edge {self.graph.nodes[p.id].label} -> {self.graph.nodes[c.id].label} "
                "would make a cycle"
            )
        return p, c

    def add_edge(
        self, parent: str, child: str, function: str | None = None, code: str | None = None
    ) -> Edge:
        """Provenance: `child` was derived from `parent` (by `function` at code commit `code`)."""
        p, c = self._edge_ends(parent, child, PROVENANCE)
        if code is None and function is not None:
            code = self.repo.git("rev-parse", "--verify", "--quiet", "HEAD", check=False) or None
        rec = records.make(
            PROVENANCE, parent=p.id, parent_path=p.path, function=function, code=code
        )
        self._write({c.id: [rec]}, f"add provenance edge {p.id[:10]} -> {c.id[:10]}")
        attrs = tuple(sorted((k, str(v)) for k, v in rec.fields.items() if k != "parent"))
        edge = Edge(p.id, c.id, PROVENANCE, attrs=attrs)
        self.graph.link(edge)
        return edge

    def add_version_edge(self, old: str, new: str) -> Edge:
        """`new` replaces `old` (e.g. a model at another path, trained from scratch)."""
        p, c = self._edge_ends(old, new, VERSION)
        tp, tc = self.graph.nodes[p.id].type, self.graph.nodes[c.id].type
        if tp and tc and tp != tc:
            raise LineageError(
                f"version edges join models of one type; {old!r} is {tp!r}, {new!r} is {tc!r}"
            )
        self._write(
            {c.id: [records.make(VERSION, previous=p.id)]},
            f"add version edge {p.id[:10]} -> {c.id[:10]}",
        )
        edge = Edge(p.id, c.id, VERSION)
        self.graph.link(edge)
        return edge

    def remove_edge(self, parent: str, child: str, kind: str = PROVENANCE) -> None:
        """Remove a provenance or explicit version edge (history's own edges stay)."""
        p, c = self.resolve(parent), self.resolve(child)
        edges = [e for e in self.graph.in_edges(c.id, (kind,)) if e.parent == p.id]
        if not edges:
            raise LineageError(f"there is no {kind} edge from {parent!r} to {child!r}")
        if all(e.implicit for e in edges):
            raise LineageError(
                f"{parent!r} -> {child!r} is a version edge from git history (one commit "
                "changed the file); it cannot be removed, only the history rewritten"
            )
        link = "parent" if kind == PROVENANCE else "previous"
        self._write(
            {c.id: [records.make(kind, removed=True, **{link: p.id})]},
            f"remove {kind} edge {p.id[:10]} -> {c.id[:10]}",
        )
        for e in edges:
            if not e.implicit:
                self.graph.unlink(e)

    # -- mgit.toml --------------------------------------------------------------

    def register_creation_function(self, model: str, function: str) -> None:
        """Record `module:callable` as how `model` is created from its parents."""
        if model not in self.config.models:
            v = self.resolve(model)
            if v.path is None:
                raise LineageError(f"{model!r}: cannot tell which path the model lives at")
            name = self.graph.nodes[v.id].name if v.id in self.graph else None
            self.config.register_model(name or model, v.path + ("/" if v.kind == "folder" else ""))
            model = name or model
        self.config.register_creation_function(model, function)
        self.config.save()

    def register_test_function(
        self,
        name: str,
        function: str,
        models: str | None = None,
        types: str | None = None,
        condition: str | None = None,
    ) -> None:
        self.config.register_test(name, function, models, types, condition)
        self.config.save()

    def deregister_test_function(self, name: str) -> None:
        self.config.deregister_test(name)
        self.config.save()

    def record_tests(self, results: Iterable[tuple[str, str, str, dict]]) -> None:
        """Record (version, test name, test code hash, metrics) results, one notes commit."""
        changes: dict[str, list[records.Record]] = {}
        for version, test, code, metrics in results:
            rec = records.make("test", id=f"{test}:{code}", test=test, code=code, metrics=metrics)
            changes.setdefault(version, []).append(rec)
            self.graph.test_results.setdefault(version, {})[f"{test}:{code}"] = rec.fields
        if changes:
            self._write(changes, f"record {sum(map(len, changes.values()))} test result(s)")

    def recorded_test(self, version: str, test: str, code: str) -> dict | None:
        """The metrics recorded for this version by this test's current code, if any."""
        found = self.graph.test_results.get(version, {}).get(f"{test}:{code}")
        return None if found is None else found.get("metrics")

    # -- queries ----------------------------------------------------------------

    def get_next_version(self, ref: str) -> str | None:
        """The version that replaced `ref`: on the current branch's history if several did."""
        v = self.resolve(ref)
        nexts = self.graph.next_versions(v.id)
        if len(nexts) <= 1:
            return nexts[0] if nexts else None
        on_head = [
            n for n in nexts if (c := self.graph.nodes[n].commit) and _is_ancestor(self.repo, c)
        ]
        if len(on_head) == 1:
            return on_head[0]
        raise LineageError(
            f"{ref!r} has {len(nexts)} next versions ({', '.join(n[:10] for n in nexts)}) "
            "on different branches; check out the branch you mean"
        )

    def traverse(
        self, order: str, start: str, kinds: Iterable[str] | None = None, **predicates
    ) -> Iterator[str]:
        fn = traversal.TRAVERSALS.get(order)
        if fn is None:
            raise LineageError(
                f"unknown traversal {order!r}; use {', '.join(traversal.TRAVERSALS)}"
            )
        v = self.resolve(start)
        if v.id not in self.graph:
            raise LineageError(f"{start!r} is not in the lineage graph")
        if kinds is not None:
            return fn(self.graph, v.id, kinds=tuple(kinds), **predicates)
        return fn(self.graph, v.id, **predicates)


def _is_ancestor(repo: Repo, commit: str) -> bool:
    return (
        subprocess.run(
            ["git", "merge-base", "--is-ancestor", commit, "HEAD"],
            cwd=repo.cwd,
            capture_output=True,
        ).returncode
        == 0
    )
