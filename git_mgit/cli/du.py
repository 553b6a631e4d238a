"""Storage by model, by tensor, by codec and by delta chain depth, over every branch and tag.

git mgit du                    # the whole history, and what a repack would save
git mgit du --rev main --top 5
git mgit du --json --no-plan   # skip the repack estimate (it decodes every chunk)
"""

from __future__ import annotations

import argparse
import json

from git_mgit import config
from git_mgit.console.progress import format_size
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.lineage.history import HISTORY_REVS
from git_mgit.repack.costs import Budgets
from git_mgit.repack.estimate import estimate
from git_mgit.repoconfig import load as load_config
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.usage import Row, Usage, measure
from git_mgit.transfer import availability


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rev", action="append", help="only this revision's history (repeat)")
    parser.add_argument("--top", type=int, default=10, help="tensors to list (default 10)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--no-plan",
        action="store_true",
        help="skip estimating what `git mgit repack` would save (it decodes every chunk)",
    )


def _ratio(r: Row) -> str:
    return f"{r.raw / r.stored:.2f}x" if r.stored else "-"


def _table(title: str, unit: str, rows: list[tuple[str, Row]]) -> None:
    width = max([len(title), *(len(name) for name, _ in rows)])
    print(f"{title:<{width}}  {unit:>8} {'raw':>10} {'stored':>10} {'ratio':>7}")
    for name, r in rows:
        print(
            f"{name:<{width}}  {r.count:>8} {format_size(r.raw):>10} "
            f"{format_size(r.stored):>10} {_ratio(r):>7}"
        )
    print()


def _repack(repo: Repo, store: ChunkStore, folders: list[str]) -> dict:
    """What `git mgit repack` with its defaults would store (all history, whatever --rev says)."""
    settings = config.load(repo)
    est = estimate(repo, store, folders, Budgets(), max_depth=settings.max_chain_depth + 1)
    return {"now": est.current, "planned": est.planned, "saving": est.saving}


def _as_json(u: Usage) -> dict:
    def rows(d: dict) -> list[dict]:
        return [{"name": k, **vars(r)} for k, r in d.items()]

    return {
        "models": rows(u.models),
        "tensors": [{"model": m, "tensor": t, **vars(r)} for (m, t), r in u.tensors.items()],
        "codecs": rows(u.codecs),
        "depths": {str(d): n for d, n in sorted(u.depths.items())},
        "missing": u.missing,
        "remote_only": u.remote_only,
        "stored": u.stored,
    }


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    store = ChunkStore(repo)
    try:
        folders = load_config(repo.worktree).folders()
        found = availability.known(repo)
        usage = measure(
            repo, store, folders, args.rev or HISTORY_REVS, lambda v: found.holder(v) is not None
        )
        plan = None if args.no_plan or not usage.models else _repack(repo, store, folders)
    finally:
        store.close()
    if args.json:
        print(json.dumps({**_as_json(usage), "repack": plan}, indent=2))
        return 0
    if not usage.models:
        print("no model versions in this history (see `git mgit track`)")
        return 0
    by_size = sorted(usage.models.items(), key=lambda kv: -kv[1].stored)
    _table("model", "versions", by_size)
    tensors = sorted(usage.tensors.items(), key=lambda kv: -kv[1].stored)[: args.top]
    _table(f"top {len(tensors)} tensors", "objects", [(f"{m} {t}", r) for (m, t), r in tensors])
    _table("codec", "objects", sorted(usage.codecs.items(), key=lambda kv: -kv[1].stored))
    depths = ", ".join(f"{d}: {n}" for d, n in sorted(usage.depths.items()))
    print(f"delta chain depth (objects): {depths}")
    total_raw = sum(r.raw for r in usage.models.values())
    print(
        f"total: {format_size(usage.stored)} stored for {format_size(total_raw)} of model "
        f"versions as whole files ({total_raw / max(usage.stored, 1):.2f}x)"
    )
    if plan is not None:
        print(
            f"`git mgit repack` would store {format_size(plan['planned'])} of the "
            f"{format_size(plan['now'])} it re-plans ({format_size(plan['saving'])} less)"
        )
    if usage.remote_only:
        print(
            f"{usage.remote_only} object(s) are on a remote only (not counted): checkouts fetch "
            "them, `git mgit fetch --all` brings them all"
        )
    if usage.missing:
        print(f"{usage.missing} object(s) are missing and no remote has them (see `git mgit fsck`)")
    return 0
