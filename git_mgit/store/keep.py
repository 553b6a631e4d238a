"""Tensor packs kept out of git's automatic repacks (`.keep` files).

`git gc --auto`, which `git commit`, `fetch`, `merge` and `pull` run, repacks
every pack into one once more than `gc.autoPackLimit` (50) of them are not
kept. Every `git add` of a model, every download and every on-demand fetch
writes a pack of its own, so after 50 of them git would rewrite the whole
tensor store in the background, with as much free disk again (a 1 GB store:
5 s and 1 GB of memory on a small VM; a 100 GB one, 100 GB of writes). A
`.keep` file beside a pack is git's own mark for a pack no repack touches,
and packs so marked do not count towards that limit.

What git-mgit stores it frees itself, with `git mgit gc` and `git mgit prune`:
around the repack they ask git for, their marks are lifted, and the packs it
leaves are marked again. Plain `git gc` therefore frees no tensor object, as
it frees nothing in any kept pack.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from git_mgit.gitcmd import Repo
from git_mgit.store import midx

MARK = "git-mgit: tensor objects (git mgit gc and git mgit prune repack them)\n"


def mark(pack: Path) -> None:
    """Keep `pack` (a .pack path) out of git's repacks."""
    pack.with_suffix(".keep").write_text(MARK)


def packs(objects_dir: Path) -> set[str]:
    """Names of the packs in `objects_dir`, to tell the new ones after a fetch."""
    return {p.name for p in (objects_dir / "pack").glob("*.pack")}


def mark_new(objects_dir: Path, before: set[str]) -> None:
    """Mark the packs that are not in `before`, unless git keeps them already or they hold
    what git itself is to expire (a cruft pack, with its .mtimes)."""
    folder = objects_dir / "pack"
    new = sorted(packs(objects_dir) - before)
    for name in new:
        pack = folder / name
        kept = pack.with_suffix(".keep").exists() or pack.with_suffix(".mtimes").exists()
        if not kept and pack.with_suffix(".idx").exists():  # not repacked away meanwhile
            mark(pack)
    if new:
        midx.refresh(objects_dir, len(new))


@contextlib.contextmanager
def lifted(repo: Repo) -> Iterator[None]:
    """Around a `git gc` or `git repack` that is to rewrite git-mgit's packs: its marks
    lifted, then every pack left that they marked, and every new one, marked."""
    objects_dir = repo.objects_dir
    ours = [k for k in (objects_dir / "pack").glob("*.keep") if _ours(k)]
    before = packs(objects_dir)
    for keep in ours:
        keep.unlink()
    try:
        yield
    finally:
        for keep in ours:  # packs the command left in place (it failed, or kept them)
            if keep.with_suffix(".pack").exists():
                mark(keep.with_suffix(".pack"))
        mark_new(objects_dir, before)


def _ours(keep: Path) -> bool:
    try:
        return keep.read_text() == MARK
    except (OSError, UnicodeDecodeError):
        return False
