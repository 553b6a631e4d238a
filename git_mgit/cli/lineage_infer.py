"""`git mgit lineage infer`: propose provenance edges from tensor similarity; --apply writes them."""

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


def run(args: argparse.Namespace) -> int:
    lin = Lineage()
    proposals = infer.propose(lin, args.threshold)
    written = infer.apply(lin, proposals) if args.apply else 0
    if args.json:
        print(json.dumps([dataclasses.asdict(p) for p in proposals], indent=2))
        return 0
    if not proposals:
        print("every version already has lineage: nothing to infer")
        return 0
    g = lin.graph
    width = max(len(g.nodes[p.child].label) for p in proposals)
    print(f"{'version':<{width}}  {'proposed parent':<30} {'contextual':>10} {'structural':>10}")
    for p in proposals:
        parent = g.nodes[p.parent].label if p.parent else "(root: trained from scratch)"
        print(
            f"{g.nodes[p.child].label:<{width}}  {parent:<30} {p.contextual:>10.3f} {p.structural:>10.3f}"
        )
    if args.apply:
        print(f"recorded {written} provenance edge(s) (function 'inferred')")
    elif any(p.parent for p in proposals):
        print("nothing written: run `git mgit lineage infer --apply` to record these edges")
    return 0
