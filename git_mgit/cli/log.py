"""The versions of one model, newest first, with the commit, name and provenance of each.

git mgit log models/base.safetensors
git mgit log base --json
"""

from __future__ import annotations

import argparse
import json

from git_mgit.lineage.api import Lineage
from git_mgit.lineage.graph import PROVENANCE, VERSION


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a model path, name, REV:PATH or version id")
    parser.add_argument("-n", "--max-count", type=int, help="show at most this many versions")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _commits(lin: Lineage, ids: list[str]) -> dict[str, tuple[str, str]]:
    """commit id -> (date, subject), in one git call."""
    if not ids:
        return {}
    out = lin.repo.git("show", "-s", "--format=%H%x00%cs%x00%s", *ids)
    info = {}
    for line in out.splitlines():
        commit, date, subject = line.split("\0", 2)
        info[commit] = (date, subject)
    return info


def run(args: argparse.Namespace) -> int:
    lin = Lineage()
    g = lin.graph
    start = lin.resolve(args.model).id
    chain, seen = [], set()
    cursor: str | None = start
    while cursor is not None and cursor not in seen:
        seen.add(cursor)
        chain.append(cursor)
        previous = sorted(g.parents(cursor, (VERSION,)), key=g.order_key, reverse=True)
        cursor = previous[0] if previous else None
    if args.max_count is not None:
        chain = chain[: args.max_count]
    commits = _commits(lin, sorted({c for o in chain if o in g and (c := g.nodes[o].commit)}))
    rows = []
    for oid in chain:
        node = g.nodes.get(oid)
        commit = node.commit if node else None
        date, subject = commits.get(commit or "", ("", ""))
        parents = [
            {"id": e.parent, "label": g.nodes[e.parent].label, **e.info}
            for e in g.in_edges(oid, (PROVENANCE,))
        ]
        rows.append(
            {
                "id": oid,
                "label": node.label if node else oid[:10],
                "path": node.path if node else None,
                "commit": commit,
                "date": date,
                "subject": subject,
                "derived_from": parents,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        where = (
            f"{r['commit'][:10]} {r['date']} {r['subject']}" if r["commit"] else "(not committed)"
        )
        print(f"version {r['id'][:10]}  {r['label']}\n    {where}")
        for p in r["derived_from"]:
            how = f" by {p['function']}" if p.get("function") else ""
            print(f"    derived from {p['label']} ({p['id'][:10]}){how}")
    return 0
