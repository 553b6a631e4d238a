"""Pointer files: what a pointer store's version ref files for each chunk, in git.

A chunk's object is filed one of two ways, both as text:

- `<64 hex hash>.lfs`: a Git LFS pointer (spec v1), so every LFS tool and host
  reads it as what it is; about 130 bytes:

      version https://git-lfs.github.com/spec/v1
      oid sha256:<64 hex>
      size <bytes>

- `<64 hex hash>.b64`: the object itself, base64 (RFC 4648, one line), where
  it is no larger than mgit.inlineSize: a bias or a norm costs a store two
  requests (upload and verify) and a clone one more, each a round trip to
  the host, for a few kilobytes that travel with the ref instead.

Both sit in the root of the version ref's tree (refs pushed before
2026-11-29 file pointers as `ab/cd/<64 hex hash>.lfs`: readers take the file
name wherever it is); the suffixes keep them apart from the objects that
refs and anchors file as `ab/cd/<64 hex hash>`.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from git_mgit.transfer.stores.blobs import Pointer

SPEC = "https://git-lfs.github.com/spec/v1"
SUFFIX = ".lfs"
INLINE_SUFFIX = ".b64"
_POINTER = re.compile(rb"version (\S+)\noid sha256:([0-9a-f]{64})\nsize (\d+)\n")


@dataclass(frozen=True)
class Inline:
    """A chunk's object filed in the version ref itself: the id of its text (`.b64`) blob,
    and the ref, for errors."""

    blob: str
    ref: str


def render(pointer: Pointer) -> bytes:
    return f"version {SPEC}\noid sha256:{pointer.oid}\nsize {pointer.size}\n".encode()


def parse(data: bytes) -> Pointer | None:
    """The pointer `data` spells, or None for anything else."""
    match = _POINTER.fullmatch(data)
    if match is None or match[1].decode() != SPEC:
        return None
    return Pointer(match[2].decode(), int(match[3]))


def render_inline(data: bytes) -> bytes:
    return base64.b64encode(data) + b"\n"


def parse_inline(text: bytes) -> bytes | None:
    """The object an inline file spells, or None where it is not strict base64."""
    try:
        return base64.b64decode(text.removesuffix(b"\n"), validate=True)
    except (binascii.Error, ValueError):
        return None


def chunk_of(name: str, suffix: str = SUFFIX) -> bytes | None:
    """The chunk hash a tree entry's file name files a pointer (or, with INLINE_SUFFIX, an
    object) for; None where it files nothing of the kind."""
    stem = name.removesuffix(suffix)
    if stem == name or len(stem) != 64:
        return None
    try:
        return bytes.fromhex(stem)
    except ValueError:
        return None
