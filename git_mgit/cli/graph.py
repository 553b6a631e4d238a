"""Show the lineage graph: a text tree, or DOT, Mermaid, JSON or a self-contained HTML view.

git mgit graph                         # the whole graph as a tree
git mgit graph base --format dot | dot -Tsvg > lineage.svg
git mgit graph --format html -o lineage.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.graph import Graph
from git_mgit.lineage.views import FORMATS
from git_mgit.store.chunkstore import ChunkStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="*", help="only the lineage of these versions or models")
    parser.add_argument("--format", choices=list(FORMATS), default="text")
    parser.add_argument("-o", "--output", help="write to this file instead of stdout")
    parser.add_argument(
        "--no-sizes", action="store_true", help="skip stored sizes (no manifest reads)"
    )


def related(g: Graph, roots: list[str]) -> Graph:
    """The subgraph of everything connected to `roots` by any chain of edges."""
    keep: set[str] = set()
    stack = list(roots)
    while stack:
        oid = stack.pop()
        if oid in keep:
            continue
        keep.add(oid)
        stack.extend(e.parent for e in g.in_edges(oid))
        stack.extend(e.child for e in g.out_edges(oid))
    sub = Graph(notes_tip=g.notes_tip)
    sub.nodes = {oid: g.nodes[oid] for oid in g.nodes if oid in keep}
    for e in g.edges():
        if e.child in keep:
            sub.link(e)
    return sub


def stored_sizes(lin: Lineage, g: Graph) -> dict[str, int]:
    """Bytes each version's own objects take in git; versions whose manifests are absent are left out."""
    store = ChunkStore(lin.repo)
    sizes: dict[str, int] = {}
    progress = Progress("git-mgit: reading manifests", len(g.nodes))
    try:
        for oid, node in g.nodes.items():
            progress.update(1)
            try:
                ms = contents.manifests(lin.repo, store.reader, oid, node.kind)
            except MgitError:  # a missing or foreign object: show the node without a size
                continue
            sizes[oid] = contents.stored_size(store, ms)[1]
    finally:
        progress.finish()
        store.close()
    return sizes


def run(args: argparse.Namespace) -> int:
    lin = Lineage()
    g = lin.graph
    if args.models:
        g = related(g, [lin.resolve(m).id for m in args.models])
    sizes = None if args.no_sizes else stored_sizes(lin, g)
    text = FORMATS[args.format](g, sizes)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output} ({len(g.nodes)} versions)", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
