"""The graph as Graphviz DOT: `git mgit graph --format dot | dot -Tsvg > lineage.svg`.

Provenance edges are solid (labelled with the creating function), version
edges dashed, as in MGit's figures.
"""

from __future__ import annotations

from git_mgit.console.progress import format_size
from git_mgit.lineage.graph import PROVENANCE, Graph


def quote(text: str) -> str:
    """A DOT double-quoted string: backslashes, quotes and newlines escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render(g: Graph, sizes: dict[str, int] | None = None) -> str:
    sizes = sizes or {}
    lines = [
        "digraph lineage {",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    for oid in sorted(g.nodes, key=g.order_key):
        node = g.nodes[oid]
        label = f"{node.label}\n{node.short}"
        if oid in sizes:
            label += f"  {format_size(sizes[oid])}"
        tooltip = f"{node.path or ''} {oid}".strip()
        lines.append(f"  {quote(oid)} [label={quote(label)}, tooltip={quote(tooltip)}];")
    for e in sorted(g.edges(), key=lambda e: (e.kind, e.parent, e.child)):
        if e.kind == PROVENANCE:
            attrs = f"label={quote(e.info['function'])}" if e.info.get("function") else ""
        else:
            attrs = 'style=dashed, color="#7a7a7a"'
        lines.append(
            f"  {quote(e.parent)} -> {quote(e.child)}" + (f" [{attrs}]" if attrs else "") + ";"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"
