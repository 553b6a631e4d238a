"""Settings read from git config (`mgit.*`), with the defaults DESIGN.md fixes.

mgit.chunkSize      bytes per chunk; a multiple of 8 (default 64 MiB)
mgit.maxObjectSize  no object may be larger (default 95m, below GitHub's 100 MB file limit)
mgit.maxChainDepth  longest delta chain a new object may extend (default 8)
mgit.gcGracePeriod  age below which unreferenced objects survive gc (default 14.days.ago)
mgit.maxPushSize    most one push may send (default 1.5g, below GitHub's 2 GB push limit);
                    objects follow the smaller of it and mgit.maxObjectSize
mgit.fetchBudget    a version fetches at most this times its size, as `git add` stores it and
                    as a push publishes it (default 2)
mgit.pruneKeep      checkouts younger than this keep their objects in prune (default 7.days.ago)
mgit.directSize     model files from this size up are written around git's buffer (default
                    16m; 0: never)
mgit.inlineSize     a pointer store (Git LFS, S3) files objects of at most this size in the
                    version ref, as text, instead of sending each to the store (default 16k;
                    0: never; at most 256k)

Sizes take git's size syntax (a number with an optional k, m or g suffix),
and may have a fraction (`1.5g`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo

DEFAULT_CHUNK_SIZE = 64 * 1024 * 1024
DEFAULT_MAX_OBJECT = 95 * 1024 * 1024
DEFAULT_MAX_DEPTH = 8
DEFAULT_GRACE = "14.days.ago"
DEFAULT_MAX_PUSH = 3 * 512 * 1024 * 1024
DEFAULT_FETCH_BUDGET = 2.0
DEFAULT_PRUNE_KEEP = "7.days.ago"
# From here up the direct path beats git's buffer on a warm checkout (docs/benchmarks.md,
# "Checking out through git's buffer or around it"; even at 8 MiB, 2 MiB within noise).
DEFAULT_DIRECT_SIZE = 16 * 1024 * 1024
MIN_DIRECT_SIZE = 1024 * 1024  # below this git's buffer costs nothing worth a placeholder
# A bias or a norm (fp32, up to 4096 wide) costs a store two requests and a clone one,
# each a round trip to the host; in git it costs 4/3 of its bytes (docs/storage.md).
DEFAULT_INLINE_SIZE = 16 * 1024
MAX_INLINE_SIZE = 256 * 1024  # its text stays far below the Hub's 1 MB (binary) and 10 MiB
# Room left under mgit.maxObjectSize for an object's header: at most ~200 bytes
# and 5 per MiB frame of each plane (under 1 KiB for a 95 MB chunk); this leaves
# 4 KiB and 64 bytes per MiB. A chunk is at most its object's payload: frames
# that do not compress are stored raw, never larger.
HEADER_ROOM = 4096
HEADER_ROOM_PER_MIB = 64
_MIB = 1 << 20
_MIN_OBJECT = 16 * 1024


@dataclass(frozen=True)
class Settings:
    chunk_size: int = DEFAULT_CHUNK_SIZE  # as cut: never above what max_object_size allows
    max_chain_depth: int = DEFAULT_MAX_DEPTH
    gc_grace: str = DEFAULT_GRACE
    max_object_size: int = DEFAULT_MAX_OBJECT
    max_push_size: int = DEFAULT_MAX_PUSH
    fetch_budget: float = DEFAULT_FETCH_BUDGET
    prune_keep: str = DEFAULT_PRUNE_KEEP
    direct_size: int = DEFAULT_DIRECT_SIZE  # checked out around git's buffer from here up; 0: never
    inline_size: int = DEFAULT_INLINE_SIZE  # pointer stores: objects filed in git up to this


T = TypeVar("T")

_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmg]?)", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in git's size syntax (`512`, `64m`, `1.5g`); ValueError when it is not one."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a size (a number, optionally followed by k, m or g)")
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(float(match[1]) * units[match[2].lower()])


def chunk_limit(max_object_size: int) -> int:
    """The largest chunk whose object stays within max_object_size (whole 4 KiB pages)."""
    room = HEADER_ROOM + HEADER_ROOM_PER_MIB * (max_object_size // _MIB)
    return (max_object_size - room) // 4096 * 4096


def load(repo: Repo) -> Settings:
    """From the process's one read of git config; bad values are a one-line error naming
    the key."""
    values = {k: v for k, v in repo.config_list() if k.startswith("mgit.")}

    def read(key: str, parse: Callable[[str], T], default: object) -> T:
        try:
            return parse(values.get(key.lower(), str(default)))
        except ValueError as exc:
            raise MgitError(
                f"git config {key}: {exc}; fix it with `git config --unset {key}`"
            ) from exc

    chunk = read("mgit.chunkSize", parse_size, DEFAULT_CHUNK_SIZE)
    max_object = read("mgit.maxObjectSize", parse_size, DEFAULT_MAX_OBJECT)
    depth = read("mgit.maxChainDepth", int, DEFAULT_MAX_DEPTH)
    max_push = read("mgit.maxPushSize", parse_size, DEFAULT_MAX_PUSH)
    budget = read("mgit.fetchBudget", float, DEFAULT_FETCH_BUDGET)
    direct = read("mgit.directSize", parse_size, DEFAULT_DIRECT_SIZE)
    inline = read("mgit.inlineSize", parse_size, DEFAULT_INLINE_SIZE)
    if chunk < 4096 or chunk % 8:
        raise MgitError("git config mgit.chunkSize must be a multiple of 8 and at least 4096")
    if max_object < _MIN_OBJECT:
        raise MgitError("git config mgit.maxObjectSize must be at least 16k")
    if not 0 <= depth <= 255:
        raise MgitError("git config mgit.maxChainDepth must be between 0 and 255")
    # A push setting never breaks `git add`: no object may exceed what one push can carry.
    max_object = min(max_object, max(max_push, _MIN_OBJECT))
    if budget < 1:
        raise MgitError("git config mgit.fetchBudget must be at least 1 (a version's own size)")
    if direct and direct < MIN_DIRECT_SIZE:
        raise MgitError("git config mgit.directSize must be 0 (never) or at least 1m")
    if inline > MAX_INLINE_SIZE:
        raise MgitError("git config mgit.inlineSize must be at most 256k (0: never)")
    return Settings(
        chunk_size=min(chunk, chunk_limit(max_object)),
        max_chain_depth=depth,
        gc_grace=values.get("mgit.gcgraceperiod", DEFAULT_GRACE),
        max_object_size=max_object,
        max_push_size=max_push,
        fetch_budget=budget,
        prune_keep=values.get("mgit.prunekeep", DEFAULT_PRUNE_KEEP),
        direct_size=direct,
        inline_size=inline,
    )
