"""A push's uploads to a blob store, on a thread of their own, begun while objects are written.

The push's encoding (publish.write) and its uploads would otherwise take
turns: on a real network the upload is network-bound and the encoding
CPU-bound, so running them side by side hides the shorter one. Objects are
handed over as they become readable here (ready()), hashed on git-mgit's
cores, and sent in the blob store's chunks as they come (the store asks the
server which it lacks, chunk by chunk: nothing is sent twice). finish()
hands over the rest (every object the published versions file: the early
ones are only a head start), waits, and returns what was sent; cancel()
stops a push that failed, and what was uploaded stays (a rerun asks again
and sends only the rest).

Progress shows once the encoding is done, for the bytes left to send.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

from git_mgit.gitcmd import Repo
from git_mgit.progress import Progress
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer.stores.base import Sent
from git_mgit.transfer.stores.blobs import Pointer
from git_mgit.transfer.stores.objectbytes import ObjectBytes
from git_mgit.transfer.stores.registry import blob_store

Objects = Iterable[tuple[str, int]]  # (oid, size) of objects readable here


class _Cancelled(Exception):
    """The push failed elsewhere: stop taking objects."""


class Upload:
    def __init__(self, repo: Repo, remote: str, url: str, store: ChunkStore) -> None:
        self.read = ObjectBytes(store)
        self.pointers: dict[str, Pointer] = {}  # every object handed over, hashed
        self.sent = Sent()
        self._repo, self._remote, self._url = repo, remote, url
        self._queue: queue.SimpleQueue[list[tuple[str, int]] | None] = queue.SimpleQueue()
        self._by_pointer: dict[Pointer, str] = {}
        self._lock = threading.Lock()  # the progress, shown from finish() on
        self._progress: Progress | None = None
        self._where = url
        self._cancelled = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mgit-upload", daemon=True)
        self._thread.start()

    def ready(self, objects: Objects) -> None:
        """Objects readable here now, to send; raises the uploads' failure, if they failed,
        so that the push stops writing."""
        if self._error is not None:
            raise self._error
        self._queue.put(list(objects))

    def finish(self, objects: Objects) -> Sent:
        """Send `objects` too (those already handed over are not sent twice) and wait for
        every upload; raises what failed."""
        objects = dict(objects)
        self._queue.put(list(objects.items()))
        self._queue.put(None)
        with self._lock:
            left = sum(objects.values()) - self.sent.bytes
            self._progress = Progress(f"git-mgit: uploading to {self._where}", max(left, 0))
        self._thread.join()
        self._progress.finish()
        if self._error is not None:
            raise self._error
        return self.sent

    def cancel(self) -> None:
        """Stop: what is being sent finishes, nothing more starts."""
        if self._thread.is_alive():
            self._cancelled = True
            self._queue.put(None)
            self._thread.join()

    def _oids(self) -> Iterator[str]:
        seen: set[str] = set()
        while (batch := self._queue.get()) is not None:
            for oid, _ in batch:
                if oid not in seen:
                    seen.add(oid)
                    yield oid
        if self._cancelled:
            raise _Cancelled

    def _hashed(self) -> Iterator[Pointer]:
        for oid, p in self.read.pointers(self._oids()):
            self.pointers[oid] = p
            self._by_pointer.setdefault(p, oid)
            yield p

    def _moved(self, n: int) -> None:
        with self._lock:
            self.sent.bytes += n
            if self._progress is not None:
                self._progress.update(n)

    def _run(self) -> None:
        try:
            blobs = blob_store(self._repo, self._remote, self._url)
            try:
                self._where = blobs.describe()
                stream = self._hashed()
                self.sent.uploaded = blobs.upload(
                    stream, lambda p: self.read.bytes(self._by_pointer[p]), self._moved
                )
                for _ in stream:  # every pointer is filed, even one a store never asked for
                    pass
            finally:
                blobs.close()
                self.read.forget(self.pointers)  # pages hashed but not sent (the store had them)
        except BaseException as e:  # raised where the push waits: ready(), finish()
            self._error = e
