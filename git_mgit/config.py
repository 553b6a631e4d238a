"""Settings read from git config (`mgit.*`), with the defaults DESIGN.md fixes.

mgit.chunkSize      bytes per chunk; a multiple of 8 (default 64 MiB)
mgit.maxChainDepth  longest delta chain a new object may extend (default 8)
mgit.gcGracePeriod  age below which unreferenced objects survive gc (default 14.days.ago)
"""

from __future__ import annotations

from dataclasses import dataclass

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo

DEFAULT_CHUNK_SIZE = 64 * 1024 * 1024
DEFAULT_MAX_DEPTH = 8
DEFAULT_GRACE = "14.days.ago"


@dataclass(frozen=True)
class Settings:
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_chain_depth: int = DEFAULT_MAX_DEPTH
    gc_grace: str = DEFAULT_GRACE


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    mult = units.get(text[-1:], 1)
    return int(text[:-1] if mult > 1 else text) * mult


def load(repo: Repo) -> Settings:
    """One `git config` call; bad values are a one-line error naming the key."""
    out = repo.git("config", "--get-regexp", r"^mgit\.", check=False)
    values = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        values[key.lower()] = value
    try:
        chunk = _size(values.get("mgit.chunksize", str(DEFAULT_CHUNK_SIZE)))
        depth = int(values.get("mgit.maxchaindepth", DEFAULT_MAX_DEPTH))
    except ValueError as exc:
        raise MgitError(f"git config mgit.*: {exc}; fix it with `git config --unset`") from exc
    if chunk < 4096 or chunk % 8:
        raise MgitError("git config mgit.chunkSize must be a multiple of 8 and at least 4096")
    if not 0 <= depth <= 255:
        raise MgitError("git config mgit.maxChainDepth must be between 0 and 255")
    return Settings(chunk, depth, values.get("mgit.gcgraceperiod", DEFAULT_GRACE))
