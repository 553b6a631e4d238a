"""`git mgit store migrate --to lfs|s3|refs`: republish what a remote holds in another store.

Every version ref the remote lists is fetched here with its objects (from
whichever store holds them), then sent again through the target store under
the same name: the remote's ref now says where the bytes are, so clones made
before keep working (a version is found in whichever store its ref names)
and a fresh clone needs nothing but `git mgit install`. The remote's
`refs/mgit/store` then records the target, which every clone's `auto` follows.
Nothing is deleted from the old store: an LFS store cannot delete, and a
clone that listed an old ref a moment ago can still read its objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import object_id
from git_mgit.store.lookup import RECORD_REF, anchor_objects, anchor_tips
from git_mgit.transfer.fetch import keep_replaced
from git_mgit.transfer.publish import Written
from git_mgit.transfer.remotes import list_versions, transfer
from git_mgit.transfer.stores import pointers
from git_mgit.transfer.stores.blobs import Pointer
from git_mgit.transfer.stores.choice import REFS, Choice, parse_record, record_text
from git_mgit.transfer.stores.gitpush import push, push_limit
from git_mgit.transfer.stores.objectbytes import ObjectBytes
from git_mgit.transfer.stores.pointer import Inline
from git_mgit.transfer.stores.registry import store_for
from git_mgit.transfer.versions import Published, VersionRef


@dataclass
class Report:
    versions: int = 0  # version refs the remote lists
    moved: int = 0  # republished in the target store
    sent: int = 0  # bytes sent


def migrate(repo: Repo, remote: str, target: Choice) -> Report:
    report = Report()
    listing = list_versions(repo, remote, RECORD_REF)
    refs = Published.from_listing(listing).refs()
    report.versions = len(refs)
    store = ChunkStore(repo)
    try:
        _fetch_all(repo, store, remote, refs)
        bytes_of = ObjectBytes(store)
        todo = [r for r in refs if _store_of(repo, r) != target.url]
        written = [_written(repo, bytes_of, r, target) for r in todo]
        sent = store_for(repo, remote, target).publish(
            store, written, listing, [], push_limit(repo)
        )
        report.moved, report.sent = len(written), sent.bytes
    finally:
        store.close()
    record = anchors.commit_blobs(repo, [], record_text(target.url))
    repo.git("update-ref", RECORD_REF, record)
    push(repo, remote, [f"+{RECORD_REF}:{RECORD_REF}"])
    return report


def _fetch_all(repo: Repo, store: ChunkStore, remote: str, refs: list[VersionRef]) -> None:
    """Every ref here as the remote has it, with the objects it files or points to."""
    local = anchor_tips(repo)
    keep_replaced(repo, {local[r.name] for r in refs if local.get(r.name, r.commit) != r.commit})
    have = repo.existing(r.commit for r in refs)
    specs = [f"+{r.commit}:{r.name}" for r in refs if r.commit not in have]
    if specs:
        transfer(repo, "fetch", "--no-tags", "--no-write-fetch-head", remote, *specs)
    moved = "".join(f"update {r.name} {r.commit}\n" for r in refs if r.commit in have)
    if moved:
        repo.git("update-ref", "--stdin", input=moved.encode())
    store.invalidate()
    pointers.resolve(store, remote, refs, exact=True)  # the objects themselves, to send on


def _inline_here(repo: Repo, texts: dict[bytes, Inline]) -> dict[bytes, tuple[str, int]]:
    """Chunk hash -> (oid, size) of each object a version ref files inline, where the fetch
    put it here (all decoded, and asked after, at once)."""
    objects = {h: (object_id("blob", [d]).hex(), len(d)) for h, d in pointers.decoded(repo, texts)}
    here = repo.existing(oid for oid, _ in objects.values())
    return {h: o for h, o in objects.items() if o[0] in here}


def _named(filing: Pointer | Inline) -> str:
    return (
        f"sha256:{filing.oid[:12]}" if isinstance(filing, Pointer) else f"blob {filing.blob[:12]}"
    )


def _store_of(repo: Repo, ref: VersionRef) -> str:
    body = repo.cat_blobs([ref.commit])[0] or b""
    return parse_record(body.decode("utf-8", "replace")) or REFS


def _written(repo: Repo, bytes_of: ObjectBytes, ref: VersionRef, target: Choice) -> Written:
    """The ref's objects as the target store sends them (for the refs store, filed by a
    version ref commit here)."""
    filed = {h: (oid, size) for h, oid, size in anchor_objects(repo, [ref.commit], [])}
    for chunks in pointers.pointed(repo, [ref]).values():
        inline = _inline_here(repo, {h: p for h, p in chunks.items() if isinstance(p, Inline)})
        for h, p in chunks.items():
            found = inline.get(h) if isinstance(p, Inline) else bytes_of.holder(h, p)
            if found is None:
                raise MgitError(
                    f"object {_named(p)} of version {ref.version[:12]} is not here after "
                    "fetching it; run `git mgit fsck`, then the migration again"
                )
            filed[h] = found
    if target.kind == REFS:
        objects = sorted((h, bytes.fromhex(oid)) for h, (oid, _) in filed.items())
        commit = anchors.commit_objects(repo, objects, timestamp=0, message=ref.message)
        repo.git("update-ref", ref.name, commit)
        ref = VersionRef(ref.version, ref.bases, commit)
    return Written(ref, filed)
