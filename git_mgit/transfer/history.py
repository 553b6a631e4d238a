"""The model versions in commits: what a push publishes, a prefetch fetches, a prune keeps.

A version is a manifest blob; consecutive versions of a path follow each
other along first parents. Blobs are sniffed for the manifest header, as
tracked.reachable_manifests does, so history from before the attributes
changed is read the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.tracked import sniff_manifests
from git_mgit.store.reader import ObjectReader

ZERO = "0" * 40


@dataclass(frozen=True)
class Version:
    oid: str  # the manifest blob's object id: the version's name everywhere
    path: str  # a path it is at
    manifest: mf.Manifest


@dataclass
class Pushed:
    """What a push brings a remote: the versions its new commits add, how they follow each
    other, and the versions at the pushed tips."""

    versions: dict[str, Version] = field(default_factory=dict)  # added by the new commits
    edges: set[tuple[str, str]] = field(default_factory=set)  # (older, newer), same path
    tips: dict[str, Version] = field(default_factory=dict)  # at a pushed branch or tag tip
    by_tip: dict[str, dict[str, Version]] = field(
        default_factory=dict
    )  # tip commit -> its versions
    known: dict[str, Version] = field(default_factory=dict)  # every version seen, old ones too


def manifests(repo: Repo, reader: ObjectReader, paths: dict[str, str]) -> dict[str, Version]:
    """The manifests among `paths` (blob id -> path); damaged ones are left out."""
    return {
        oid: Version(oid, path, m)
        for oid, path, m in sniff_manifests(repo, reader, paths)
        if isinstance(m, mf.Manifest)
    }


def at_commits(repo: Repo, reader: ObjectReader, commits: Iterable[str]) -> dict[str, Version]:
    """Every version in the trees of `commits` (not their history)."""
    commits = list(dict.fromkeys(commits))
    if not commits:
        return {}
    walk = repo.git_bytes("rev-list", "--objects", "--no-walk", "--stdin", input=_lines(commits))
    paths: dict[str, str] = {}
    for line in walk.splitlines():
        oid, _, path = line.decode("utf-8", "surrogateescape").partition(" ")
        if path:
            paths.setdefault(oid, path)
    return manifests(repo, reader, paths)


def log_changes(repo: Repo, revs: Sequence[str]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(commit, [(old blob, new blob, path)]) per commit of `revs` (rev-list arguments),
    oldest first; merges against their first parent."""
    out = repo.git_bytes(
        "log",
        "-z",
        "--topo-order",
        "--reverse",
        "--no-renames",
        "--raw",
        "--no-abbrev",
        "--diff-merges=first-parent",
        "--format=%x01%H",
        "--stdin",
        input=_lines(revs),
    )
    commits: list[tuple[str, list[tuple[str, str, str]]]] = []
    tokens = out.split(b"\0")
    i = 0
    while i < len(tokens):
        token = tokens[i].lstrip(b"\n")
        i += 1
        if token.startswith(b"\x01"):
            commits.append((token[1:].decode(), []))
        elif token.startswith(b":") and commits and i < len(tokens):
            fields = token.decode().split()
            path = tokens[i].decode("utf-8", "surrogateescape")
            i += 1
            if len(fields) >= 4:
                commits[-1][1].append((fields[2], fields[3], path))
    return commits


def pushed(repo: Repo, reader: ObjectReader, tips: Sequence[str], exclude: Sequence[str]) -> Pushed:
    """The versions commits reachable from `tips` and not from `exclude` add, and those at `tips`."""
    out = Pushed()
    changes = log_changes(repo, [*tips, *(f"^{e}" for e in exclude)]) if tips else []
    blobs: dict[str, str] = {}
    for _, changed in changes:
        for old, new, path in changed:
            for oid in (old, new):
                if oid != ZERO:
                    blobs.setdefault(oid, path)
    out.known = manifests(repo, reader, blobs)
    for _, changed in changes:
        for old, new, _ in changed:
            if new in out.known:
                out.versions[new] = out.known[new]
                if old in out.known and old != new:
                    out.edges.add((old, new))
    for tip in dict.fromkeys(tips):
        out.by_tip[tip] = at_commits(repo, reader, [tip])
        out.tips.update(out.by_tip[tip])
    out.known.update(out.tips)
    return out


def recent(
    repo: Repo, reader: ObjectReader, refs: Sequence[str], per_path: int | None
) -> dict[str, Version]:
    """The `per_path` newest versions of every path in the history of `refs` (None: all)."""
    changes = log_changes(repo, refs) if refs else []
    newest_first: dict[str, list[str]] = {}
    blobs: dict[str, str] = {}
    for _, changed in reversed(changes):
        for _, new, path in changed:
            if new == ZERO:
                continue
            seen = newest_first.setdefault(path, [])
            if new not in seen and (per_path is None or len(seen) < per_path):
                seen.append(new)
                blobs.setdefault(new, path)
    return manifests(repo, reader, blobs)


def _lines(items: Iterable[str]) -> bytes:
    return "".join(f"{i}\n" for i in items).encode()
