"""One index over many packs: git's multi-pack-index, written again as packs accumulate.

git-mgit's packs are kept out of git's own repacks (keep.py), so nothing folds them
together until `git mgit gc`: a repository that commits a checkpoint every few minutes
holds thousands of them. A git process opens every pack's .idx the first time it looks
for an object it does not find (2000 packs: 68 ms before `git cat-file -e` answers),
where a multi-pack-index, one sorted table of every pack's object ids, answers at once
(7 ms). git reads it by itself; packs newer than it are looked up one by one, as before.
Once UNINDEXED packs are, it is written again: `git multi-pack-index write` merges the
packs' .idx files and reads no object. A repack that deletes packs it covers (that of
`git mgit gc`) deletes it too.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

UNINDEXED = 32  # packs newer than the multi-pack-index before it is written again
NAME = "multi-pack-index"


def unindexed(objects_dir: Path) -> int:
    """How many packs are newer than the multi-pack-index (all of them, when there is none)."""
    folder = objects_dir / "pack"
    try:
        since = (folder / NAME).stat().st_mtime_ns
    except FileNotFoundError:
        since = 0
    try:
        with os.scandir(folder) as entries:
            return sum(
                1 for e in entries if e.name.endswith(".idx") and e.stat().st_mtime_ns >= since
            )
    except FileNotFoundError:
        return 0


def refresh(objects_dir: Path) -> None:
    """Write the multi-pack-index again once UNINDEXED packs are newer than it. Best effort:
    another process writing it holds its lock, and git works without one."""
    if unindexed(objects_dir) < UNINDEXED:
        return
    subprocess.run(
        ["git", "multi-pack-index", f"--object-dir={objects_dir}", "write"],  # progress: no tty
        cwd=objects_dir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
