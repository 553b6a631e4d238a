"""git's configuration as git-lfs reads it: the committed `.lfsconfig` under git config.

git-lfs layers the repository's `.lfsconfig` (the working tree's file, else
the index's, else HEAD's) below everything `git config` knows, and takes only
a short list of harmless keys from it: a cloned file must never be able to
point credentials or commands anywhere else than an LFS URL.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from git_mgit.gitcmd import Repo, canonical, parse_config_list

LFSCONFIG = ".lfsconfig"
# git-lfs's config/git_fetcher.go: what a committed .lfsconfig may set.
_SAFE_KEYS = frozenset(
    {
        "lfs.allowincompletepush",
        "lfs.fetchexclude",
        "lfs.fetchinclude",
        "lfs.gitprotocol",
        "lfs.locksverify",
        "lfs.pushurl",
        "lfs.skipdownloaderrors",
        "lfs.url",
    }
)
_REMOTE_LFSURL = re.compile(r"remote\..+\.lfsurl")


@dataclass(frozen=True)
class LfsConfig:
    """Config values (last one wins), and where each came from (for `git mgit store`)."""

    values: dict[str, list[str]] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # key -> "git config" or ".lfsconfig"
    http: tuple[tuple[str, str], ...] = ()  # git config's http.* pairs, in order (httpconfig.py)

    def get(self, key: str) -> str | None:
        found = self.values.get(canonical(key))
        return found[-1] if found else None

    def where(self, key: str) -> str:
        return self.origins.get(canonical(key), "git config")

    def number(self, key: str, default: int, minimum: int) -> int:
        """An integer setting; git-lfs's rule: anything unparsable or too small is the default."""
        text = self.get(key)
        try:
            value = int(text) if text is not None else default
        except ValueError:
            return default
        return value if value >= minimum else default

    def items(self) -> Iterable[tuple[str, list[str]]]:
        return self.values.items()


def _safe(key: str) -> bool:
    return key in _SAFE_KEYS or bool(_REMOTE_LFSURL.fullmatch(key)) or key.endswith(".access")


def _list(cwd: Path, source: str, name: str) -> list[tuple[str, str]] | None:
    proc = subprocess.run(
        ["git", "config", "-z", "--list", source, name], cwd=cwd, capture_output=True, check=False
    )
    return parse_config_list(proc.stdout) if proc.returncode == 0 else None


def _lfsconfig(repo: Repo, cwd: Path) -> list[tuple[str, str]]:
    """The committed .lfsconfig's pairs: working tree file, else index, else HEAD (both of
    those asked in one `git cat-file`: most repositories have neither)."""
    names = [f"HEAD:{LFSCONFIG}"]
    if repo.worktree is not None:
        path = repo.worktree / LFSCONFIG
        if path.is_file():
            return _list(cwd, "--file", str(path)) or []
        names.insert(0, f":{LFSCONFIG}")
    asked = "".join(f"{name}\n" for name in names).encode()
    out = repo.git_bytes("cat-file", "--batch-check=%(objectname) %(objecttype)", input=asked)
    blobs = [line.split()[0] for line in out.decode().splitlines() if line.endswith(" blob")]
    return (_list(cwd, "--blob", blobs[0]) or []) if blobs else []


def load(repo: Repo) -> LfsConfig:
    """Everything git config says, over the safe keys of the committed .lfsconfig."""
    cwd = repo.cwd
    values: dict[str, list[str]] = {}
    origins: dict[str, str] = {}
    for key, value in _lfsconfig(repo, cwd):
        if _safe(key):
            values.setdefault(key, []).append(value)
            origins[key] = LFSCONFIG
    listed = repo.config_list()
    for key, value in listed:  # after .lfsconfig: git config wins (last value)
        values.setdefault(key, []).append(value)
        origins[key] = "git config"
    return LfsConfig(values, origins, tuple(p for p in listed if p[0].startswith("http.")))
