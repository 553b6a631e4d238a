"""The graph as an indented tree for the terminal, like `tree` or `git log --graph`.

Roots first (oldest first); under each version, the versions derived from it
(provenance) and the versions that replaced it (version edges). A version
with several parents is printed in full once and as a one-line reference
afterwards, so the output stays linear in the size of the graph.
"""

from __future__ import annotations

from git_mgit.console.progress import format_size
from git_mgit.lineage.graph import PROVENANCE, Edge, Graph


def _line(g: Graph, oid: str, sizes: dict[str, int]) -> str:
    node = g.nodes[oid]
    parts = [node.label, node.short]
    if node.name and node.path:
        parts.append(node.path)
    if oid in sizes:
        parts.append(format_size(sizes[oid]))
    if oid in g.possible_conflicts:
        parts.append("[possible conflict: tests pending]")
    return "  ".join(parts)


def _edge(e: Edge) -> str:
    if e.kind == PROVENANCE:
        return f"derived ({e.info['function']})" if e.info.get("function") else "derived"
    return "version"


def render(g: Graph, sizes: dict[str, int] | None = None) -> str:
    sizes = sizes or {}
    out: list[str] = []
    shown: set[str] = set()

    def walk(oid: str, prefix: str, edge: Edge | None, last: bool, top: bool) -> None:
        branch = "" if top else ("└── " if last else "├── ")
        lead = f"{_edge(edge)}: " if edge else ""
        if oid in shown:
            out.append(f"{prefix}{branch}{lead}… {g.nodes[oid].label} (shown above)")
            return
        shown.add(oid)
        out.append(f"{prefix}{branch}{lead}{_line(g, oid, sizes)}")
        kids = sorted(g.out_edges(oid), key=lambda e: g.order_key(e.child))
        inner = prefix if top else prefix + ("    " if last else "│   ")
        for i, e in enumerate(kids):
            stack.append((e.child, inner, e, i == len(kids) - 1, False))

    # An explicit stack: a 10,000-version chain must not hit Python's recursion limit.
    stack: list[tuple[str, str, Edge | None, bool, bool]] = []
    starts = g.roots() + sorted(g.nodes, key=g.order_key)  # then anything only in cycles
    for root in starts:
        if root in shown:
            continue
        stack.append((root, "", None, True, True))
        while stack:
            mark = len(stack)
            walk(*stack.pop())
            stack[mark - 1 :] = reversed(stack[mark - 1 :])
    return "\n".join(out) + ("\n" if out else "(no model versions yet)\n")
