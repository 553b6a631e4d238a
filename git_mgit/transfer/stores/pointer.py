"""Pointer files: what a pointer store's version ref files for each chunk, in git.

The bytes are a Git LFS pointer (spec v1), so every LFS tool and host reads
them as what they are, and each is about 130 bytes of text:

    version https://git-lfs.github.com/spec/v1
    oid sha256:<64 hex>
    size <bytes>

A version ref's tree files the pointer of chunk `<hash>` as `<64 hex hash>.lfs`
in its root (refs pushed before 2026-11-29 file it as `ab/cd/<64 hex hash>.lfs`:
readers take the file name wherever it is); the suffix keeps pointers apart from
the objects that refs and anchors file as `ab/cd/<64 hex hash>`.
"""

from __future__ import annotations

import re

from git_mgit.transfer.stores.blobs import Pointer

SPEC = "https://git-lfs.github.com/spec/v1"
SUFFIX = ".lfs"
_POINTER = re.compile(rb"version (\S+)\noid sha256:([0-9a-f]{64})\nsize (\d+)\n")


def render(pointer: Pointer) -> bytes:
    return f"version {SPEC}\noid sha256:{pointer.oid}\nsize {pointer.size}\n".encode()


def parse(data: bytes) -> Pointer | None:
    """The pointer `data` spells, or None for anything else."""
    match = _POINTER.fullmatch(data)
    if match is None or match[1].decode() != SPEC:
        return None
    return Pointer(match[2].decode(), int(match[3]))


def chunk_of(name: str) -> bytes | None:
    """The chunk hash a tree entry's file name files a pointer for (None: not a pointer)."""
    stem = name.removesuffix(SUFFIX)
    if stem == name or len(stem) != 64:
        return None
    try:
        return bytes.fromhex(stem)
    except ValueError:
        return None
