"""Finding manifests: tracked files in the index or a revision, and every
manifest that any ref, reflog or index still reaches (what fsck verifies and
gc must keep).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import ANCHOR_PREFIX
from git_mgit.store.reader import ObjectReader

# Manifests are ~200 bytes per tensor; anything larger is not one.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class TrackedFile:
    path: str
    blob: str  # object id of what git stores for the path (normally a manifest)
    manifest: mf.Manifest | None  # None: stored as a plain blob (added before tracking)
    mode: str = "100644"


def filters(repo: Repo, paths: Iterable[str]) -> dict[str, str]:
    """Each path's filter attribute (`unspecified` when none): one `git check-attr` call."""
    paths = list(paths)
    if not paths:
        return {}
    out = repo.git_bytes(
        "check-attr",
        "-z",
        "--stdin",
        "filter",
        input=b"\0".join(p.encode("utf-8", "surrogateescape") for p in paths) + b"\0",
    )
    fields = out.split(b"\0")
    return {_name(fields[i]): fields[i + 2].decode() for i in range(0, len(fields) - 2, 3)}


def mgit_filtered(repo: Repo, paths: Iterable[str]) -> set[str]:
    """The paths whose current attributes say filter=mgit."""
    return {p for p, value in filters(repo, paths).items() if value == "mgit"}


def tracked_files(
    repo: Repo, reader: ObjectReader, rev: str | None = None, paths: Sequence[str] = ()
) -> list[TrackedFile]:
    """Files with filter=mgit in the index (rev=None) or in a revision's tree.

    `paths`: pathspecs relative to the worktree's top, to list only those.
    """
    spec = ["--", *paths] if paths else []
    if rev is None:  # "<mode> <oid> <stage>\t<path>": a conflicted path once per stage
        listing = repo.git_bytes("ls-files", "-s", "-z", *spec)
        fields = [(e.split(b"\t", 1), e.split()) for e in listing.split(b"\0") if e]
        entries = [(_name(n[1]), f[1].decode(), f[0].decode()) for n, f in fields]
    else:  # "<mode> <type> <oid>\t<path>"
        listing = repo.git_bytes("ls-tree", "-r", "-z", rev, *spec)
        fields = [(e.split(b"\t", 1), e.split()) for e in listing.split(b"\0") if e]
        entries = [
            (_name(n[1]), f[2].decode(), f[0].decode()) for n, f in fields if f[1] == b"blob"
        ]
    filtered = mgit_filtered(repo, [p for p, _, _ in entries])
    out = []
    for path, blob, mode in entries:
        if path in filtered:
            data = reader.read(blob)
            m = mf.parse(bytes(data)) if data is not None and mf.looks_like_manifest(data) else None
            out.append(TrackedFile(path, blob, m, mode))
    return out


# Everything a repository still needs: all refs but git-mgit's own, reflogs, index.
EVERYTHING = (
    "--reflog",
    "--indexed-objects",
    f"--exclude={ANCHOR_PREFIX}*",
    "--exclude=refs/notes/*",
    "--all",
)


def reachable_manifests(
    repo: Repo, reader: ObjectReader, revs: Sequence[str] = EVERYTHING
) -> Iterator[tuple[str, str, mf.Manifest | mf.ManifestError]]:
    """(blob id, a path it was seen at, manifest or its parse error) per reachable manifest.

    `revs` are rev-list arguments (default: everything the repository needs).
    Blobs are sniffed for the manifest header, so a manifest is found even if
    .gitattributes changed since it was committed.
    """
    walk = repo.git_bytes("rev-list", "--objects", *revs)
    paths: dict[str, str] = {}
    for line in walk.splitlines():
        oid, _, path = line.decode("utf-8", "surrogateescape").partition(" ")
        if path:
            paths.setdefault(oid, path)
    yield from sniff_manifests(repo, reader, paths)


def sniff_manifests(
    repo: Repo, reader: ObjectReader, paths: Mapping[str, str]
) -> Iterator[tuple[str, str, mf.Manifest | mf.ManifestError]]:
    """Of the objects in `paths` (object id -> a path), the manifests, as reachable_manifests."""
    for oid, kind, size in repo.batch_check(paths, "%(objectname) %(objecttype) %(objectsize)"):
        if kind == "blob" and len(mf.FIRST_LINE) <= int(size) <= MAX_MANIFEST_BYTES:
            data = reader.read(oid)
            if data is not None and mf.looks_like_manifest(data):
                try:
                    yield oid, paths[oid], mf.parse(bytes(data))
                except mf.ManifestError as exc:
                    yield oid, paths[oid], exc


def needed_hashes(store: ChunkStore, revs: Sequence[str] = EVERYTHING) -> dict[bytes, str]:
    """Chunk hashes the manifests reachable from `revs` use, plus their delta bases.

    Maps each hash to a path that uses it, for error messages.
    """
    needed: dict[bytes, str] = {}
    for _, path, m in reachable_manifests(store.repo, store.reader, revs):
        if isinstance(m, mf.Manifest):
            for c in m.chunks():
                needed.setdefault(c.content_hash, path)
    return with_bases(store, needed)


def with_bases(store: ChunkStore, needed: dict[bytes, str]) -> dict[bytes, str]:
    """`needed` plus every delta base on the chains reads of those chunks take."""
    needed = dict(needed)
    stack = [h for h in needed if store.locate(h)]
    while stack:
        h = stack.pop()
        base = store.chain_of(h)[0]
        if base is not None and base not in needed:
            needed[base] = needed[h]
            if store.locate(base):
                stack.append(base)
    return needed


def _name(path: bytes) -> str:
    """A path as git gives it, bytes that are not UTF-8 kept (surrogateescape), as the filter
    protocol's reader keeps them: the names must match."""
    return path.decode("utf-8", "surrogateescape")
