"""Where the repository's storage goes: by model, by tensor, by codec, by delta chain depth.

Each object is counted once, for the first model version (oldest first)
whose manifest reaches it, so the rows of each table add up to the total.
A model's `raw` is what its versions take as whole files (what git-lfs
stores); a tensor's or codec's `raw` is the decoded size of the objects
counted for it, so stored / raw is the compression they get.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from git_mgit.gitcmd import Repo
from git_mgit.lineage import contents, history
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import object_id


@dataclass
class Row:
    count: int = 0  # versions (models) or objects (tensors, codecs)
    raw: int = 0
    stored: int = 0

    def add(self, raw: int, stored: int) -> None:
        self.count += 1
        self.raw += raw
        self.stored += stored


@dataclass
class Usage:
    models: dict[str, Row] = field(default_factory=dict)  # by model path
    tensors: dict[tuple[str, str], Row] = field(default_factory=dict)  # (model path, tensor)
    codecs: dict[str, Row] = field(default_factory=dict)
    depths: Counter = field(default_factory=Counter)  # chain depth -> objects
    missing: int = 0  # objects a manifest names that are not here, nor on a remote
    remote_only: int = 0  # objects not here that a remote publishes

    @property
    def stored(self) -> int:
        return sum(r.stored for r in self.codecs.values())


def measure(
    repo: Repo,
    store: ChunkStore,
    folders: Iterable[str],
    revs: Iterable[str],
    on_remote: Callable[[str], bool] = lambda version: False,
) -> Usage:
    """Usage over the versions in `revs`; `on_remote(manifest blob id)` says which versions a
    remote publishes, so their objects that are not here count as remote-only."""
    hist = history.read(repo, folders, revs)
    out = Usage()
    seen: set[bytes] = set()
    for oid, sighting in sorted(hist.versions.items(), key=lambda kv: kv[1].time):
        model = out.models.setdefault(sighting.path, Row())
        found = contents.manifests(repo, store.reader, oid, sighting.kind)
        model.count += 1
        model.raw += sum(m.size for m in found.values())
        for rel, manifest in found.items():
            remote = None
            for chunk in manifest.chunks():
                h = chunk.content_hash
                if h in seen:
                    continue
                seen.add(h)
                located = store.locate(h)
                if located is None:
                    if remote is None:
                        remote = on_remote(object_id("blob", [manifest.render()]).hex())
                    if remote:
                        out.remote_only += 1
                    else:
                        out.missing += 1
                    continue
                header = store.level(h).header
                stored = located[1]
                model.stored += stored
                tensor = chunk.segment.name or f"<{chunk.segment.kind}>"
                key = (sighting.path, f"{rel}:{tensor}" if rel else tensor)
                out.tensors.setdefault(key, Row()).add(chunk.length, stored)
                out.codecs.setdefault(header.codec.name.lower(), Row()).add(chunk.length, stored)
                out.depths[header.depth] += 1
    return out
