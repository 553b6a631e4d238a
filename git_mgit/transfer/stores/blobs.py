"""The interface of a blob store: content-addressed bytes beside git (Git LFS, S3).

A blob store holds opaque objects named by the SHA-256 of their bytes (a
Git LFS object id), and only ever adds: what it holds is never sent again.
Every implementation checks each downloaded object against its id and size
before a byte of it reaches the caller, retries what the network drops, and
says in one line what a server refused and what to do. Credentials never
appear in any message, log or trace.
"""

from __future__ import annotations

import functools
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from typing import TypeVar

from git_mgit.errors import MgitError

Progress = Callable[[int], None]  # called with bytes moved since the last call
# What download() yields: bytes, or a read-only view of a client's own buffer (no copy)
Data = bytes | memoryview
T = TypeVar("T")
R = TypeVar("R")
RUN = 4 << 20  # bytes hashed or sent in one call (Pieces.runs)
IDLE = None  # in upload()'s objects: none more is ready yet (Chunks)


@dataclass(frozen=True)
class Pieces:
    """An object's bytes in order, as views of the pack that holds it: hashed and sent
    without a copy (a copy into fresh memory costs about as much as a SHA-256)."""

    views: Sequence[memoryview]
    # called each time the bytes were all read (sent, hashed or joined): the holder may let
    # their memory go (pages of a mapped pack); reading them again maps them again
    done: Callable[[], None] | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return sum(v.nbytes for v in self.views)

    def joined(self) -> bytes:
        """One buffer, for clients that take nothing else."""
        out = b"".join(self.views)
        if self.done is not None:
            self.done()
        return out

    def __iter__(self) -> Iterator[memoryview]:
        """Its runs, afresh each time: an HTTP client sends a body again after a redirect or
        a 401."""
        return self.runs()

    def runs(self, size: int = RUN) -> Iterator[memoryview]:
        """The bytes in order as views of about `size` bytes: the pieces (64 KiB each out of
        a pack) copied into one reused buffer, a piece of `size` or more as it is. Hashing
        or sending 64 KiB at a time lets go of the GIL at every piece, and a thread doing
        that beside threads running Python waits its turn each time (54 MiB: 53 ms alone,
        15 s beside two threads counting in Python; in 4 MiB runs, 0.38 s). Each view is
        valid until the next is taken."""
        buffer = memoryview(bytearray(size))
        filled = 0
        for view in self.views:
            if filled and filled + view.nbytes > size:
                yield buffer[:filled]
                filled = 0
            if view.nbytes >= size:
                yield view
                continue
            buffer[filled : filled + view.nbytes] = view
            filled += view.nbytes
        if filled:
            yield buffer[:filled]
        if self.done is not None:
            self.done()


Body = Data | Pieces  # what upload()'s `read` returns


@dataclass(frozen=True, order=True)
class Pointer:
    """One stored object: the SHA-256 of its bytes (64 hex) and its size."""

    oid: str
    size: int

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview | Pieces) -> Pointer:
        h = hashlib.sha256()
        for view in data.runs() if isinstance(data, Pieces) else [data]:
            h.update(view)
        return cls(h.hexdigest(), len(data))


class BlobStoreError(MgitError):
    """A blob store refused, failed or served bad bytes (one line: what, where, what to do)."""

    absent = False  # the store itself is not there (an LFS endpoint answering 404)


class BlobStore(ABC):
    """Where a pointer store's object bytes live."""

    @abstractmethod
    def describe(self) -> str:
        """Where, for messages: `Git LFS at https://host/repo.git/info/lfs`, `s3://b/prefix`
        (never credentials)."""

    @abstractmethod
    def missing(self, objects: Sequence[Pointer]) -> list[Pointer]:
        """Those of `objects` the store does not hold."""

    @abstractmethod
    def upload(
        self,
        objects: Iterable[Pointer | None],
        read: Callable[[Pointer], Body],
        progress: Progress | None = None,
        settled: Callable[[Pointer], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
    ) -> int:
        """Send the objects the store lacks (asking it first); how many were sent.

        `objects` may be lazy (pointers as they are hashed, IDLE where none more is ready
        yet: Chunks); a store may start sending before it ends. `read` returns an object's
        bytes; it may be called from several threads, for any pointer `objects` has yielded,
        until `settled` was called with it: once the store holds the object (sent, or there
        already), from any thread, so that its bytes can go. `failed` is called with an
        upload's failure as it happens, from any thread: upload() raises it only when
        `objects` next yields or ends, so a caller whose `objects` waits for more ends it.
        """

    @abstractmethod
    def download(
        self, objects: Sequence[Pointer], progress: Progress | None = None
    ) -> Iterator[tuple[Pointer, Data]]:
        """Each object's bytes, verified against its id and size, in any order.

        Raises BlobStoreError naming the object and the store when one is missing,
        corrupt, or cannot be had; nothing unverified is ever yielded.
        """

    def prepare(self, operation: str) -> None:  # noqa: B027 - nothing to set up for most
        """Get ready for a first `operation` ("upload" or "download") while the caller still
        waits on something else; best effort, never prompting, raising nothing."""

    def close(self) -> None:  # noqa: B027 - stores without connections have nothing to do
        """Release connections."""


def sized(read: Callable[[Pointer], Body], pointer: Pointer, where: str) -> Body:
    """The bytes to upload for `pointer`, read again after it was computed from them.

    Only the size is checked: hashing them a second time would double a push's
    SHA-256 work to guard against an immutable pack changing between two reads.
    """
    data = read(pointer)
    if len(data) != pointer.size:
        raise BlobStoreError(
            f"the local copy of object sha256:{pointer.oid[:12]} is {len(data)} bytes, not "
            f"{pointer.size}; it was not uploaded to {where}; run `git mgit fsck`"
        )
    return data


def verified(store: BlobStore, pointer: Pointer, data: Data) -> Data:
    """`data` if it is the object `pointer` names; else BlobStoreError, one line."""
    if len(data) != pointer.size or hashlib.sha256(data).hexdigest() != pointer.oid:
        raise BlobStoreError(
            f"{store.describe()} served a corrupt object sha256:{pointer.oid[:12]} "
            f"({len(data)} bytes, expected {pointer.size}); nothing was written; "
            "report it to the store's owner, or fetch from another remote"
        )
    return data


class Chunks:
    """`objects` without duplicates, in chunks of at most `max_count` objects, each cut once
    it names `max_bytes`, taken from `objects` only as each chunk fills: an upload fed by
    hashing sends its first objects while the rest are hashed. A None among `objects`
    (IDLE: nothing more for now, a push is still encoding them) cuts the chunk as it is,
    so what is ready goes out. The limits may change between chunks (a store that finds a
    chunk held already may ask for larger ones)."""

    def __init__(
        self,
        objects: Iterable[Pointer | None],
        max_count: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.objects = objects
        self.max_count, self.max_bytes = max_count, max_bytes

    def __iter__(self) -> Iterator[list[Pointer]]:
        seen: set[Pointer] = set()
        chunk: list[Pointer] = []
        size = 0
        for p in self.objects:
            if p is IDLE:
                if chunk:
                    yield chunk
                    chunk, size = [], 0
                continue
            if p in seen:
                continue
            seen.add(p)
            chunk.append(p)
            size += p.size
            if (self.max_count is not None and len(chunk) >= self.max_count) or (
                self.max_bytes is not None and size >= self.max_bytes
            ):
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk


class Uploads:
    """Uploads running on a pool, counted as they finish: one queue for every chunk of a
    push, so no chunk waits for the last upload of the one before."""

    def __init__(
        self,
        pool: Executor,
        progress: Progress | None = None,
        settled: Callable[[Pointer], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.pool, self.progress = pool, progress
        self.settled, self.failed = settled, failed
        self.running: dict[Future[bool], Pointer] = {}
        self.sent = 0  # objects sent, of those finished

    def start(self, pointer: Pointer, upload: Callable[..., bool], *args: object) -> None:
        """Queue `upload(*args)`, which says whether it sent the object."""
        future = self.pool.submit(upload, *args)
        self.running[future] = pointer
        future.add_done_callback(functools.partial(self._ended, pointer))

    def _ended(self, pointer: Pointer, future: Future[bool]) -> None:
        """Tell the caller how an upload ended, at once, from the thread that ran it:
        collect() sees it only when the caller's objects give the store a turn, and a push
        may be waiting for the room that this object's release, or its failure, makes."""
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            if self.settled is not None:
                self.settled(pointer)
        elif self.failed is not None:
            self.failed(error)

    def there(self, pointer: Pointer) -> None:
        """The store holds `pointer` already: nothing to send."""
        if self.settled is not None:
            self.settled(pointer)

    def collect(self) -> None:
        """Count the uploads done by now (a failure is raised)."""
        for future in [f for f in self.running if f.done()]:
            pointer = self.running.pop(future)
            if future.result():
                self.sent += 1
                if self.progress:
                    self.progress(pointer.size)

    def finish(self) -> int:
        """Wait for the rest; how many objects were sent."""
        while self.running:
            wait(self.running, return_when=FIRST_COMPLETED)
            self.collect()
        return self.sent


def ahead(
    items: Iterator[T],
    fetch: Callable[[T], R],
    size: Callable[[T], int],
    pool: Executor,
    *,
    limit: int,
    max_bytes: int,
) -> Iterator[tuple[T, R]]:
    """`fetch(item)` on `pool` for each item, yielded as each finishes: at most `limit` at
    once and `max_bytes` (by `size`) ahead of the caller, so downloads keep memory to a
    few objects; one always runs, however large. `items` is pulled only as room frees."""
    running: dict[Future[R], T] = {}
    pending = 0
    upcoming = next(items, None)
    while True:
        while (
            upcoming is not None
            and len(running) < limit
            and (not running or pending + size(upcoming) <= max_bytes)
        ):
            running[pool.submit(fetch, upcoming)] = upcoming
            pending += size(upcoming)
            upcoming = next(items, None)
        if not running:
            return
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            item = running.pop(future)
            pending -= size(item)
            yield item, future.result()
