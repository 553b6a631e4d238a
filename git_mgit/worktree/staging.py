"""Large model files decoded while their objects download, so a clone's checkout overlaps
its fetch instead of following it.

A large file's smudge is delayed, and its objects are fetched in one batch when git
asks which blobs are available (filters/mgit_filter.py); git writes the empty
placeholder only after that. Here each object that arrives whole is decoded on a
thread of its own (verified, as every checkout is) into a staged copy of each file
that holds its chunk, under <git-dir>/mgit/staged/: the decoding and the writing
then run on the cores the download leaves idle, not after it. write.py fills in
what the staged copy lacks (chunks this clone had already, deltas) from the store
and puts it in the placeholder's place with one rename. Nothing here can fail a
checkout: an object that cannot be staged is simply decoded from the store later,
the usual way.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path

from git_mgit import codecs
from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf

from .write import presize, write_at

_AHEAD = 128 << 20  # bytes of objects waiting to be decoded; the download waits beyond
_FOLDER = "mgit/staged"


@dataclass
class Staged:
    """One file's staged copy: which chunks (by offset) hold their verified bytes."""

    path: str
    manifest: mf.Manifest
    file: Path
    fd: int
    done: set[int] = field(default_factory=set)

    def missing(self) -> list[mf.Chunk]:
        """The chunks still to write, in file order."""
        return [c for c in self.manifest.chunks() if c.offset not in self.done]

    def discard(self) -> None:
        """Close and remove the staged copy (whatever became of it)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.file.unlink(missing_ok=True)


class Staging:
    """The staged copies of one fetch's large files, filled as objects arrive (arrived())."""

    def __init__(self, repo: Repo, files: dict[str, mf.Manifest]) -> None:
        self.files: dict[str, Staged] = {}
        self._at: dict[bytes, list[tuple[Staged, mf.Chunk]]] = {}
        self._queue: queue.SimpleQueue[tuple[bytes, bytes | memoryview] | None] = (
            queue.SimpleQueue()
        )
        self._room = threading.Condition()
        self._waiting = 0  # bytes in the queue
        self._thread: threading.Thread | None = None
        folder = _folder(repo) if files else None
        if folder is None:
            return
        for n, (path, m) in enumerate(files.items()):
            staged = _create(folder / f"{os.getpid()}-{n}", path, m)
            if staged is None:
                break  # no room: write the files the usual way
            self.files[path] = staged
            for chunk in m.chunks():
                self._at.setdefault(chunk.content_hash, []).append((staged, chunk))
        if self.files:
            self._thread = threading.Thread(target=self._run, name="mgit-staging", daemon=True)
            self._thread.start()

    def arrived(self, content_hash: bytes, data: bytes | memoryview) -> None:
        """An object just downloaded and verified, filed as `content_hash` (on the
        download's thread: waits while the decoding is behind)."""
        if self._thread is None or content_hash not in self._at:
            return
        with self._room:  # one object at a time may exceed the bound on its own
            self._room.wait_for(lambda: not self._waiting or self._waiting + len(data) <= _AHEAD)
            self._waiting += len(data)
        self._queue.put((content_hash, data))

    def finish(self) -> dict[str, Staged]:
        """Wait for what arrived to be staged; the staged copies, by path."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        return self.files

    def _run(self) -> None:
        broken = False
        while (item := self._queue.get()) is not None:
            try:
                broken = broken or not self._stage(*item)
            except Exception:  # never the download's business; the store's copy says why later
                broken = True
            with self._room:
                self._waiting -= len(item[1])
                self._room.notify_all()

    def _stage(self, content_hash: bytes, data: bytes | memoryview) -> bool:
        """Decode one whole object into every place its chunk has; False once the staged
        copies cannot be written (a full disk): the rest is written later, as usual."""
        places = self._at[content_hash]
        pos = 0
        try:
            level = codecs.Level(codecs.BytesSource(data))
            hdr = level.header
            if hdr.codec.is_delta or hdr.content_hash != content_hash:
                return True  # a delta needs its base; a mislabelled object fails later, loudly
            if any(chunk.length != hdr.raw_len for _, chunk in places):
                return True
            for block in codecs.stream([codecs.ChunkDecoder([level])]):
                for staged, chunk in places:
                    write_at(staged.fd, block, chunk.offset + pos)
                pos += len(block)
        except OSError:
            return False
        except Exception:  # a damaged object: the store's copy is decoded later and says so
            return True
        for staged, chunk in places:
            staged.done.add(chunk.offset)
        return True


def _folder(repo: Repo) -> Path | None:
    """<git-dir>/mgit/staged, where a rename can reach the working tree."""
    if repo.worktree is None:
        return None
    folder = repo.git_dir / _FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.stat(folder).st_dev != os.stat(repo.worktree).st_dev:
            return None
    except OSError:
        return None
    remove_stale(repo)
    return folder


def remove_stale(repo: Repo) -> None:
    """Remove the staged copies of processes that are gone (a killed checkout's)."""
    try:
        for stale in (repo.git_dir / _FOLDER).iterdir():
            pid = stale.name.partition("-")[0]
            if pid.isdigit() and not _alive(int(pid)):
                stale.unlink(missing_ok=True)
    except OSError:  # no folder: nothing was ever staged
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _create(file: Path, path: str, m: mf.Manifest) -> Staged | None:
    """A staged copy, pre-sized (a full disk fails here, before anything is decoded)."""
    try:
        fd = os.open(file, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    staged = Staged(path, m, file, fd)
    try:
        presize(fd, m.size)
    except OSError:
        staged.discard()
        return None
    return staged
