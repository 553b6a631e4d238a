"""Renderers for the lineage graph: one module per output format.

Each takes the graph and, optionally, the stored bytes per version, and
returns the whole document as text.
"""

from __future__ import annotations

from collections.abc import Callable

from git_mgit.lineage.graph import Graph
from git_mgit.lineage.views import dot, html, jsonview, mermaid, text

Renderer = Callable[[Graph, "dict[str, int] | None"], str]

FORMATS: dict[str, Renderer] = {
    "text": text.render,
    "dot": dot.render,
    "mermaid": mermaid.render,
    "json": jsonview.render,
    "html": html.render,
}
