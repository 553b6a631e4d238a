"""A push's uploads to a blob store, on a thread of their own, begun while objects are encoded.

The push's encoding (publish.write) and its uploads would otherwise take
turns: on a real network the upload is network-bound and the encoding
CPU-bound, so running them side by side hides the shorter one. Objects are
handed over as they are encoded (hold(): sent from memory and let go once
the store holds them, objectbytes.py), or as objects this clone has
(readable(), hashed on git-mgit's cores), and sent
in the blob store's chunks as they come (the store asks the server which it
lacks, chunk by chunk: nothing is sent twice). hand_over() hands over the rest
(every object the published versions file: the early ones are only a head
start) and wait() waits, and returns what was sent; hashed() says when every
object's pointer is known, which is before the last bytes are sent (the
pointer refs' push connects meanwhile, pointers.py); cancel() stops a push
that failed, and what was uploaded stays (a rerun asks again and sends only
the rest).

Objects of at most mgit.inlineSize are not sent: their bytes are kept
(`inline`) for the version refs, which file them as text (pointer.py).

Progress shows once the encoding is done, for the bytes left to send.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence

from git_mgit.console.progress import Progress
from git_mgit.gitcmd import Repo
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import Part, byte_view
from git_mgit.transfer.stores.base import Sent
from git_mgit.transfer.stores.blobs import IDLE, Pointer
from git_mgit.transfer.stores.objectbytes import ObjectBytes
from git_mgit.transfer.stores.registry import Opening, blob_store

Objects = Iterable[tuple[str, int]]  # (oid, size) of objects readable here


class _Cancelled(Exception):
    """The push failed elsewhere: stop taking objects."""


class Upload:
    def __init__(
        self,
        repo: Repo,
        remote: str,
        url: str,
        store: ChunkStore,
        opening: Opening | None = None,
        there: Mapping[bytes, Pointer] | None = None,
        inline: int = 0,
    ) -> None:
        """`there`: chunk hash -> the object the store holds for it whole (whole()),
        pointers this clone has. Objects of at most `inline` bytes are not sent: their
        bytes are kept (self.inline) for the version refs to file (pointer.py)."""
        self.read = ObjectBytes(store)
        self._there = there or {}
        self._named: set[str] = set()  # objects only the store has (whole())
        self._inline_size = inline
        self.pointers: dict[str, Pointer] = {}  # every object handed over, hashed
        self.inline: dict[str, bytes] = {}  # objects handed over, filed in git: their bytes
        self.sent = Sent()
        self._repo, self._remote, self._url = repo, remote, url
        self._opening = opening
        self._queue: queue.SimpleQueue[list[tuple[str, int]] | None] = queue.SimpleQueue()
        self._by_pointer: dict[Pointer, str] = {}
        self._lock = threading.Lock()  # the progress, shown from hand_over() on
        self._progress: Progress | None = None
        self._where = url
        self._cancelled = False
        self._error: BaseException | None = None
        self._all_hashed = threading.Event()  # set once hand_over()'s objects are hashed
        self._handed: list[str] = []  # the oids hand_over() named
        self._thread = threading.Thread(target=self._run, name="mgit-upload", daemon=True)
        self._thread.start()

    def readable(self, objects: Objects) -> None:
        """Objects readable here now, to send; raises the uploads' failure, if they failed,
        so that the push stops writing."""
        if self._error is not None:
            raise self._error
        self._queue.put(self._to_send(objects))

    def whole(self, h: bytes) -> tuple[str, int] | None:
        """(name, size) of the object the store holds for chunk `h` whole, where this clone
        has a pointer ref saying so: filed as it is, neither encoded nor sent."""
        p = self._there.get(h)
        if p is None:
            return None
        self.read.name(p)
        self._named.add(p.oid)
        return p.oid, p.size

    def hold(self, parts: Sequence[Part]) -> str:
        """An object just encoded, sent from memory and let go once the store holds it;
        returns its name (its pointer's id). Waits while too much is held; raises as
        readable() does."""
        if self._error is not None:
            raise self._error
        if sum(byte_view(part).nbytes for part in parts) <= self._inline_size:
            data = b"".join(byte_view(part) for part in parts)
            p = Pointer.of(data)  # its name, as a sent object's
            self.inline[p.oid] = data
            return p.oid
        p = self.read.hold(
            parts, lambda: self._error or (_Cancelled() if self._cancelled else None)
        )
        self._queue.put([(p.oid, p.size)])
        return p.oid

    def _to_send(self, objects: Objects) -> list[tuple[str, int]]:
        """Those of `objects` to send; the bytes of those filed in git are read now."""
        out = []
        for oid, size in objects:
            if size > self._inline_size or oid in self._named:
                out.append((oid, size))
            elif oid not in self.inline:
                self.inline[oid] = self.read.bytes(oid).joined()
        return out

    def hand_over(self, objects: Objects) -> None:
        """The last objects to send (those already handed over are not sent twice)."""
        objects = dict(objects)
        self._handed = list(objects)
        sent = self._to_send(objects.items())
        self._queue.put(sent)
        self._queue.put(None)
        with self._lock:
            left = sum(size for _, size in sent) - self.sent.bytes
            self._progress = Progress(f"git-mgit: uploading to {self._where}", max(left, 0))

    def hashed(self) -> None:
        """Wait until every object handed over has its pointer (self.pointers); raises what
        failed, as wait() does (the progress ended). Where none needs hashing (a push's
        objects were hashed as they were encoded) that is now, not once the uploads took
        the last of them: the pointer refs' push connects while they are sent."""
        pending = [o for o in self._handed if o not in self.pointers and o not in self.inline]
        known = [(oid, p) for oid in pending if (p := self.read.known(oid)) is not None]
        if len(known) == len(pending) and self._error is None:
            self.pointers.update(known)
            return
        self._all_hashed.wait()
        if self._error is not None:
            self.wait()

    def wait(self) -> Sent:
        """Wait for every upload of what was handed over; raises what failed."""
        self._thread.join()
        assert self._progress is not None, "hand_over() first"
        self._progress.finish()
        if self._error is not None:
            raise self._error
        return self.sent

    def cancel(self) -> None:
        """Stop: what is being sent finishes, nothing more starts."""
        if self._thread.is_alive():
            self._cancelled = True
            self._queue.put(None)
            self.read.wake()
            self._thread.join()

    def _batches(self) -> Iterator[list[str] | None]:
        """The objects handed over, each once, a hand-over at a time; None each time none
        more has come yet (the push is still encoding them). Stops at an upload's failure
        (_failed()), raising it: the store, waiting here for objects, would not see it."""
        seen: set[str] = set()
        while True:
            try:
                batch = self._queue.get_nowait()
            except queue.Empty:
                yield None
                batch = self._queue.get()
            if batch is None or self._error is not None:
                break
            fresh = [oid for oid in dict.fromkeys(oid for oid, _ in batch) if oid not in seen]
            seen.update(fresh)
            if fresh:
                yield fresh
        if self._error is not None:
            raise self._error
        if self._cancelled:
            raise _Cancelled

    def _hashed(self) -> Iterator[Pointer | None]:
        for oids in self._batches():
            if oids is None:
                yield IDLE  # what is hashed goes out now
                continue
            for oid, p in self.read.pointers(oids):
                self.pointers[oid] = p
                self._by_pointer.setdefault(p, oid)
                yield p
        self._all_hashed.set()

    def _failed(self, error: BaseException) -> None:
        """An upload failed: the push stops now, with the store's error, however it waits
        (hold() for room that object keeps taken, the upload thread for more objects)."""
        if self._error is None:
            self._error = error
        self.read.wake()
        self._queue.put(None)

    def _moved(self, n: int) -> None:
        with self._lock:
            self.sent.bytes += n
            if self._progress is not None:
                self._progress.update(n)

    def _run(self) -> None:
        try:
            opened = self._opening.take(self._url) if self._opening is not None else None
            blobs = opened or blob_store(self._repo, self._remote, self._url)
            try:
                self._where = blobs.describe()
                stream = self._hashed()
                self.sent.uploaded = blobs.upload(
                    stream,
                    lambda p: self.read.bytes(self._by_pointer[p]),
                    self._moved,
                    lambda p: self.read.release([p.oid]),  # held by its pointer's id
                    self._failed,
                )
                for _ in stream:  # every pointer is filed, even one a store never asked for
                    pass
            finally:
                blobs.close()
                self.read.forget(self.pointers)  # pages hashed but not sent (the store had them)
        except BaseException as e:  # raised where the push waits: hold(), readable(), wait()
            if self._error is None:  # else an upload failed first (_failed()): that is said
                self._error = e
            self.read.wake()
        finally:
            self._all_hashed.set()
