"""Drop tensor objects that no ref, reflog or index needs any more.

Objects stay while a reachable manifest uses them (directly or as a delta
base) or while their anchor is younger than the grace period, so a file that
was added but not yet committed elsewhere is never lost. Old anchors are
folded into one, then `git gc --prune=<grace>` removes what became
unreachable.
"""

from __future__ import annotations

import argparse

from git_mgit import config
from git_mgit.gitcmd import Repo, approxidate, find_repo
from git_mgit.progress import format_size
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import ANCHOR_PREFIX, VERSION_PREFIX, anchor_objects, anchor_tips
from git_mgit.store.packwriter import PackWriter
from git_mgit.tracked import needed_hashes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prune",
        metavar="DATE",
        help="grace period, as git gc --prune (default: mgit.gcGracePeriod, 14.days.ago)",
    )
    parser.add_argument("--dry-run", "-n", action="store_true", help="report what would be dropped")


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    grace = args.prune or config.load(repo).gc_grace
    limit = approxidate(repo, grace)
    store = ChunkStore(repo)
    try:
        store.cache.rebuild()
        needed = needed_hashes(store)
        refs = repo.git(
            "for-each-ref", "--format=%(refname) %(objectname) %(committerdate:unix)", ANCHOR_PREFIX
        )
        rows = [line.split() for line in refs.splitlines()]
        old = [r for r in rows if int(r[2]) < limit]
        if not old:
            print("nothing to drop: every anchor is within the grace period")
            return 0
        old_objects = _objects_of(repo, [c for _, c, _ in old])
        # Young anchors and version refs (what remotes were sent or served) keep theirs.
        others = [c for _, c, t in rows if int(t) >= limit]
        others += anchor_tips(repo, (VERSION_PREFIX,)).values()
        young = {o for _, o, _ in _objects_of(repo, others)}
        # Of the objects that hold a needed chunk, the one reads take stays (its chain's
        # objects are needed too); other encodings of it go, like unneeded chunks.
        chosen = {h: loc[0] for h in needed if (loc := store.locate(h)) is not None}
        keep = [(h, o) for h, o, _ in old_objects if chosen.get(h) == o]
        drop = [(h, o, size) for h, o, size in old_objects if chosen.get(h) != o and o not in young]
        freed = sum(size for _, _, size in drop)
        verb = "would drop" if args.dry_run else "dropped"
        if args.dry_run or not drop:
            print(f"{verb} {len(drop)} objects ({format_size(freed)})")
            return 0
        pack = PackWriter(repo.objects_dir)
        commit = (
            anchors.write_anchor(pack, [(h, bytes.fromhex(o)) for h, o in keep]) if keep else None
        )
        pack.finish()
        if commit:
            anchors.set_ref(repo, commit)
        repo.git(
            "update-ref", "--stdin", input="".join(f"delete {r} {c}\n" for r, c, _ in old).encode()
        )
        store.cache.rebuild()
    finally:
        store.close()
    repo.git("gc", "--quiet", f"--prune={grace}")
    print(f"{verb} {len(drop)} objects ({format_size(freed)})")
    return 0


def _objects_of(repo: Repo, commits: list[str]) -> list[tuple[bytes, str, int]]:
    """(hash, oid, size) of every object the anchor commits file."""
    return list(anchor_objects(repo, commits, [])) if commits else []
