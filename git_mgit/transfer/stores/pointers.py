"""Pointer stores: the objects' bytes in a blob store (Git LFS, S3), pointers in git.

Publishing a version: its objects are uploaded first (the blob store is
asked which it lacks: nothing is sent twice), then its version ref is pushed
as a commit whose tree files a pointer per chunk (pointer.py) and whose
message ends with `store <url>`: the ref says where its bytes are, so any
clone fetches them with nothing configured, and a history whose versions
went to different stores (before and after a migration) still resolves.
Here, the objects stay anchored (refs/mgit/objects/) and the version ref
points at the pointer commit, as on the remote.

Fetching (resolve): after git brought the version refs, the pointers of the
chunks this clone lacks are downloaded in one batch per store, each object
checked against its SHA-256 before it is written into a new pack, which is
anchored; what was verified before a failure is kept.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

from git_mgit.gitcmd import Repo
from git_mgit.progress import Progress
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import ANCHOR_PREFIX
from git_mgit.store.packwriter import PackWriter, built
from git_mgit.transfer.publish import Written
from git_mgit.transfer.stores import pointer
from git_mgit.transfer.stores.base import Sent, Store
from git_mgit.transfer.stores.blobs import BlobStore, Pieces, Pointer
from git_mgit.transfer.stores.choice import RECORD_REF, parse_record, record_text
from git_mgit.transfer.stores.gitpush import push, push_refs
from git_mgit.transfer.stores.registry import blob_store
from git_mgit.transfer.versions import VersionRef


class PointerStore(Store):
    def publish(
        self,
        store: ChunkStore,
        written: Sequence[Written],
        listing: dict[str, str],
        gone: Sequence[str],
        limit: int,
    ) -> Sent:
        repo, url = self.repo, self.choice.url
        read = ObjectBytes(store)
        sizes = {oid: size for w in written for oid, size in w.objects.values()}
        pointers: dict[str, Pointer] = {}
        by_pointer: dict[Pointer, str] = {}
        sent = Sent()
        blobs = blob_store(repo, self.remote, url)
        try:
            progress = Progress(f"git-mgit: uploading to {blobs.describe()}", sum(sizes.values()))

            def moved(n: int) -> None:
                sent.bytes += n
                progress.update(n)

            def hashed() -> Iterator[Pointer]:
                for oid, p in read.pointers(sorted(sizes)):
                    pointers[oid] = p
                    by_pointer.setdefault(p, oid)
                    yield p

            stream = hashed()
            try:
                sent.uploaded = blobs.upload(stream, lambda p: read.bytes(by_pointer[p]), moved)
            finally:
                progress.finish()
            for _ in stream:  # every pointer is filed below, even one a store never asked for
                pass
            read.forget(pointers)  # what the store held was hashed, not sent: its pages stay
        finally:
            blobs.close()
        _point(repo, written, pointers, url)
        specs = [w.ref.name for w in written]
        if RECORD_REF not in listing and not self.choice.reason.startswith("the remote records"):
            record = anchors.commit_blobs(repo, [], record_text(url))
            repo.git("update-ref", RECORD_REF, record)
            specs.append(RECORD_REF)
        push_refs(repo, self.remote, specs)
        if gone:
            push(repo, self.remote, [f":{name}" for name in gone])
        return sent


def _point(repo: Repo, written: Sequence[Written], pointers: dict[str, Pointer], url: str) -> None:
    """Write each version's pointer commit and one anchor of all their objects; point the
    version refs here at the pointer commits (one transaction)."""
    lines = []
    with PackWriter(repo.objects_dir) as pack:
        files = {oid: pack.add("blob", [pointer.render(p)]) for oid, p in pointers.items()}
        for w in written:
            entries = sorted((h, files[oid]) for h, (oid, _) in w.objects.items())
            message = f"{w.ref.message}\nstore {url}\n"
            commit = anchors.write_anchor(
                pack, entries, timestamp=0, message=message, suffix=pointer.SUFFIX
            )
            w.ref = VersionRef(w.ref.version, w.ref.bases, commit)
            lines.append(f"update {w.ref.name} {commit}\n")
        held = sorted(
            {(h, bytes.fromhex(oid)) for w in written for h, (oid, _) in w.objects.items()}
        )
        anchor = anchors.write_anchor(pack, held)
        pack.finish()
    lines.append(f"update {ANCHOR_PREFIX}{anchor} {anchor}\n")
    repo.git("update-ref", "--stdin", input="".join(lines).encode())


class ObjectBytes:
    """Object bytes for hashing and uploading, from any thread."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self.lock = threading.Lock()

    def bytes(self, oid: str, keep: bool = False) -> Pieces:
        """The object's bytes, not copied when a pack of ours holds them as stored blocks;
        their pages are let go once they were read whole, unless the caller `keep`s them
        for a second reading (hashed now, sent next)."""
        packs = self.store.packs
        views = packs.pieces(oid)  # thread-safe: only git cat-file needs the lock
        if views is None:
            with self.lock:
                data = self.store.reader.read(oid)
            if data is None:
                raise FileNotFoundError(f"object {oid} is not in this clone")
            return Pieces([memoryview(data)])
        return Pieces(views, None if keep else functools.partial(packs.forget, oid))

    def pointer(self, oid: str) -> Pointer:
        return Pointer.of(self.bytes(oid, keep=True))

    def forget(self, oids: Iterable[str]) -> None:
        """Let the pages of these objects go, where still kept since they were hashed."""
        for oid in oids:
            self.store.packs.forget(oid)

    def pointers(self, oids: Iterable[str]) -> Iterator[tuple[str, Pointer]]:
        """Each object with its pointer, in order, as they are hashed on git-mgit's cores
        (hashlib lets go of the GIL), a few objects ahead of the caller."""
        from git_mgit import cores
        from git_mgit.codecs.workers import ordered  # the codecs' pool, not imported sooner

        oids = list(oids)
        jobs = (functools.partial(self.pointer, oid) for oid in oids)
        return zip(oids, ordered(jobs, cores.available()), strict=True)

    def holder(self, h: bytes, p: Pointer) -> tuple[str, int] | None:
        """(oid, size) of the object here that holds chunk `h` as the bytes `p` names."""
        for oid, size, _ in self.store.holders(h):
            if size == p.size and self.pointer(oid) == p:
                return oid, size
        return None


def pointed(repo: Repo, refs: Iterable[VersionRef]) -> dict[str, dict[bytes, Pointer]]:
    """Store URL -> {chunk hash: pointer} over the pointer refs among `refs` (here)."""
    refs = [r for r in refs if r.commit]
    out: dict[str, dict[bytes, Pointer]] = defaultdict(dict)
    for ref, body in zip(refs, repo.cat_blobs([r.commit for r in refs]), strict=True):
        url = parse_record(body.decode("utf-8", "replace")) if body else None
        if url is None:
            continue  # a ref of the refs store: git brought its objects
        listing = repo.git("ls-tree", "-r", ref.commit).splitlines()
        files = [(line.split()[2], line.rsplit("\t", 1)[1].rsplit("/", 1)[-1]) for line in listing]
        named = [(oid, pointer.chunk_of(name)) for oid, name in files]
        named = [(oid, h) for oid, h in named if h is not None]
        for (_, h), data in zip(named, repo.cat_blobs([o for o, _ in named]), strict=True):
            p = pointer.parse(data) if data is not None else None
            if p is not None:
                out[url].setdefault(h, p)
    return out


def resolve(store: ChunkStore, remote: str, refs: Iterable[VersionRef]) -> int:
    """Download what the pointer refs among `refs` file and this clone lacks; bytes fetched.

    Raises BlobStoreError (one line, naming the store) when a store cannot serve them.
    """
    repo = store.repo
    came = 0
    for url, chunks in pointed(repo, refs).items():
        wanted: dict[Pointer, list[bytes]] = defaultdict(list)
        for h, p in chunks.items():
            if not store.has(h):
                wanted[p].append(h)
        if not wanted:
            continue
        blobs = blob_store(repo, remote, url)
        try:
            came += _download(repo, blobs, wanted)
        finally:
            blobs.close()
        store.invalidate()
    return came


def _download(repo: Repo, blobs: BlobStore, wanted: dict[Pointer, list[bytes]]) -> int:
    """Verified objects into one pack, anchored; kept up to a failure, which is raised."""
    got: list[tuple[bytes, bytes]] = []
    came = 0
    progress = Progress(
        f"git-mgit: downloading from {blobs.describe()}", sum(p.size for p in wanted)
    )
    # told its count (every object and their anchor), the pack is hashed as it is written,
    # each entry framed on the cores while the one before is hashed and written
    count = len(wanted) + anchors.anchor_size(h for hs in wanted.values() for h in hs)
    with PackWriter(repo.objects_dir, expected=count) as pack:
        try:
            arrived = blobs.download(sorted(wanted), progress.update)
            for p, entry in built((p, "blob", data) for p, data in arrived):
                oid = pack.add_entry(entry)
                got.extend((h, oid) for h in wanted[p])
                came += p.size
        finally:
            progress.finish()
            commit = anchors.write_anchor(pack, sorted(got)) if got else None
            pack.finish()  # nothing added: the empty pack is discarded
            if commit is not None:
                anchors.set_ref(repo, commit)
    return came
