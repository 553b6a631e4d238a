"""The model lineage graph, kept on git notes (MGit's lineage graph, git-native).

    from git_mgit.lineage import Lineage, commit_model

    lin = Lineage()                                   # the repository around the cwd
    lin.add_node("HEAD:models/base.safetensors", name="base", type="bert")
    lin.add_edge("base", "models/sentiment.safetensors", function="train:finetune")
    for version in lin.traverse("bfs", "base"):
        print(lin.graph.nodes[version].label)

Layers, bottom up: `records` (the note line format), `notes` (bulk
read/write of refs/notes/mgit), `history` (versions and implicit version
edges from git log), `graph` (the in-memory graph), `traversal`, `resolve`
(user references to version ids), `api` (the mutations), `save` (commit a
state dict with its lineage in one call).
"""

from __future__ import annotations

from git_mgit.lineage.api import Lineage, LineageError
from git_mgit.lineage.graph import PROVENANCE, VERSION, Edge, Graph, Node
from git_mgit.lineage.save import Saved, commit_model

__all__ = [
    "PROVENANCE",
    "VERSION",
    "Edge",
    "Graph",
    "Lineage",
    "LineageError",
    "Node",
    "Saved",
    "commit_model",
]
