"""What a model version holds: its manifests, and what they cost in storage.

A file model's version is one manifest blob; a folder model's version is a
tree whose `*.safetensors` entries are manifests (the shards) beside plain
files (config, index). Everything here reads manifests only: no tensor data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.tracked import tracked_files
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.reader import ObjectReader

if TYPE_CHECKING:
    from git_mgit.lineage.api import Lineage
    from git_mgit.lineage.resolve import Version


def manifests(repo: Repo, reader: ObjectReader, oid: str, kind: str) -> dict[str, mf.Manifest]:
    """Relative path ("" for a file model) -> manifest, in path order."""
    if kind == "file":
        return {"": _manifest(reader, oid)}
    out = {}
    for entry in repo.git_bytes("ls-tree", "-r", "-z", oid).split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.decode("utf-8", "surrogateescape").partition("\t")
        _, kind_, blob = meta.split()
        if kind_ == "blob" and path.endswith(".safetensors"):
            out[path] = _manifest(reader, blob)
    return dict(sorted(out.items()))


def named_manifests(repo: Repo, reader: ObjectReader, v: Version) -> list[tuple[str, mf.Manifest]]:
    """A version's manifests, each with a name for messages: its path (and file of a folder)."""
    ms = manifests(repo, reader, v.id, v.kind)
    return [(f"{v.path or v.id[:10]}/{rel}".rstrip("/"), m) for rel, m in ms.items()]


def fetch_missing(lin: Lineage, refs: Iterable[str]) -> None:
    """Fetch, in one batch, what the versions `refs` name lack here (a partial clone).

    Commands that hand many versions to worker processes call this first, so the
    workers find everything here instead of each fetching on its own.
    """
    from git_mgit.transfer.fetch import ensure_local

    store = ChunkStore(lin.repo)
    try:
        wanted: list[tuple[str, mf.Manifest]] = []
        for ref in dict.fromkeys(refs):
            wanted += named_manifests(lin.repo, store.reader, lin.resolve(ref))
        ensure_local(store, wanted)
    finally:
        store.close()


def _manifest(reader: ObjectReader, oid: str) -> mf.Manifest:
    data = reader.read(oid)
    if data is None:
        raise MgitError(f"object {oid[:10]} is missing; run `git fetch` (or `git mgit fetch`)")
    if not mf.looks_like_manifest(data):
        raise MgitError(
            f"object {oid[:10]} is not a git-mgit manifest (committed before tracking?)"
        )
    return mf.parse(bytes(data))


def stored_size(store: ChunkStore, ms: dict[str, mf.Manifest]) -> tuple[int, int]:
    """(raw bytes, bytes its own objects take in git) over the manifests; shared chunks count once."""
    hashes = {c.content_hash for m in ms.values() for c in m.chunks()}
    stored = 0
    for h in hashes:
        where = store.locate(h)
        if where is not None:
            stored += where[1]
    return sum(m.size for m in ms.values()), stored


def versions_at(repo: Repo, folders: Iterable[str], rev: str) -> dict[str, str]:
    """version id -> path for every model a revision holds: tracked files and model folders."""
    folders = list(folders)
    reader = ObjectReader(repo.cwd)
    try:
        files = [f for f in tracked_files(repo, reader, rev) if f.manifest is not None]
    finally:
        reader.close()
    out = {f.blob: f.path for f in files if not any(f.path.startswith(d + "/") for d in folders)}
    for d in folders:
        tree = repo.git("rev-parse", "--verify", "--quiet", f"{rev}:{d}", check=False)
        if tree:
            out[tree] = d
    return out
