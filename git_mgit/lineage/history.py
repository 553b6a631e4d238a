"""Model versions and implicit version edges, read from git history.

A model is a tracked file (filter=mgit) or a model folder (a directory that
holds `model.safetensors.index.json`, or one `mgit.toml` declares). Its
versions are the manifest blobs, or folder trees, it held along history; each
commit that changes a model path links the old version to the new one with an
implicit version edge. One `git log --raw -t` over every branch and tag finds
them all (merges compared with their first parent, so a merged model counts).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from git_mgit.gitcmd import Repo
from git_mgit.modelfile.tracked import mgit_filtered

INDEX_FILE = "model.safetensors.index.json"
_ZERO = "0" * 40
# Every branch, tag and remote-tracking ref; not git-mgit's own object or notes refs.
HISTORY_REVS = ("--exclude=refs/mgit/*", "--exclude=refs/notes/*", "--all")


@dataclass(frozen=True)
class Sighting:
    """Where and when a version was first committed."""

    path: str
    kind: str  # "file" | "folder"
    commit: str
    time: int


@dataclass
class History:
    versions: dict[str, Sighting] = field(default_factory=dict)
    # (previous version, next version, path, commit), newest commit first
    edges: list[tuple[str, str, str, str]] = field(default_factory=list)


def _changes(repo: Repo, revs: Iterable[str]) -> list[tuple[str, int, list[tuple[str, str, str]]]]:
    """(commit, time, [(old id, new id, path)]) for every commit, newest first."""
    out = repo.git_bytes(
        "log",
        "--raw",
        "-t",
        "--no-renames",
        "--no-abbrev",
        "-z",
        "--diff-merges=first-parent",
        "--format=%x01%H %ct",
        *revs,
        "--",
    ).decode("utf-8", "surrogateescape")
    commits = []
    for block in out.split("\x01")[1:]:
        head, _, rest = block.partition("\0")
        commit, stamp = head.split()
        tokens = rest.lstrip("\n").split("\0")
        changes = []
        for meta, path in zip(tokens[0::2], tokens[1::2], strict=False):
            fields = meta.split()
            if len(fields) == 5 and meta.startswith(":"):
                changes.append((fields[2], fields[3], path))
        commits.append((commit, int(stamp), changes))
    return commits


def folder_of(path: str, folders: set[str]) -> str | None:
    """The model folder holding `path`, if any (the innermost one)."""
    parts = path.split("/")
    for i in range(len(parts) - 1, 0, -1):
        head = "/".join(parts[:i])
        if head in folders:
            return head
    return None


def read(
    repo: Repo, declared_folders: Iterable[str] = (), revs: Iterable[str] = HISTORY_REVS
) -> History:
    """Every model version in the history of `revs`, with implicit version edges."""
    commits = _changes(repo, revs)
    folders = {f.rstrip("/") for f in declared_folders}
    touched: set[str] = set()
    for _, _, changes in commits:
        for _, _, path in changes:
            touched.add(path)
            if path == INDEX_FILE or path.endswith("/" + INDEX_FILE):
                folders.add(path.rpartition("/")[0])
    files = {p for p in mgit_filtered(repo, touched) if folder_of(p, folders) is None}
    history = History()
    for commit, stamp, changes in commits:  # newest first: the last sighting is the first
        for old, new, path in changes:
            kind = "file" if path in files else "folder" if path in folders else None
            if kind is None or new == _ZERO:
                continue
            history.versions[new] = Sighting(path, kind, commit, stamp)
            if old != _ZERO and old != new:
                history.edges.append((old, new, path, commit))
    return history
