"""Run a model query: select, slice, construct, or evaluate ... vary ... keep (docs/query.md).

git mgit query 'select m where m.name like "ft-%" and m["body\\..*"].dtype = "F32"'
git mgit query 'slice m2 from m1 where m1.name = "base" at "HEAD" mutate m2 = m1["body\\..*"]
                into "zoo/{name}-body.safetensors"' --dry-run
git mgit query -f query.dql --json

Prints a table (or JSON). A query error shows the query with a caret under
the offending token and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from git_mgit.cli import cluster_option
from git_mgit.errors import MgitError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", nargs="?", help="the query text (or use -f)")
    parser.add_argument(
        "-f", "--file", help="read the query from this file ('-' for standard input)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="slice, construct, evaluate: check and show what would be made, make nothing",
    )
    cluster_option.add(parser, "candidates made and tested at once (evaluate)")


def run(args: argparse.Namespace) -> int:
    from git_mgit.dql import query

    if (args.query is None) == (args.file is None):
        raise MgitError("give the query as an argument or with -f FILE, not both")
    if args.file is not None:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
    else:
        text = args.query
    result = query(text, jobs=args.jobs, dry_run=args.dry_run, cluster=args.cluster)
    for note in result.notes:
        print(f"git-mgit: note: {note}", file=sys.stderr)
    if args.json:
        print(result.to_json())
    elif result.rows:
        print(result.table())
        print(f"({len(result.rows)} {'row' if len(result.rows) == 1 else 'rows'})")
    else:
        print("(no rows)")
    if result.kind == "evaluate" and result.rows and all(r.get("error") for r in result.rows):
        return 1
    return 0
