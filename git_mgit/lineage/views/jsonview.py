"""The graph as plain data: what the HTML view embeds and `--format json` prints."""

from __future__ import annotations

import json

from git_mgit.lineage.graph import Graph


def to_dict(g: Graph, sizes: dict[str, int] | None = None) -> dict[str, list[dict]]:
    """Nodes in commit order, edges sorted: the same graph always gives the same document."""
    sizes = sizes or {}
    nodes = [
        {
            "id": n.id,
            "label": n.label,
            "name": n.name,
            "path": n.path,
            "kind": n.kind,
            "type": n.type,
            "commit": n.commit,
            "time": n.time,
            "stored": sizes.get(n.id),
            # a merge whose two sides changed dependent tensors: its tests must decide
            "possible_conflict": g.possible_conflicts.get(n.id),
        }
        for n in (g.nodes[oid] for oid in sorted(g.nodes, key=g.order_key))
    ]
    edges = [
        {"parent": e.parent, "child": e.child, "kind": e.kind, "implicit": e.implicit, **e.info}
        for e in sorted(g.edges(), key=lambda e: (e.kind, e.parent, e.child))
    ]
    return {"nodes": nodes, "edges": edges}


def render(g: Graph, sizes: dict[str, int] | None = None) -> str:
    return json.dumps(to_dict(g, sizes), indent=2) + "\n"
