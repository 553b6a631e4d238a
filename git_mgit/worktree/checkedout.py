"""Chunks as the working tree holds them: a push encodes a checked-out version from its file.

Publishing a version whole needs its chunks' bytes, and `git add` stored the
newest version as a delta of the one before, so they must be decoded through
that delta. But the version a push makes the branch tip is usually the one
checked out, and its file holds those bytes already: reading a chunk and
hashing it (BLAKE3) costs a fraction of decoding it.

Only versions the index holds at their path are looked for, and every chunk
read is verified against its content hash. A file that differs (edited since
`git add`, being rewritten) gives nothing from then on, and the caller
decodes instead: the bytes a push encodes are always the version's.
"""

from __future__ import annotations

import stat
import threading
from collections.abc import Mapping
from pathlib import Path

from git_mgit import hashing
from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf

_PATHSPECS = 1000


class CheckedOut:
    """The chunks of some model versions, read from the files they are checked out as."""

    def __init__(self, spans: Mapping[bytes, tuple[Path, int, int]]) -> None:
        self._spans = dict(spans)  # content hash -> (file, offset, length)
        self._differ: set[Path] = set()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, repo: Repo, versions: Mapping[str, tuple[str, mf.Manifest]]) -> CheckedOut:
        """`versions`: version id -> (a path it is at, its manifest). Those the index holds
        at that path, in a regular file of the version's size, are read from the file."""
        if repo.worktree is None or not versions:
            return cls({})
        paths = {path for path, _ in versions.values()}
        # a path each, up to a command line's worth; the whole index beyond that
        spec = [f":(literal){p}" for p in paths] if len(paths) <= _PATHSPECS else []
        listing = repo.git_bytes("ls-files", "-s", "-z", "--", *spec)
        staged = {}  # path -> blob at stage 0 ("<mode> <oid> <stage>\t<path>")
        for entry in filter(None, listing.split(b"\0")):
            info, path = entry.split(b"\t", 1)
            _, oid, stage = info.split()
            if stage == b"0":
                staged[path.decode("utf-8", "surrogateescape")] = oid.decode()
        spans: dict[bytes, tuple[Path, int, int]] = {}
        for v, (path, m) in versions.items():
            if staged.get(path) != v:
                continue
            file = Path(repo.worktree, path)
            try:
                st = file.lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size == m.size:
                for c in m.chunks():
                    spans.setdefault(c.content_hash, (file, c.offset, c.length))
        return cls(spans)

    def read(self, h: bytes) -> bytearray | None:
        """The chunk's bytes, verified; None when no file holds them (decode it instead)."""
        span = self._spans.get(h)
        if span is None:
            return None
        file, offset, length = span
        with self._lock:
            if file in self._differ:
                return None
        buf = bytearray(length)
        if _read_at(file, offset, memoryview(buf)) and hashing.digest(buf) == h:
            return buf
        with self._lock:
            self._differ.add(file)
        return None


def _read_at(file: Path, offset: int, into: memoryview) -> bool:
    """Fill `into` from `file` at `offset`; False if the file is shorter or unreadable."""
    try:
        with open(file, "rb", buffering=0) as f:
            f.seek(offset)
            while into:
                n = f.readinto(into)
                if not n:
                    return False
                into = into[n:]
    except OSError:
        return False
    return True
