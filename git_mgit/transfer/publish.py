"""Carry out a layout plan here: the objects it needs and the version refs that file them.

Objects this clone already has in the planned form are reused (a chunk
stored whole, or as a delta of the planned base; for a version published as
stored, either): the rest are encoded from the chunks' verified bytes,
walking each tensor's versions oldest first so that every chunk is decoded
once, two tensors at a time (the version checked out here is read from its
file instead: worktree/checkedout.py). Version refs are
written as deterministic commits (time 0) and created here, under their
final names, in one transaction, before any push: a push only sends what
exists locally.

A store that sends objects while the rest are encoded (a blob store's
uploads) is told of each: a reused one at once, a new one with its bytes as
soon as it is encoded. New objects then go to the store alone, from memory,
and nothing new is written here: the objects `git add` wrote keep every
chunk, and the store holds the published form (writing it here too took a
page-cache write, two SHA-1s and an fsync of every byte the push encoded;
0.1 to 0.3 s of a 65 MiB push on a 2-core VM). The store writes the version
refs its own way (pointers.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Protocol

from git_mgit import codecs
from git_mgit.codecs.objectformat import Codec
from git_mgit.console.progress import Progress
from git_mgit.modelfile import manifest as mf
from git_mgit.store import anchors
from git_mgit.store.chains import Key, hashes
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.decoded import DecodedChunks, Readable
from git_mgit.store.gitobjects import Part
from git_mgit.store.lookup import ANCHOR_PREFIX, filed_by
from git_mgit.store.packwriter import PackWriter
from git_mgit.transfer.layout import Candidates, Plan, groups
from git_mgit.transfer.trace import tracer
from git_mgit.transfer.versions import VersionRef

if TYPE_CHECKING:  # the encoder loads at the first chunk encoded, not with the push
    from git_mgit.codecs.codec import Encoded


@dataclass
class Written:
    ref: VersionRef  # with the commit that now holds it here
    objects: dict[bytes, tuple[str, int]] = field(default_factory=dict)  # hash -> (oid, size)


Raw = Callable[[], bytearray]  # a chunk's bytes, decoded only if an object must be encoded
# Tensors walked at once: while one thread holds the GIL (hashing, planes, the pack's
# adler32) another's codec work runs; more would multiply the decoded chunks held.
_TENSORS_AT_ONCE = 2


class Receiver(Protocol):
    """A store that sends a push's objects while the rest are encoded (a blob store's
    uploads), told of each from the threads encoding them. What it is handed is sent from
    memory and not kept here."""

    def hold(self, parts: Sequence[Part]) -> str:
        """An object just encoded (`parts`, its bytes, never change): returns the name it
        is sent under; waits while the receiver holds too much, and raises its failure."""

    def readable(self, objects: list[tuple[str, int]]) -> None:
        """Objects (oid, size) this clone has, to send too."""

    def whole(self, h: bytes) -> tuple[str, int] | None:
        """(name, size) of an object the store holds for chunk `h` whole already, if known:
        filed without encoding or sending it."""


_trace = tracer("publish")


class _Objects:
    """Objects for the plan: reused where this clone has them in the planned form, new
    ones into a pack here or, with a receiver, handed to it.

    Tensors are walked on several threads: the store's lookups and the pack take
    `lock`, one thread at a time; decoding and encoding run outside it.
    """

    def __init__(self, store: ChunkStore, receiver: Receiver | None) -> None:
        self.store, self.receiver = store, receiver
        self.lock = threading.Lock()
        self.pack = PackWriter(store.repo.objects_dir) if receiver is None else None
        self.whole: dict[bytes, tuple[str, int]] = {}
        self.delta: dict[tuple[bytes, bytes], tuple[str, int]] = {}

    def _existing(self, h: bytes, base: bytes | None) -> tuple[str, int] | None:
        with self.lock:
            holders = self.store.holders(h)
        for oid, size, have in holders:
            if have == base:
                if self.receiver is not None:
                    self.receiver.readable([(oid, size)])
                return oid, size
        return None

    def _reversed(
        self, h: bytes, raw: Raw, base: bytes, base_raw: Raw, depth: int, dtype: str
    ) -> Encoded | None:
        """`h` as a delta of `base`, from an object here storing `base` as a delta of `h` (what
        `git add` wrote). An `xor` one is the same payload, nothing decoded; a `sub` one is
        encoded with the same codec without estimating codecs again: the delta the other
        way round is as large, and it paid."""
        with self.lock:
            holders = self.store.holders(base)
        for oid, _, have in holders:
            if have != h:
                continue
            with self.lock:
                codec = self.store.level(base, oid).header.codec
                data = self.store.read_object(oid) if codec == Codec.XOR else None
            if codec == Codec.XOR:
                flipped = None if data is None else codecs.reversed_xor(data, depth + 1)
                if flipped is not None:
                    return flipped
            elif codec == Codec.SUB:
                return codecs.encode_as(
                    codec, raw(), dtype, h, codecs.Base(base_raw(), base, depth)
                )
        return None

    def _add(self, enc: Encoded) -> tuple[str, int]:
        if self.pack is None:
            assert self.receiver is not None
            return self.receiver.hold(enc.parts), enc.size
        with self.lock:
            return self.pack.add("blob", enc.parts).hex(), enc.size

    def abort(self) -> None:
        if self.pack is not None:
            self.pack.abort()

    def stored(self, h: bytes, base: bytes) -> tuple[str, int] | None:
        """The object here filing `h` for a version published as stored: a delta of `base`,
        else whole (chains.own_objects takes the same)."""
        return self._existing(h, base) or self._existing(h, None)

    def whole_of(self, h: bytes, raw: Raw, dtype: str) -> tuple[str, int]:
        if h not in self.whole:
            found = self.receiver.whole(h) if self.receiver is not None else None
            found = found or self._existing(h, None)
            if found is None:
                found = self._add(codecs.encode(raw(), dtype, h))
            self.whole[h] = found
        return self.whole[h]

    def delta_of(
        self, h: bytes, raw: Raw, base: bytes, base_raw: Raw, depth: int, dtype: str
    ) -> tuple[str, int]:
        if (h, base) not in self.delta:
            found = self._existing(h, base)
            if found is None:
                if h in self.whole:
                    found = self.whole[h]
                elif (reverse := self._reversed(h, raw, base, base_raw, depth, dtype)) is not None:
                    found = self._add(reverse)
                else:
                    enc = codecs.encode(
                        raw(), dtype, h, codecs.Base(base_raw(), base, depth), max_depth=255
                    )
                    found = self._add(enc)
                    if enc.header.base_hash is None:  # the delta did not pay: it is whole
                        self.whole[h] = found
            self.delta[h, base] = found
        return self.delta[h, base]


def write(
    store: ChunkStore,
    cands: Candidates,
    plan: Plan,
    receiver: Receiver | None = None,
    read: Readable | None = None,
) -> list[Written]:
    """Write the plan's objects and version refs here; returns them in push order.

    With a `receiver` (a store that sends objects while the rest are encoded), new
    objects are handed to it instead, and neither they nor version refs are written
    here: the store files them its own way. `read` gives a chunk's verified bytes where
    they need no decoding (a checked-out file), else None."""
    chosen = [v for v in cands.order() if v in plan.choices]
    # bases the remote has already (a fine-tune's base) are decoded too, not written
    involved = [*chosen, *{c.base for c in plan.choices.values() if c.base} - set(chosen)]
    base_hashes = {
        v: hashes(cands.versions[c.base].manifest) for v, c in plan.choices.items() if c.base
    }
    # one dict per version up front: the tensors' threads only ever set items in them
    filed: dict[str, dict[bytes, tuple[str, int]]] = {v: {} for v in plan.choices}
    progress = Progress(
        "git-mgit: encoding what the push publishes",
        sum(cands.versions[v].manifest.size for v in chosen),
    )
    objects = _Objects(store, receiver)
    try:

        def tensor(key: Key, group: list[tuple[str, mf.Chunk]]) -> int:
            """One chunk's versions, oldest first (a re-encoded delta's base is newer, so it
            comes later); returns the bytes of the chosen versions it covered."""
            decoded = DecodedChunks(store, lock=objects.lock, read=read)
            at = dict(group)
            done = 0
            for v, c in group:
                h, raw = c.content_hash, partial(decoded.get, c.content_hash)
                choice = plan.choices.get(v)
                unpaired = choice is not None and (choice.base is None or choice.base not in at)
                if unpaired and h not in base_hashes.get(v, ()):
                    filed[v][h] = objects.whole_of(h, raw, key[2])
                levels = choice.levels if choice is not None else 0
                for other, oc in group:  # the versions leaning on this one: their deltas, now
                    och = plan.choices.get(other)
                    if och is None or och.base != v or oc.content_hash in base_hashes[other]:
                        continue
                    found = objects.stored(oc.content_hash, h) if och.stored else None
                    filed[other][oc.content_hash] = found or objects.delta_of(
                        oc.content_hash,
                        partial(decoded.get, oc.content_hash),
                        h,
                        raw,
                        levels,
                        key[2],
                    )
                done += c.length if choice is not None else 0
            return done

        with ThreadPoolExecutor(_TENSORS_AT_ONCE, thread_name_prefix="mgit-publish") as pool:
            futures = [pool.submit(tensor, key, group) for key, group in groups(cands, involved)]
            try:
                for future in as_completed(futures):
                    progress.update(future.result())
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        _trace("every chunk encoded")
        refs = [
            VersionRef(v, (c.base,) if (c := plan.choices[v]).base else ())
            for v in plan.push_order()
        ]
        if objects.pack is None:  # the receiver sends them: nothing new is kept here
            return [Written(ref, dict(filed[ref.version])) for ref in refs]
        written = []
        for ref in refs:
            entries = sorted((h, bytes.fromhex(oid)) for h, (oid, _) in filed[ref.version].items())
            commit = anchors.write_anchor(objects.pack, entries, timestamp=0, message=ref.message)
            written.append(
                Written(VersionRef(ref.version, ref.bases, commit), dict(filed[ref.version]))
            )
        objects.pack.finish()
        _trace("pack finished")
    except BaseException:
        objects.abort()
        raise
    finally:
        progress.finish()
    _set_refs(store, written, plan)
    _trace("version refs set")
    return written


def _set_refs(store: ChunkStore, written: list[Written], plan: Plan) -> None:
    """Create the version refs here, drop local copies of the refs they replace, and retire
    the encodings they supersede from this clone's anchors, in one transaction.

    A chunk the version refs now file is held by them: the anchors' other object
    for it (the forward delta `git add` wrote) is left to `git mgit gc`, so this
    clone keeps what the remote has, not both.
    """
    repo = store.repo
    lines = [f"update {w.ref.name} {w.ref.commit}\n" for w in written]
    lines += repo.deletions(plan.replaced.values())
    lines += _retired(store, {h: oid for w in written for h, (oid, _) in w.objects.items()})
    repo.git("update-ref", "--stdin", input="".join(lines).encode())
    store.invalidate()


def _retired(store: ChunkStore, published: dict[bytes, str]) -> list[str]:
    """update-ref lines that replace each anchor filing another object of a published chunk
    with one filing the rest (same commit time, so gc's grace period is unchanged)."""
    repo = store.repo
    superseded = {o for h, mine in published.items() for o, _, _ in store.holders(h) if o != mine}
    if not superseded:
        return []  # this clone had the chunks in the published form already (or not at all)
    out = []
    rows = repo.git(
        "for-each-ref", "--format=%(refname) %(objectname) %(committerdate:unix)", ANCHOR_PREFIX
    ).splitlines()
    filings = filed_by(repo, [line.split()[1] for line in rows])
    with PackWriter(repo.objects_dir) as pack:  # one pack for all the new anchors
        for line in rows:
            ref, commit, when = line.split()
            filed = filings[commit]
            keep = [(h, bytes.fromhex(o)) for h, o, _ in filed if o not in superseded]
            if len(keep) == len(filed):
                continue
            out.append(f"delete {ref} {commit}\n")
            if keep:
                new = anchors.write_anchor(pack, keep, timestamp=int(when))
                create = f"create {ANCHOR_PREFIX}{new} {new}\n"
                if create not in out:  # two anchors left with the same objects and time
                    out.append(create)
        pack.finish()  # nothing added: discarded
    return out
