"""The text git writes in a directly written model file's place.

It names the file and the manifest it stands for, and says what to run if it
is ever seen: git writes it, the filter overwrites it moments later. It is
never the file's content as far as the index is concerned: the filter changes
the file before git writes the index, so git's recorded stat data never
matches what is on disk afterwards until the real bytes are in place.
"""

from __future__ import annotations


def text(path: str, blob: str, size: int) -> bytes:
    """The placeholder for `path` (manifest blob `blob`), never `size` bytes long.

    Its length differs from the real file's, so a placeholder left behind can
    never pass for the file on size alone.
    """
    body = (
        f"git-mgit: {path} is being written directly from the object store (manifest {blob}).\n"
        f"If you can read this, the write did not finish: run `git mgit checkout -- {path}`.\n"
    ).encode()
    return body + b"\n" if len(body) == size else body


def holds(data: bytes, path: str, blob: str, size: int) -> bool:
    """Whether `data` is exactly the placeholder for this file."""
    return data == text(path, blob, size)
