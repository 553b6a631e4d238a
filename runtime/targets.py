"""Which model versions a runtime command works on, and what mgit.toml says about each.

A Target is a model version with its path, mgit.toml model name, type and
architecture (the `module:callable` that builds its torch module). Targets
come from a revision (every model it holds), a traversal of the lineage graph
from a start, or the merges still waiting for their tests (`--pending`).
"""

from __future__ import annotations

from dataclasses import dataclass

from git_mgit.lineage import contents, traversal
from git_mgit.lineage.api import Lineage


@dataclass(frozen=True)
class Target:
    """A model version, and what mgit.toml says about its model."""

    version: str
    label: str
    path: str | None
    model: str | None  # the mgit.toml model name (or the version's own name)
    type: str | None
    architecture: str | None

    def spec(self) -> dict:
        """How a worker process finds and builds it."""
        return {"version": self.version, "architecture": self.architecture}


def target(lin: Lineage, version: str, path: str | None = None) -> Target:
    node = lin.graph.nodes.get(version)
    path = path or (node.path if node else None)
    decl = lin.config.model_at(path) if path else None
    if node is not None and node.name:
        label = node.name
    else:  # the model's mgit.toml name (else its path) at this version
        label = f"{decl.name if decl else path or '?'}@{version[:7]}"
    return Target(
        version,
        label,
        path,
        decl.name if decl else (node.name if node else None),
        (decl.type if decl and decl.type else None) or (node.type if node else None),
        lin.config.architecture(decl) if decl else None,
    )


def at_revision(lin: Lineage, rev: str) -> list[Target]:
    held = contents.versions_at(lin.repo, lin.config.folders(), rev)
    return [target(lin, v, path) for v, path in held.items()]


def along(lin: Lineage, starts: list[Target], order: str) -> list[Target]:
    """The versions a traversal visits from each start, each once."""
    seen: dict[str, None] = {}
    for s in starts:
        if s.version not in lin.graph:
            seen[s.version] = None  # not in the graph yet: only itself
            continue
        seen.update(dict.fromkeys(traversal.TRAVERSALS[order](lin.graph, s.version)))
    return [target(lin, v) for v in seen]


def pending(lin: Lineage) -> list[Target]:
    """Merged versions recorded as possible conflicts: their tests must decide."""
    return [target(lin, v) for v in lin.graph.possible_conflicts]
