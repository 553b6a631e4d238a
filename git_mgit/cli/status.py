"""Per tracked file: raw size, stored size, objects, delta chain depth."""

from __future__ import annotations

import argparse
import json

from git_mgit.console.progress import format_size
from git_mgit.gitcmd import find_repo
from git_mgit.modelfile.tracked import tracked_files
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer import availability
from git_mgit.worktree.journal import Journal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rev", help="report a revision's files instead of the index")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def file_stats(store: ChunkStore, m, remote: str | None = None) -> dict:
    """Sizes and chain depth of one version; `remote` publishes it (for what is not here)."""
    hashes = list(dict.fromkeys(c.content_hash for c in m.chunks()))
    located = {h: store.locate(h) for h in hashes}
    present = [h for h in hashes if located[h]]
    depths = [store.chain_of(h)[1] for h in present]
    return {
        "kind": m.kind,
        "raw": m.size,
        "stored": sum(located[h][1] for h in present),
        "objects": len(hashes),
        "missing": len(hashes) - len(present),
        "remote": remote if len(present) < len(hashes) else None,
        "max_depth": max(depths, default=0),
    }


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    store = ChunkStore(repo)
    try:
        rows = []
        found = availability.known(repo)
        # Direct checkouts that a kill or a failure cut short (the working copy is not this).
        cut_short = set() if args.rev else {r.path for r in Journal(repo.git_dir) if not r.finished}
        for f in tracked_files(repo, store.reader, args.rev):
            holder = found.holder(f.blob)
            stats = file_stats(store, f.manifest, holder) if f.manifest else {"kind": "plain blob"}
            rows.append({"path": f.path, **stats, "unfinished": f.path in cut_short})
    finally:
        store.close()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no tracked model files (see `git mgit track`)")
        return 0
    width = max(len(r["path"]) for r in rows)
    print(
        f"{'path':<{width}}  {'kind':<11} {'raw':>10} {'stored':>10} {'ratio':>6} {'objects':>7} {'depth':>5}"
    )
    for r in rows:
        if "raw" not in r:
            print(f"{r['path']:<{width}}  {r['kind']:<11} (committed before tracking; re-add it)")
            continue
        ratio = f"{r['raw'] / r['stored']:.2f}x" if r["stored"] else "-"
        missing = ""
        if r["missing"] and r["remote"]:
            missing = (
                f"  {r['missing']} on {r['remote']}, not fetched (`git mgit fetch` brings them)"
            )
        elif r["missing"]:
            missing = f"  {r['missing']} missing, on no remote (see `git mgit fsck`)"
        if r["unfinished"]:
            missing += f"  checkout did not finish: run `git mgit checkout -- {r['path']}`"
        print(
            f"{r['path']:<{width}}  {r['kind']:<11} {format_size(r['raw']):>10} {format_size(r['stored']):>10}"
            f" {ratio:>6} {r['objects']:>7} {r['max_depth']:>5}{missing}"
        )
    return 0
