"""Which direct writes are in flight or done: one small record per path.

Records live under <git-dir>/mgit/direct/ (per worktree: paths are relative
to it). A record without stat data is a write that has not finished: a file
git may hold a partial copy of. A record with stat data names the manifest
the file holds, for as long as the file's stat data stays what it was when
the write finished; the clean filter then answers with that manifest without
hashing the file again. Records are written to a temporary file and renamed,
so a killed process leaves either the old record or the new one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

Stat = tuple[int, int, int, int, int]  # dev, ino, size, mtime_ns, ctime_ns


def stat_key(st: os.stat_result) -> Stat:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Record:
    path: str  # relative to the worktree, as git names it
    blob: str  # the manifest blob the file holds (or will)
    stat: Stat | None  # once written; None while the write has not finished

    @property
    def finished(self) -> bool:
        return self.stat is not None

    def matches(self, worktree: Path) -> bool:
        """Whether the file on disk is still the one this record's write left there."""
        if self.stat is None:
            return False
        try:
            return stat_key((worktree / self.path).lstat()) == self.stat
        except OSError:
            return False


class Journal:
    def __init__(self, git_dir: Path) -> None:
        self.dir = git_dir / "mgit" / "direct"

    def _file(self, path: str) -> Path:
        return self.dir / hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()

    def get(self, path: str) -> Record | None:
        try:
            raw = json.loads(self._file(path).read_text())
        except (OSError, ValueError):
            return None
        return _record(raw) if raw.get("path") == path else None

    def __iter__(self) -> Iterator[Record]:
        try:
            files = sorted(self.dir.iterdir())
        except OSError:
            return
        for f in files:
            try:
                record = _record(json.loads(f.read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if record is not None:
                yield record

    def put(self, record: Record) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        target = self._file(record.path)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        stat = list(record.stat) if record.stat is not None else None
        tmp.write_text(json.dumps({"path": record.path, "blob": record.blob, "stat": stat}))
        os.replace(tmp, target)

    def drop(self, path: str) -> None:
        self._file(path).unlink(missing_ok=True)

    def active(self) -> bool:
        """Whether any record may exist (one stat, for the filter's per-file checks)."""
        return self.dir.is_dir()


def _record(raw: dict) -> Record | None:
    stat = raw.get("stat")
    if not isinstance(raw.get("path"), str) or not isinstance(raw.get("blob"), str):
        return None
    return Record(raw["path"], raw["blob"], tuple(int(x) for x in stat) if stat else None)  # type: ignore[arg-type]
