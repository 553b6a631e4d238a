"""The version refs store: objects travel inside version refs, in the remote's own git.

For plain git remotes: bare repositories over file:// or ssh, self-hosted
servers. Version refs are sent bases first, several per `git push` while
their new objects fit in mgit.maxPushSize. A version larger than that goes
as a chain of parts on refs/mgit/partial/<name>, each part a commit whose
tree holds the next objects and whose parent is the part before; its ref is
then created on the remote (sending just the commit and trees) and the
partial ref deleted. A push cut off part-way resumes: the parts already on
the remote are not sent again, and the chain continues from the remote's
last part.

A bare remote stores a push of fewer than receive.unpackLimit (default 100)
objects as loose objects, deflating every one again at its default level:
for tensor objects, which are already compressed, that is most of a push's
time, and every later fetch of them deflates them once more until the remote
repacks. So a push carrying tensor objects also force-updates a pad ref to
a commit of 100 tiny unique blobs: the remote keeps the pack as sent. The
ref is refs/mgit/pad/<this clone's id>, so clones pushing at the same
moment never race for it (a clone pushes one thing at a time).
"""

from __future__ import annotations

from collections.abc import Sequence

from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import PARTIAL_PREFIX, VERSION_PREFIX, anchor_objects
from git_mgit.transfer.publish import Written
from git_mgit.transfer.stores.base import Sent, Store
from git_mgit.transfer.stores.gitpush import push, push_refs
from git_mgit.transfer.versions import VersionRef

_ENTRY_OVERHEAD = 200  # tree entries and pack headers per object, in the size estimate


class RefsStore(Store):
    def publish(
        self,
        store: ChunkStore,
        written: Sequence[Written],
        listing: dict[str, str],
        gone: Sequence[str],
        limit: int,
    ) -> Sent:
        """Push the version refs in batches under `limit`, then delete what they replace.

        A pushed ref's commit has no parent the remote knows, so git sends every object
        its tree files, shared ones included (the remote keeps one copy once it repacks):
        a batch's size is its refs' objects, each counted once.
        """
        sent = Sent()
        batch: list[Written] = []
        in_batch: set[str] = set()
        size = 0
        for w in written:
            objects = dict(w.objects.values())
            need = sum(n + _ENTRY_OVERHEAD for oid, n in objects.items() if oid not in in_batch)
            if batch and size + need > limit:
                self._flush(batch, sent)
                batch, in_batch, size = [], set(), 0
                need = sum(objects.values()) + _ENTRY_OVERHEAD * len(objects)
            sent.bytes += need
            if need > limit:
                self._send_in_parts(w, listing, limit, sent)
                continue
            batch.append(w)
            in_batch.update(objects)
            size += need
        self._flush(batch, sent)
        # What re-publishing replaced, and parts a push that was cut off left behind.
        leftovers = [PARTIAL_PREFIX + w.ref.name.removeprefix(VERSION_PREFIX) for w in written]
        deletions = [*gone, *(name for name in leftovers if name in listing)]
        if deletions:
            push(self.repo, self.remote, [f":{name}" for name in deletions])
        for name in leftovers:
            self.repo.git("update-ref", "-d", name, check=False)
        return sent

    def _flush(self, batch: list[Written], sent: Sent) -> None:
        payload = sum(n for w in batch for _, n in w.objects.values())
        if push_refs(self.repo, self.remote, [w.ref.name for w in batch], payload):
            sent.pushes += 1

    def _send_in_parts(self, w: Written, listing: dict[str, str], limit: int, sent: Sent) -> None:
        """A version larger than the limit, part by part on refs/mgit/partial/<name>.

        Part k's tree files the objects of parts 1..k and its parent is part k-1, so
        git sends just the part's own objects; the version's commit then takes the
        last part as its parent (same tree: git sends the commit alone). A cut-off
        push resumes from the part the remote has.
        """
        repo, remote = self.repo, self.remote
        partial = PARTIAL_PREFIX + w.ref.name.removeprefix(VERSION_PREFIX)
        parent = listing.get(partial)
        done: dict[bytes, bytes] = {}
        if parent is not None and parent in repo.existing([parent]):
            done = {h: bytes.fromhex(oid) for h, oid, _ in anchor_objects(repo, [parent], [])}
        else:
            parent = None  # nothing there, or another clone's parts: start a chain of our own
        todo = sorted((h, oid, n) for h, (oid, n) in w.objects.items() if h not in done)
        parts: list[list[tuple[bytes, str]]] = [[]]
        sizes: list[int] = [0]
        for h, oid, n in todo:
            if parts[-1] and sizes[-1] + n + _ENTRY_OVERHEAD > limit:
                parts.append([])
                sizes.append(0)
            parts[-1].append((h, oid))
            sizes[-1] += n + _ENTRY_OVERHEAD
        for i, (objects, payload) in enumerate(zip(parts, sizes, strict=True), 1):
            done.update((h, bytes.fromhex(oid)) for h, oid in objects)
            message = f"git-mgit part {i} of {len(parts)} of {w.ref.name}\n"
            parent = anchors.commit_objects(
                repo, sorted(done.items()), [parent] if parent else [], 0, message
            )
            repo.git("update-ref", partial, parent)
            push(repo, remote, [f"+{partial}:{partial}"], payload)
            sent.pushes += 1
        final = anchors.commit_objects(
            repo, sorted(done.items()), [parent] if parent else [], 0, w.ref.message
        )
        repo.git("update-ref", w.ref.name, final)
        w.ref = VersionRef(w.ref.version, w.ref.bases, final)
        push(repo, remote, [f"+{w.ref.name}:{w.ref.name}", f":{partial}"])
        repo.git("update-ref", "-d", partial)
