"""The graph as Mermaid flowchart source, for Markdown renderers (GitHub, GitLab)."""

from __future__ import annotations

from git_mgit.console.progress import format_size
from git_mgit.lineage.graph import PROVENANCE, Graph


def _text(text: str) -> str:
    """Mermaid's quoted label: quotes as an entity, no characters that end a label."""
    return '"' + text.replace('"', "#quot;").replace("\n", " ") + '"'


def render(g: Graph, sizes: dict[str, int] | None = None) -> str:
    sizes = sizes or {}
    ids = {oid: f"v{oid}" for oid in g.nodes}  # hex ids: always Mermaid-safe
    lines = ["flowchart TD"]
    for oid in sorted(g.nodes, key=g.order_key):
        node = g.nodes[oid]
        label = f"{node.label} {node.short}"
        if oid in sizes:
            label += f" {format_size(sizes[oid])}"
        lines.append(f"    {ids[oid]}[{_text(label)}]")
    for e in sorted(g.edges(), key=lambda e: (e.kind, e.parent, e.child)):
        if e.kind == PROVENANCE:
            fn = e.info.get("function")
            arrow = f"-->|{_text(fn)}|" if fn else "-->"
        else:
            arrow = "-.->"
        lines.append(f"    {ids[e.parent]} {arrow} {ids[e.child]}")
    return "\n".join(lines) + "\n"
