"""What the head sends a cluster node with a job: the code, the manifests, and where objects are.

A node has no clone of the repository. It gets:

- **the code**: the working tree's files except tracked models (the user's
  modules, mgit.toml, small data), as one zip named by its content hash,
  sent to each node once and unpacked there once (node.py);
- **each model as its manifests** (text, a few hundred bytes per tensor):
  the job names versions, the node needs their tensor objects;
- **where the objects are**: versions the repository's remote holds are
  fetched by the node from the remote, for those versions only: the head
  lists the remote's version refs once and names the refs each job needs
  (a version's, and its delta bases'), so a node runs one `git fetch` of
  exactly those, no listing and no lineage notes; a version the remote lacks
  (a cascade's fresh parents, anything not pushed) comes from the head as a
  git pack of just the objects its chunks read, with their delta bases.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from git_mgit import hashing
from git_mgit.console.progress import format_size
from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo
from git_mgit.lineage import contents
from git_mgit.lineage.api import Lineage
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer.fetch import version_id
from git_mgit.transfer.remotes import RemoteUnreachable, default_remote, list_versions
from git_mgit.transfer.versions import Published

MAX_CODE = 64 << 20  # the code sent to every node: models and datasets belong elsewhere


@dataclass(frozen=True)
class Code:
    digest: str  # names the folder a node unpacks it into
    data: bytes  # a zip of the files


def code(repo: Repo) -> Code:
    """The working tree's files (tracked or not, unless ignored) other than tracked models."""
    assert repo.worktree is not None
    listed = repo.git_bytes("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    paths = sorted({p.decode() for p in listed.split(b"\0") if p})
    attrs = repo.git_bytes("check-attr", "-z", "--stdin", "filter", input="\0".join(paths).encode())
    fields = attrs.split(b"\0")
    models = {fields[i].decode() for i in range(0, len(fields) - 2, 3) if fields[i + 2] == b"mgit"}
    buf = io.BytesIO()
    digest = hashlib.sha256()
    total = 0
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for rel in paths:
            file = repo.worktree / rel
            if rel in models or not file.is_file() or file.is_symlink():
                continue
            data = file.read_bytes()
            total += len(data)
            if total > MAX_CODE:
                raise MgitError(
                    f"the working tree's files besides models come to more than "
                    f"{format_size(MAX_CODE)} ({rel} and more), and every node gets a copy: "
                    "keep datasets out of the repository (or in .gitignore) and load them "
                    "from storage the nodes share"
                )
            digest.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
            zf.writestr(rel, data)
    return Code(digest.hexdigest()[:16], buf.getvalue())


@dataclass
class Shipment:
    """How a node gets one job's models: manifests by version, and where their objects are."""

    remote: dict[str, str] = field(default_factory=dict)  # manifest version -> its text
    refs: dict[str, str] = field(default_factory=dict)  # the remote's version refs they need
    packs: list[str] = field(default_factory=list)  # head-made packs, by manifest version


class Shipper:
    """The head's side: turns versions into manifests, and decides where each one's objects
    come from (the remote, listed once; else a pack from here, made once per version)."""

    def __init__(self, lin: Lineage) -> None:
        self.lin = lin
        self.store = ChunkStore(lin.repo)
        self.remote_url, self.published = _remote(lin.repo)
        self.from_head: set[str] = set()  # versions a node could not find on the remote

    def close(self) -> None:
        self.store.close()

    def model(self, version: str, shipment: Shipment) -> dict[str, str]:
        """The version's manifests (shard path -> text); where its objects are, into `shipment`."""
        v = self.lin.resolve(version)
        out = {}
        for rel, m in contents.manifests(self.lin.repo, self.store.reader, v.id, v.kind).items():
            rendered = m.render()
            text, vid = rendered.decode(), version_id(rendered)
            if self.remote_url and vid not in self.from_head and self.published.holds(vid):
                shipment.remote[vid] = text
                for ref in self.published.closure([vid], lambda _: False):
                    shipment.refs[ref.name] = ref.commit
            else:
                shipment.packs.append(vid)
            out[rel] = text
        return out

    def pack(self, vid: str) -> dict:
        """The objects a node needs to read manifest version `vid`: a git pack of each chunk's
        object and its delta bases, and which chunk each object holds."""
        data = self.store.reader.read(vid)
        if data is None or not mf.looks_like_manifest(data):
            raise MgitError(f"version {vid[:10]} is not here: run `git mgit fetch` first")
        filed: dict[str, str] = {}  # oid -> content hash (hex)
        seen: set[bytes] = set()  # chunks whose chains are in `filed`
        for c in mf.parse(bytes(data)).chunks():
            h: bytes | None = c.content_hash
            while h is not None and h not in seen:
                found = self.store.resolve(h)
                if found is None:
                    raise MgitError(
                        f"object {hashing.to_text(h)} of version {vid[:10]} is not here: "
                        "run `git mgit fetch` for it first"
                    )
                seen.add(h)
                filed[found.oid] = h.hex()
                h = found.base
        try:
            pack = self.lin.repo.git_bytes(
                "pack-objects", "--stdout", "-q", "--window=0",
                input="".join(f"{oid}\n" for oid in filed).encode(),
            )  # fmt: skip
        except GitError as exc:
            raise MgitError(f"packing version {vid[:10]} for the cluster failed: {exc}") from exc
        return {"pack": pack, "objects": [[h, oid] for oid, h in filed.items()]}


def _remote(repo: Repo) -> tuple[str | None, Published]:
    """The default remote's URL and the versions it holds (none when there is no remote)."""
    name = default_remote(repo)
    if name is None:
        return None, Published([])
    try:
        listing = list_versions(repo, name)
    except RemoteUnreachable:
        return None, Published([])
    url = repo.git("remote", "get-url", name)
    if "://" not in url and ":" not in url.split("/")[0]:
        url = Path(repo.cwd, url).resolve().as_uri()  # a path: absolute
    return url, Published.from_listing(listing)
