"""Whether the content git streams to the clean filter is a file's, read as it comes.

The journal (journal.py) says what manifest a file git-mgit wrote directly
has, so that git's own refresh of it is answered without hashing gigabytes.
But git runs the clean filter for a path on content that is not that path's
file too: `git hash-object --path=P other`, `--stdin --path=P`, a merge's
renormalisation. Answering those from the journal recorded the file's model
for other bytes. So the stream is compared with the file block by block (a
memory compare, no hash) and, where they differ, cleaned as usual: the bytes
read before the first difference are the file's, so they are read again from
it, then the block that differed, then the rest of the stream.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, BinaryIO

_BLOCK = 1 << 20


def same_as_file(src: BinaryIO, path: Path) -> tuple[bool, BinaryIO]:
    """(True, src read to its end) if `src` holds `path`'s bytes; else (False, a stream of
    all `src` held, from its start)."""
    with open(path, "rb") as file:
        offset = 0
        while True:
            theirs = src.read(_BLOCK)
            ours = file.read(len(theirs) or 1)
            if theirs != ours:
                return False, _Replay(path, offset, theirs, src)
            if not theirs:
                return True, src
            offset += len(theirs)


class _Replay(io.RawIOBase):
    """A file's first `offset` bytes, then `held`, then the rest of `src`."""

    def __init__(self, path: Path, offset: int, held: bytes, src: BinaryIO) -> None:
        self._file: BinaryIO | None = open(path, "rb")  # noqa: SIM115 (closed once read)
        self._left = offset
        self._held = memoryview(held)
        self._src = src

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        if self._file is not None:
            n = self._file.readinto(out[: min(len(out), self._left)]) if self._left else 0
            self._left -= n
            if n:
                return n
            if self._left:  # the file shrank meanwhile: what git sent cannot be told
                raise OSError("the file changed while git sent its content")
            self._file.close()
            self._file = None
        if self._held:
            n = min(len(out), len(self._held))
            out[:n] = self._held[:n]
            self._held = self._held[n:]
            return n
        return self._src.readinto(out)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()
