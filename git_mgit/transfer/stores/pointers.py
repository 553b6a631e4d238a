"""Pointer stores: the objects' bytes in a blob store (Git LFS, S3), pointers in git.

Publishing a version: its objects are uploaded first, beginning while the
push still writes them (upload.py; the blob store is asked which it lacks:
nothing is sent twice), then its version ref is pushed (a push begun while
the last objects upload, which sends once they are in: gitpush.Gate)
as a commit whose tree files a pointer per chunk, or the object itself as
text where it is no larger than mgit.inlineSize (pointer.py), and whose
message ends with `store <url>`: the ref says where its bytes are, so any
clone fetches them with nothing configured, and a history whose versions
went to different stores (before and after a migration) still resolves.
Here, the version ref points at the pointer commit, as on the remote; the
objects a push encoded were sent from memory and are not kept (the chunks
`git add` wrote are), those a migration sends were fetched and stay
anchored.

Fetching (resolve): after git brought the version refs, the pointers of the
chunks this clone lacks are downloaded in one batch per store, each object
checked against its SHA-256 before it is written into a new pack, which is
anchored, beside the objects the refs file inline (decoded from their text);
what was verified before a failure is kept. A caller may watch the objects
as they arrive (`arrived`: a checkout decodes them meanwhile).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from git_mgit import hashing
from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.store import anchors
from git_mgit.store.anchors import BLOB
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import DIR_MODE, tree_entries
from git_mgit.store.lookup import RECORD_REF
from git_mgit.store.packwriter import PackWriter, built
from git_mgit.transfer.stores import pointer
from git_mgit.transfer.stores.base import Sent, Store
from git_mgit.transfer.stores.blobs import BlobStore, Data, Pointer
from git_mgit.transfer.stores.choice import Choice, parse_record, record_text
from git_mgit.transfer.stores.gitpush import Gate, push, push_refs
from git_mgit.transfer.stores.objectbytes import ObjectBytes
from git_mgit.transfer.stores.pointer import Inline
from git_mgit.transfer.stores.registry import blob_store
from git_mgit.transfer.versions import VersionRef

Arrived = Callable[[bytes, Data], None]  # (chunk hash, the object filing it, verified)

if TYPE_CHECKING:  # a fetch resolves pointers without the push's encoder and uploads
    from git_mgit.transfer.publish import Receiver, Written
    from git_mgit.transfer.stores.registry import Opening
    from git_mgit.transfer.stores.upload import Upload


class PointerStore(Store):
    _upload: Upload | None = None  # while sending()

    def __init__(
        self, repo: Repo, remote: str, choice: Choice, opening: Opening | None = None
    ) -> None:
        super().__init__(repo, remote, choice)
        self._opening = opening  # the blob store, opened while the push listed the remote

    @contextmanager
    def sending(
        self, store: ChunkStore, there: Mapping[bytes, Pointer] | None = None
    ) -> Iterator[Receiver]:
        """Uploads begin with the first objects written (on a thread of their own); a
        chunk `there` names is filed under its pointer (a checkpoint's frozen layers:
        neither encoded again nor sent); objects up to mgit.inlineSize are filed in git."""
        from git_mgit import config
        from git_mgit.transfer.stores.upload import Upload

        inline = config.load(self.repo).inline_size
        self._upload = Upload(
            self.repo, self.remote, self.choice.url, store, self._opening, there, inline
        )
        try:
            yield self._upload
        finally:
            self._upload.cancel()  # nothing left to stop once publish() finished it
            self._upload = None

    def publish(
        self,
        store: ChunkStore,
        written: Sequence[Written],
        listing: dict[str, str],
        gone: Sequence[str],
        limit: int,
    ) -> Sent:
        if self._upload is None:  # not begun while the objects were written (a migration)
            with self.sending(store):
                return self.publish(store, written, listing, gone, limit)
        repo, url, upload = self.repo, self.choice.url, self._upload
        upload.hand_over(o for w in written for o in w.objects.values())
        upload.hashed()  # the pointers are known before the last bytes are sent
        _pointer_commits(repo, written, upload.pointers, upload.inline, url)
        specs = {w.ref.name: w.ref.commit for w in written}
        if RECORD_REF not in listing and not self.choice.reason.startswith("the remote records"):
            specs[RECORD_REF] = anchors.commit_blobs(repo, [], record_text(url))
        # git connects and lists the remote while the rest uploads; it sends once they are in
        gate = Gate.begin(repo, self.remote, [f"+{c}:{name}" for name, c in specs.items()])
        lines = [f"update {name} {commit}\n" for name, commit in specs.items()]
        try:
            sent = upload.wait()
            repo.git(
                "update-ref", "--stdin", input="".join([*lines, *repo.deletions(gone)]).encode()
            )
        except BaseException:
            if gate is not None:
                gate.shut()
            raise
        first = gate.open if gate is not None else None
        push_refs(repo, self.remote, list(specs), first=first, before=listing)
        if gone:
            push(repo, self.remote, [f":{name}" for name in gone])
        return sent


def _pointer_commits(
    repo: Repo,
    written: Sequence[Written],
    pointers: dict[str, Pointer],
    inline: dict[str, bytes],
    url: str,
) -> None:
    """Write each version's pointer commit (w.ref.commit), filing each chunk's pointer, or
    its object as text where it is `inline`; the refs are set once the store holds the
    rest. Their objects need no anchor of their own: a push keeps none of those it
    encoded, and the rest were anchored where they were written (by `git add`, or by the
    fetch of a migration)."""
    with PackWriter(repo.objects_dir) as pack:
        files = {
            **{
                oid: (pointer.SUFFIX, pack.add("blob", [pointer.render(p)]))
                for oid, p in pointers.items()
            },
            **{
                oid: (pointer.INLINE_SUFFIX, pack.add("blob", [pointer.render_inline(d)]))
                for oid, d in inline.items()
            },
        }
        for w in written:
            entries = [
                (BLOB, (h.hex() + files[oid][0]).encode(), files[oid][1])
                for h, (oid, _) in w.objects.items()
            ]
            commit = anchors.write_flat(pack, entries, f"{w.ref.message}\nstore {url}\n")
            w.ref = VersionRef(w.ref.version, w.ref.bases, commit)
        pack.finish()


def pointed(repo: Repo, refs: Iterable[VersionRef]) -> dict[str, dict[bytes, Pointer | Inline]]:
    """Store URL -> {chunk hash: its pointer, or its object filed inline} over the pointer
    refs among `refs` (here; the first ref to file a chunk names it). Trees are read a level
    at a time for every ref at once, through the repository's kept `git cat-file`: a flat
    tree, or the ab/cd/ fan-out of refs pushed before 2026-11-29."""
    refs = [r for r in refs if r.commit]
    level: list[tuple[int, str, str]] = []  # (ref's place, its store URL, a tree to read)
    for i, body in enumerate(repo.cat_blobs([r.commit for r in refs])):
        url = parse_record(body.decode("utf-8", "replace")) if body else None
        if url is not None and body is not None and body.startswith(b"tree "):
            level.append((i, url, body[5:45].decode("ascii", "replace")))  # else a refs store's
    files: list[tuple[int, str, bytes, str]] = []  # (place, URL, chunk hash, pointer blob)
    found: list[tuple[int, str, bytes, Pointer | Inline]] = []  # (place, URL, hash, filing)
    for _ in range(3):  # the root; a fanned-out ref's ab/ and ab/cd/ trees
        below: list[tuple[int, str, str]] = []
        for (i, url, t), tree in zip(level, repo.cat_blobs([t for *_, t in level]), strict=True):
            for mode, name, oid in _entries(refs[i], t, tree or b""):
                text = name.decode("ascii", "replace")
                if mode == DIR_MODE:
                    below.append((i, url, oid))
                elif (h := pointer.chunk_of(text)) is not None:
                    files.append((i, url, h, oid))
                elif (h := pointer.chunk_of(text, pointer.INLINE_SUFFIX)) is not None:
                    found.append((i, url, h, Inline(oid, refs[i].name)))
                else:  # a later git-mgit's filing: read as missing, it would hide why
                    raise _newer(refs[i], repr(text))
        level = below
    if level:  # folders deeper than any layout this git-mgit wrote
        raise _newer(refs[level[0][0]], "folders below ab/cd/")
    bodies = repo.cat_blobs([f[3] for f in files])
    for (i, url, h, oid), data in zip(files, bodies, strict=True):
        p = pointer.parse(data) if data is not None else None
        if p is None:  # read as absent, the chunk would surface as `no remote has them`
            spec = data.split(b"\n", 1)[0] if data is not None else b""
            if spec.startswith(b"version ") and spec != b"version " + pointer.SPEC.encode():
                raise _newer(refs[i], f"a pointer of {spec[8:80].decode('utf-8', 'replace')!r}")
            raise MgitError(
                f"version ref {refs[i].name}: the pointer it files for chunk "
                f"{hashing.to_text(h)} is {'damaged' if data else 'missing'} (blob {oid}); "
                "run `git fsck`, and fetch the ref again (`git mgit fetch`)"
            )
        found.append((i, url, h, p))
    out: dict[str, dict[bytes, Pointer | Inline]] = defaultdict(dict)
    for _, url, h, filing in sorted(found, key=lambda f: f[0]):
        out[url].setdefault(h, filing)
    return out


def _newer(ref: VersionRef, what: str) -> MgitError:
    return MgitError(
        f"version ref {ref.name} files {what}, which this git-mgit cannot read (a newer one "
        "pushed it): upgrade git-mgit (pip install -U git-mgit) and run the command again"
    )


def _entries(ref: VersionRef, tree: str, body: bytes) -> list[tuple[str, bytes, str]]:
    """A pointer ref's tree, read; one line naming the ref where it is not a tree (a remote
    sent a damaged object: git fetches without checking objects unless transfer.fsckObjects)."""
    try:
        return list(tree_entries(body))
    except (ValueError, IndexError) as exc:
        raise MgitError(
            f"version ref {ref.name}: its tree {tree} is damaged ({exc}); "
            "run `git fsck`, and fetch the ref again (`git mgit fetch`)"
        ) from exc


def resolve(
    store: ChunkStore,
    remote: str,
    refs: Iterable[VersionRef],
    exact: bool = False,
    arrived: Arrived | None = None,
) -> int:
    """Download what the pointer refs among `refs` file and this clone lacks; bytes fetched.

    A chunk this clone has in any form is not downloaded, unless `exact`: then the very
    objects the pointers name are (a clone that pushed a version has the chunks `git
    add` wrote, not the whole objects the push sent; a migration sends those).
    Raises BlobStoreError (one line, naming the store) when a store cannot serve them.
    `arrived` is told of each object as it comes, on the download's thread.
    """
    repo = store.repo
    came = 0
    here = ObjectBytes(store)

    def lacks(h: bytes, p: Pointer) -> bool:
        return here.holder(h, p) is None if exact else not store.has(h)

    for url, chunks in pointed(repo, refs).items():
        inline = decoded(
            repo,
            {
                h: f
                for h, f in chunks.items()
                if isinstance(f, Inline) and (exact or not store.has(h))
            },
        )
        wanted: dict[Pointer, list[bytes]] = defaultdict(list)
        for h, p in chunks.items():
            if isinstance(p, Pointer) and lacks(h, p):
                wanted[p].append(h)
        if not wanted and not inline:
            continue
        blobs = blob_store(repo, remote, url) if wanted else None  # none for objects in git
        try:
            came += _download(repo, blobs, wanted, arrived, inline)
        finally:
            if blobs is not None:
                blobs.close()
        store.invalidate()
    return came


def decoded(repo: Repo, texts: dict[bytes, Inline]) -> list[tuple[bytes, bytes]]:
    """(chunk hash, object) of each object version refs file inline, decoded from its text;
    one line naming the ref where a text is missing or not base64."""
    items = sorted(texts.items())
    out = []
    for (h, f), text in zip(items, repo.cat_blobs([f.blob for _, f in items]), strict=True):
        data = pointer.parse_inline(text) if text is not None else None
        if data is None:
            raise MgitError(
                f"version ref {f.ref}: the object it files inline for chunk "
                f"{hashing.to_text(h)} is missing or not base64 (blob {f.blob}); "
                "run `git fsck`, and fetch the ref again (`git mgit fetch`)"
            )
        out.append((h, data))
    return out


def _download(
    repo: Repo,
    blobs: BlobStore | None,
    wanted: dict[Pointer, list[bytes]],
    arrived: Arrived | None,
    inline: Sequence[tuple[bytes, bytes]] = (),
) -> int:
    """The `inline` objects, then the verified downloads, into one pack, anchored; kept up
    to a failure, which is raised. Bytes: those downloaded and those decoded."""
    got: list[tuple[bytes, bytes]] = []
    came = 0
    # told its count (every object and their anchor), the pack is hashed as it is written,
    # each entry framed on the cores while the one before is hashed and written
    hashes = [*(h for hs in wanted.values() for h in hs), *(h for h, _ in inline)]
    count = len(wanted) + len(inline) + anchors.anchor_size(hashes)
    with PackWriter(repo.objects_dir, expected=count) as pack:
        progress = None
        try:
            for h, data in inline:
                if arrived is not None:
                    arrived(h, data)
                got.append((h, pack.add("blob", [data])))
                came += len(data)
            if blobs is not None:
                progress = Progress(
                    f"git-mgit: downloading from {blobs.describe()}", sum(p.size for p in wanted)
                )
                came += _downloaded(blobs, wanted, arrived, progress, pack, got)
        finally:
            if progress is not None:
                progress.finish()
            commit = anchors.write_anchor(pack, sorted(got)) if got else None
            pack.finish()  # nothing added: the empty pack is discarded
            if commit is not None:
                anchors.set_ref(repo, commit)
    return came


def _downloaded(
    blobs: BlobStore,
    wanted: dict[Pointer, list[bytes]],
    arrived: Arrived | None,
    progress: Progress,
    pack: PackWriter,
    got: list[tuple[bytes, bytes]],
) -> int:
    """Each object `wanted` names, verified by the store, added to `pack` (and to `got`)."""
    came = 0

    def objects() -> Iterator[tuple[Pointer, str, Data]]:
        for p, data in blobs.download(sorted(wanted), progress.update):
            for h in wanted[p] if arrived is not None else ():
                arrived(h, data)
            yield p, "blob", data

    for p, entry in built(objects()):
        oid = pack.add_entry(entry)
        got.extend((h, oid) for h in wanted[p])
        came += p.size
    return came
