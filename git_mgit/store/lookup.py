"""Content hash -> git objects that hold the chunk, cached in .git/mgit/lookup.sqlite.

The truth lives in the refs that file objects as `ab/cd/<64 hex>`: this
clone's anchors (refs/mgit/objects/*) and the version refs it published or
fetched (refs/mgit/v/*). One chunk may be held by several objects (this
clone's forward delta and a published whole object, say), so the cache keeps
every (hash, object) pair; which one a read takes is the chunk store's
choice. It remembers which ref commits it has indexed, so refreshing after a
fetch lists just the new ones, and it can always be rebuilt from refs.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable

from git_mgit.gitcmd import Repo
from git_mgit.store.gitobjects import DIR_MODE, tree_entries

ANCHOR_PREFIX = "refs/mgit/objects/"
VERSION_PREFIX = "refs/mgit/v/"
PARTIAL_PREFIX = "refs/mgit/partial/"  # a version ref's parts, while a push sends them
RECORD_REF = "refs/mgit/store"  # the store a remote records (transfer/stores/choice.py)
OBJECT_REFS = (ANCHOR_PREFIX, VERSION_PREFIX)
_SCHEMA_VERSION = 3
_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    hash BLOB NOT NULL, oid TEXT NOT NULL, size INTEGER NOT NULL, PRIMARY KEY (hash, oid)
) WITHOUT ROWID;
-- what an object's header says: its delta base (NULL when standalone) and chain depth
CREATE TABLE IF NOT EXISTS headers (oid TEXT PRIMARY KEY, base BLOB, depth INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS anchors (commit_id TEXT PRIMARY KEY) WITHOUT ROWID;
-- an object's SHA-256 and size (its name in a Git LFS or S3 store), hashed when it was
-- written: an object's bytes never change, so this outlives the refreshes that start the
-- tables above over, and a push hashes only what it encodes
CREATE TABLE IF NOT EXISTS sha256 (oid TEXT PRIMARY KEY, digest BLOB NOT NULL, size INTEGER NOT NULL)
    WITHOUT ROWID;
"""
_TABLES = ("objects", "headers", "anchors")
_BUSY_S = 60  # how long a connection waits for another's lock


def _use_wal(db: sqlite3.Connection) -> None:
    """Switch a new database to WAL. Processes opening it for the first time at once (the
    ranks of one training run) can deadlock in that switch, and SQLite then answers one
    of them "database is locked" at once, without its busy wait: it tries again."""
    deadline = time.monotonic() + _BUSY_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class LookupCache:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.db = sqlite3.connect(
            repo.mgit_dir / "lookup.sqlite", timeout=_BUSY_S, check_same_thread=False
        )
        _use_wal(self.db)
        self.db.execute("PRAGMA synchronous=NORMAL")
        if self.db.execute("PRAGMA user_version").fetchone()[0] != _SCHEMA_VERSION:
            # A cache of an older layout: start over (it is rebuilt from refs).
            with self.db:
                for table in (*_TABLES, "chains", "sha256"):
                    self.db.execute(f"DROP TABLE IF EXISTS {table}")
                self.db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        self.db.executescript(_SCHEMA)
        # The filter reads on one thread while its encoder writes on another.
        self.lock = threading.RLock()

    def candidates(self, content_hash: bytes) -> list[tuple[str, int]]:
        """(oid, stored size) of every indexed object holding this chunk."""
        with self.lock:
            return self.db.execute(
                "SELECT oid, size FROM objects WHERE hash = ? ORDER BY oid", (content_hash,)
            ).fetchall()

    def has(self, content_hash: bytes) -> bool:
        with self.lock:
            return (
                self.db.execute("SELECT 1 FROM objects WHERE hash = ?", (content_hash,)).fetchone()
                is not None
            )

    def add(self, entries: Iterable[tuple[bytes, str, int]], anchor: str | None = None) -> None:
        with self.lock, self.db:
            self.db.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?)", entries)
            if anchor:
                self.db.execute("INSERT OR IGNORE INTO anchors VALUES (?)", (anchor,))

    def header(self, oid: str) -> tuple[bytes | None, int] | None:
        """(base hash or None, depth) the object's header says, if known."""
        with self.lock:
            row = self.db.execute(
                "SELECT base, depth FROM headers WHERE oid = ?", (oid,)
            ).fetchone()
            return (row[0], row[1]) if row else None

    def set_header(self, oid: str, base: bytes | None, depth: int) -> None:
        with self.lock, self.db:
            self.db.execute("INSERT OR REPLACE INTO headers VALUES (?, ?, ?)", (oid, base, depth))

    def sha256(self, oid: str) -> tuple[bytes, int] | None:
        """(SHA-256, size) of the object's bytes, if hashed when written."""
        with self.lock:
            row = self.db.execute(
                "SELECT digest, size FROM sha256 WHERE oid = ?", (oid,)
            ).fetchone()
            return (row[0], row[1]) if row else None

    def set_sha256(self, rows: Iterable[tuple[str, bytes, int]]) -> None:
        """Remember (oid, SHA-256, size) of objects whose bytes were just hashed."""
        with self.lock, self.db:
            self.db.executemany("INSERT OR REPLACE INTO sha256 VALUES (?, ?, ?)", rows)

    def refresh(self) -> int:
        """Index ref commits that appeared since the last call (fetch, another process).

        Starts over if a commit it indexed is no longer the tip of any object ref,
        so the cache never claims an object that git may have pruned.
        """
        with self.lock:
            tips = set(anchor_tips(self.repo).values())
            known = {r[0] for r in self.db.execute("SELECT commit_id FROM anchors")}
            if known - tips:
                # An indexed ref is gone or moved (gc, repack, a re-published version).
                with self.db:
                    for table in _TABLES:
                        self.db.execute(f"DELETE FROM {table}")
                known = set()
            new = sorted(tips - known)
            if not new:
                return 0
            entries = list(anchor_objects(self.repo, new, sorted(known)))
            with self.db:
                self.db.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?)", entries)
                self.db.executemany("INSERT OR IGNORE INTO anchors VALUES (?)", [(c,) for c in new])
            return len(entries)

    def rebuild(self) -> int:
        with self.lock:
            with self.db:
                for table in _TABLES:
                    self.db.execute(f"DELETE FROM {table}")
            return self.refresh()

    def all(self) -> dict[bytes, list[tuple[str, int]]]:
        """Every indexed chunk with the objects that hold it."""
        with self.lock:
            out: dict[bytes, list[tuple[str, int]]] = {}
            for h, o, s in self.db.execute(
                "SELECT hash, oid, size FROM objects ORDER BY hash, oid"
            ):
                out.setdefault(h, []).append((o, s))
            return out

    def close(self) -> None:
        self.db.close()


def anchor_tips(repo: Repo, prefixes: Iterable[str] = OBJECT_REFS) -> dict[str, str]:
    """refname -> commit id for every ref that files objects (anchors and version refs)."""
    out = repo.git("for-each-ref", "--format=%(refname) %(objectname)", *prefixes)
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
    sizes = _sizes(repo, [o for o, _ in wanted])
    return [(h, o, sizes[o]) for o, h in dict(wanted).items() if o in sizes]


def _sizes(repo: Repo, oids: list[str]) -> dict[str, int]:
    """Object id -> size of those of `oids` git has, in one `git cat-file --batch-check`."""
    return {oid: int(size) for oid, size in repo.batch_check(oids, "%(objectname) %(objectsize)")}


def filed_by(repo: Repo, commits: Iterable[str]) -> dict[str, list[tuple[bytes, str, int]]]:
    """(hash, oid, size) of the objects each of `commits` files, for any number of commits
    in five git commands: the commits, then each level of their `ab/cd/<hash>` fan-out in
    one `git cat-file --batch`, then the sizes (anchor_objects takes two per call).

    Each commit's own tree is read, not its parents': no commit that files objects leans
    on a parent's tree (a partial push's part files every part before it too)."""
    commits = list(dict.fromkeys(commits))
    trees: list[tuple[str, str]] = []  # (commit, tree at the current level)
    for commit, body in zip(commits, repo.cat_blobs(commits), strict=True):
        if body is not None and body.startswith(b"tree "):
            trees.append((commit, body[5:45].decode()))
    for _ in range(2):  # the root, then the `ab` trees: their subtrees
        bodies = repo.cat_blobs([t for _, t in trees])
        trees = [
            (commit, oid)
            for (commit, _), body in zip(trees, bodies, strict=True)
            for mode, _, oid in tree_entries(body or b"")
            if mode == DIR_MODE
        ]
    files: dict[str, list[tuple[bytes, str]]] = {c: [] for c in commits}
    for (commit, _), body in zip(trees, repo.cat_blobs([t for _, t in trees]), strict=True):
        files[commit] += [
            (bytes.fromhex(name.decode()), oid)
            for mode, name, oid in tree_entries(body or b"")
            if mode != DIR_MODE and len(name) == 64
        ]
    sizes = _sizes(repo, sorted({oid for filed in files.values() for _, oid in filed}))
    return {
        c: [(h, oid, sizes[oid]) for h, oid in filed if oid in sizes] for c, filed in files.items()
    }
