"""Propose provenance edges from tensor similarity (MGit's divergence scores); --apply writes them.

git mgit lineage infer                  # a table: version, proposed parent or root, scores
git mgit lineage infer --apply          # record the proposed edges (function "inferred")
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from git_mgit.lineage import infer
from git_mgit.lineage.api import Lineage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--apply", action="store_true", help="record the proposed edges")
    parser.add_argument(
        "--threshold",
        type=float,
        default=infer.DEFAULT_THRESHOLD,
        help="largest contextual divergence a parent may have (default %(default)s)",
    )


def render(lin: Lineage, proposals: list[infer.Proposal], threshold: float) -> str:
    nodes = lin.graph.nodes
    rows = [
        (
            nodes[p.child].label,
            nodes[p.parent].label if p.parent else "root",
            f"{p.contextual:.3f}",
            f"{p.structural:.3f}",
        )
        for p in proposals
    ]
    header = ("version", "proposed parent", "contextual", "structural")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}"
        for r in (header, *rows)
    ]
    if any(p.parent is None for p in proposals):
        lines.append(
            f"root: no version committed before it is within contextual {threshold} "
            "(trained from scratch)"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    lin = Lineage()
    proposals = infer.propose(lin, args.threshold)
    written = infer.apply(lin, proposals) if args.apply else 0
    if getattr(args, "json", False):
        print(json.dumps([dataclasses.asdict(p) for p in proposals], indent=2))
        return 0
    if not proposals:
        print("every version already has lineage: nothing to infer")
        return 0
    print(render(lin, proposals, args.threshold))
    if args.apply:
        print(f"recorded {written} provenance edge(s) (function 'inferred')")
    elif any(p.parent for p in proposals):
        print("nothing written: run `git mgit lineage infer --apply` to record these edges")
    return 0
