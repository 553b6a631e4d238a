"""Content hash -> git object id, cached in .git/mgit/lookup.sqlite.

The truth lives in the anchor refs (refs/mgit/objects/*), whose trees file
each object as `ab/cd/<64 hex>`; this cache only saves walking them. It
remembers which anchor commits it has indexed, so refreshing after a fetch
lists just the new anchors' objects, and it can always be rebuilt from refs.
"""

from __future__ import annotations

import sqlite3
import subprocess
import threading
from collections.abc import Iterable

from git_mgit.gitcmd import Repo

ANCHOR_PREFIX = "refs/mgit/objects/"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (hash BLOB PRIMARY KEY, oid TEXT NOT NULL, size INTEGER NOT NULL)
    WITHOUT ROWID;
-- delta base and chain depth, learnt when an object is written or first decoded
CREATE TABLE IF NOT EXISTS chains (hash BLOB PRIMARY KEY, base BLOB, depth INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS anchors (commit_id TEXT PRIMARY KEY) WITHOUT ROWID;
"""


class LookupCache:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.db = sqlite3.connect(
            repo.mgit_dir / "lookup.sqlite", timeout=60, check_same_thread=False
        )
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        # The filter reads on one thread while its encoder writes on another.
        self.lock = threading.RLock()

    def get(self, content_hash: bytes) -> tuple[str, int] | None:
        with self.lock:
            row = self.db.execute(
                "SELECT oid, size FROM objects WHERE hash = ?", (content_hash,)
            ).fetchone()
            return (row[0], row[1]) if row else None

    def add(self, entries: Iterable[tuple[bytes, str, int]], anchor: str | None = None) -> None:
        with self.lock, self.db:
            self.db.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?)", entries)
            if anchor:
                self.db.execute("INSERT OR IGNORE INTO anchors VALUES (?)", (anchor,))

    def chain(self, content_hash: bytes) -> tuple[bytes | None, int] | None:
        """(base hash or None, depth) if known."""
        with self.lock:
            row = self.db.execute(
                "SELECT base, depth FROM chains WHERE hash = ?", (content_hash,)
            ).fetchone()
            return (row[0], row[1]) if row else None

    def set_chain(self, content_hash: bytes, base: bytes | None, depth: int) -> None:
        with self.lock, self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO chains VALUES (?, ?, ?)", (content_hash, base, depth)
            )

    def refresh(self) -> int:
        """Index anchors that appeared since the last call (fetch, another process).

        Starts over if an anchor it indexed has disappeared, so the cache never
        claims an object that git may have pruned.
        """
        with self.lock:
            tips = anchor_tips(self.repo)
            known = {r[0] for r in self.db.execute("SELECT commit_id FROM anchors")}
            if known - set(tips.values()):
                # An indexed anchor is gone (gc, deleted refs): its objects may be too.
                with self.db:
                    for table in ("objects", "anchors", "chains"):
                        self.db.execute(f"DELETE FROM {table}")
                known = set()
            new = [c for c in tips.values() if c not in known]
            if not new:
                return 0
            entries = list(anchor_objects(self.repo, new, [c for c in tips.values() if c in known]))
            with self.db:
                self.db.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?)", entries)
                self.db.executemany("INSERT OR IGNORE INTO anchors VALUES (?)", [(c,) for c in new])
            return len(entries)

    def rebuild(self) -> int:
        with self.lock:
            with self.db:
                for table in ("objects", "anchors", "chains"):
                    self.db.execute(f"DELETE FROM {table}")
            return self.refresh()

    def all(self) -> dict[bytes, tuple[str, int]]:
        with self.lock:
            return {h: (o, s) for h, o, s in self.db.execute("SELECT hash, oid, size FROM objects")}

    def close(self) -> None:
        self.db.close()


def anchor_tips(repo: Repo) -> dict[str, str]:
    """refname -> commit id for every anchor ref."""
    out = repo.git("for-each-ref", "--format=%(refname) %(objectname)", ANCHOR_PREFIX)
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def anchor_objects(
    repo: Repo, commits: list[str], exclude: list[str]
) -> Iterable[tuple[bytes, str, int]]:
    """(hash, oid, size) of every object filed in `commits` but not in `exclude`."""
    spec = "\n".join([*commits, *("^" + c for c in exclude)]) + "\n"
    listing = repo.git_bytes("rev-list", "--objects", "--stdin", input=spec.encode())
    wanted: list[tuple[str, bytes]] = []
    for line in listing.splitlines():
        oid, _, path = line.decode().partition(" ")
        name = path.rsplit("/", 1)[-1]
        if path.count("/") == 2 and len(name) == 64:
            wanted.append((oid, bytes.fromhex(name)))
    if not wanted:
        return []
    proc = subprocess.run(
        ["git", "cat-file", "--batch-check=%(objectname) %(objectsize)"],
        cwd=repo.worktree or repo.git_dir,
        input="".join(o + "\n" for o, _ in wanted).encode(),
        capture_output=True,
        check=True,
    )
    sizes = dict(
        line.split() for line in proc.stdout.decode().splitlines() if "missing" not in line
    )
    return [(h, o, int(sizes[o])) for o, h in wanted if o in sizes]
