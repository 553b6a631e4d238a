"""Drop tensor objects that no ref, reflog or index needs any more.

Objects stay while a reachable manifest uses them (directly or as a delta
base) or while their anchor is younger than the grace period, so a file that
was added but not yet committed elsewhere is never lost. Old anchors are
folded into one, then `git gc --cruft --prune=<grace>` removes what became
unreachable, the encodings a push superseded included.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from git_mgit import config
from git_mgit.console.progress import format_size
from git_mgit.gitcmd import Repo, approxidate, find_repo
from git_mgit.modelfile.tracked import needed_hashes
from git_mgit.store import anchors, keep
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import ANCHOR_PREFIX, VERSION_PREFIX, anchor_objects, anchor_tips


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
    drop: list[tuple[bytes, str, int]] = []
    try:
        store.cache.rebuild()
        refs = repo.git(
            "for-each-ref", "--format=%(refname) %(objectname) %(committerdate:unix)", ANCHOR_PREFIX
        )
        rows = [line.split() for line in refs.splitlines()]
        old = [r for r in rows if int(r[2]) < limit]
        if old:
            drop = _fold(repo, store, rows, old, limit, args.dry_run)
    finally:
        store.close()
    freed = format_size(sum(size for _, _, size in drop))
    if args.dry_run:
        print(f"would drop {len(drop)} objects ({freed})" if old else NOTHING)
        return 0
    # Unreferenced objects younger than the grace period go into a cruft pack, as they
    # are: git would otherwise write each one out again, zlib-compressed, as a loose file.
    before = _disk(repo.objects_dir)
    with keep.lifted(repo):  # git's gc leaves git-mgit's packs alone otherwise
        repo.git("gc", "--quiet", "--cruft", f"--prune={grace}")
    after = _disk(repo.objects_dir)
    print(
        f"dropped {len(drop)} objects from anchors ({freed}); the object database went from "
        f"{format_size(before)} to {format_size(after)}"
    )
    return 0


NOTHING = "nothing to drop: every anchor is within the grace period"


def _fold(
    repo: Repo,
    store: ChunkStore,
    rows: list[list[str]],
    old: list[list[str]],
    limit: int,
    dry_run: bool,
) -> list[tuple[bytes, str, int]]:
    """Fold the old anchors into one of the objects still needed; returns what they drop."""
    needed = needed_hashes(store)
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
    if dry_run or not drop:
        return drop
    folded = ""
    if keep:
        folded = anchors.set_ref(
            repo, anchors.commit_objects(repo, [(h, bytes.fromhex(o)) for h, o in keep])
        )
    # An anchor commit is its objects and its second: folding exactly one old anchor's
    # objects in the second it was written makes that very commit, whose ref must stay.
    gone = "".join(f"delete {r} {c}\n" for r, c, _ in old if r != folded)
    repo.git("update-ref", "--stdin", input=gone.encode())
    store.cache.rebuild()
    return drop


def _disk(objects: Path) -> int:
    return sum(p.stat().st_size for p in objects.rglob("*") if p.is_file())


def _objects_of(repo: Repo, commits: list[str]) -> list[tuple[bytes, str, int]]:
    """(hash, oid, size) of every object the anchor commits file."""
    return list(anchor_objects(repo, commits, [])) if commits else []
