"""S3Store: a bucket as a blob store, on obstore (Rust's object_store; one wheel, no dependencies).

- missing(): for each `<oid[0:2]>/` shard, a HEAD per object where few are asked,
  a listing of the shard where many are (one LIST page answers for up to 1000
  keys); a listing stops once it costs more pages than the HEADs it replaces,
  and HEADs settle the rest. An object of the wrong size counts as missing, so
  an upload cut short is sent again.
- upload(): asks missing() about 64 MiB of objects at a time as the caller hashes
  them, and keeps `concurrency` PUTs of what is missing going meanwhile; each
  object's size is checked before it leaves. Objects up to 64 MiB
  (every git-mgit chunk) go in one PUT, larger ones as 16 MiB multipart parts.
- download(): `concurrency` GETs at once, at most `_AHEAD_BYTES` ahead of the
  caller; each object is checked against its SHA-256 and size by the worker
  that fetched it (so hashing runs on every core), before it is yielded.
- Signatures leave bodies out (UNSIGNED-PAYLOAD): an object's name is its SHA-256
  already, and every download is checked against it.
- Retries are obstore's: 5xx, 429, dropped connections and bodies cut short
  (a GET resumes with a Range request), with exponential backoff and jitter
  (`Retry`; obstore does not read Retry-After).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from git_mgit.transfer.stores.blobs import (
    BlobStore,
    BlobStoreError,
    Body,
    Chunks,
    Data,
    Pieces,
    Pointer,
    Progress,
    Uploads,
    ahead,
    sized,
    verified,
)
from git_mgit.transfer.stores.s3 import credentials
from git_mgit.transfer.stores.s3.errors import s3_code, store_error
from git_mgit.transfer.stores.s3.location import S3Location

_OID = re.compile(r"[0-9a-f]{64}")
_SINGLE_PUT_MAX = 64 << 20
_CHUNK_BYTES = 64 << 20  # an upload asks which of this much the bucket lacks, then sends it
_MAX_CHUNK_BYTES = 16 << 30
_PART = 16 << 20
_PARTS_AT_ONCE = 4
_AHEAD_BYTES = 256 << 20
_PAGE = 1000  # keys per LIST page
_HEADS_PER_PAGE = 4  # a LIST page is worth it once it replaces this many HEADs
_NOT_FOUND = ("NotFound", "NoSuchKey", "HTTP 404")


@dataclass(frozen=True)
class Retry:
    """How obstore retries 5xx, 429 and dropped connections (its defaults)."""

    attempts: int = 10
    first_backoff_s: float = 0.1
    max_backoff_s: float = 15.0
    within_s: float = 180.0  # no retry starts later than this after the first try


class S3Store(BlobStore):
    """The objects under one bucket prefix."""

    def __init__(
        self,
        location: S3Location,
        *,
        concurrency: int = 8,
        retry: Retry | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        from obstore.store import S3Store as Client  # only when a store opens: ~30 ms

        self.location = location
        self.concurrency = max(1, concurrency)
        self._chain = credentials.resolve(env)
        if location.endpoint and not self._chain.found:
            raise BlobStoreError(
                f"{location.describe()}: no S3 credentials found; export AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or name a profile of ~/.aws/credentials in AWS_PROFILE"
            )
        retry = retry or Retry()
        # The signature leaves the body out (as AWS's SDKs sign uploads over HTTPS): signing
        # it hashes every byte sent with SHA-256 a second time (the object's name is its
        # SHA-256 already), and every download is checked against that name anyway.
        config: dict[str, Any] = {**self._chain.config, "unsigned_payload": True}
        if location.endpoint:
            config["endpoint"] = location.endpoint
        if location.region:
            config["region"] = location.region
        try:
            self._client = Client(
                location.bucket,
                prefix=location.prefix or None,
                config=config,
                client_options={
                    "allow_http": location.plain_http,  # location.py allows it for loopback only
                    "connect_timeout": timedelta(seconds=10),
                    "timeout": timedelta(minutes=10),  # a whole request, 64 MiB on a slow link
                },
                retry_config={
                    "max_retries": retry.attempts,
                    "backoff": {
                        "init_backoff": timedelta(seconds=retry.first_backoff_s),
                        "max_backoff": timedelta(seconds=retry.max_backoff_s),
                        "base": 2,
                    },
                    "retry_timeout": timedelta(seconds=retry.within_s),
                },
                credential_provider=self._chain.provider,
            )
        except Exception as exc:  # obstore's configuration errors; they name no secret
            raise self._error("opening the store", exc) from None

    def describe(self) -> str:
        return self.location.describe()

    # -- missing ------------------------------------------------------------------------

    def missing(self, objects: Sequence[Pointer]) -> list[Pointer]:
        wanted = list(dict.fromkeys(objects))
        shards: dict[str, list[Pointer]] = defaultdict(list)
        for pointer in wanted:
            shards[self._key(pointer)[:2]].append(pointer)
        with _pool(self.concurrency, "s3-missing") as pool:
            heads: dict[Future[bool], Pointer] = {}
            listings = []
            for shard, pointers in shards.items():
                if len(pointers) >= _HEADS_PER_PAGE:
                    listings.append(pool.submit(self._listed, shard, pointers))
                else:
                    heads.update((pool.submit(self._held, p), p) for p in pointers)
            held: set[Pointer] = set()
            for listing in listings:
                known, unsettled = listing.result()
                held |= known
                heads.update((pool.submit(self._held, p), p) for p in unsettled)
            held |= {pointer for future, pointer in heads.items() if future.result()}
        return [p for p in wanted if p not in held]

    def _held(self, pointer: Pointer) -> bool:
        """Whether the bucket holds the object, at its size (one HEAD)."""
        import obstore

        try:
            return obstore.head(self._client, self._key(pointer))["size"] == pointer.size
        except Exception as exc:
            if s3_code(exc) in _NOT_FOUND:
                return False
            raise self._diagnosed(f"asking for sha256:{pointer.oid[:12]}", exc) from None

    def _listed(self, shard: str, pointers: list[Pointer]) -> tuple[set[Pointer], list[Pointer]]:
        """Those of `pointers` the shard's listing shows, and those it did not reach."""
        import obstore

        want = {self._key(p): p for p in pointers}
        sizes: dict[str, int] = {}
        budget = max(1, len(pointers) // _HEADS_PER_PAGE)
        reached: str | None = None  # the last key listed, when the listing stopped early
        try:
            for pages, page in enumerate(obstore.list(self._client, shard, chunk_size=_PAGE), 1):
                sizes.update((m["path"], m["size"]) for m in page if m["path"] in want)
                if pages >= budget and len(page) == _PAGE:
                    reached = page[-1]["path"]
                    break
        except Exception as exc:
            raise self._error(f"listing {shard}/", exc) from None
        known = {p for key, p in want.items() if sizes.get(key) == p.size}
        unsettled = [p for key, p in want.items() if reached is not None and key > reached]
        return known, unsettled

    # -- upload -------------------------------------------------------------------------

    def upload(
        self,
        objects: Iterable[Pointer | None],
        read: Callable[[Pointer], Body],
        progress: Progress | None = None,
        settled: Callable[[Pointer], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
    ) -> int:
        """missing() asked per chunk of `objects` as they come (the caller hashes them lazily),
        every PUT in one queue: the first objects go while later ones are still hashed. A
        chunk the bucket held whole makes the next one 4x larger, up to `_MAX_CHUNK_BYTES`,
        so a push the bucket mostly holds lists shards instead of asking key by key."""
        with _pool(self.concurrency, "s3-upload") as pool:
            uploads = Uploads(pool, progress, settled, failed)
            cut = Chunks(objects, max_bytes=_CHUNK_BYTES)
            for chunk in cut:
                todo = self.missing(chunk)
                for pointer in todo:
                    uploads.start(pointer, self._put, pointer, read)
                for pointer in set(chunk) - set(todo):
                    uploads.there(pointer)
                grown = min(_MAX_CHUNK_BYTES, 4 * (cut.max_bytes or _CHUNK_BYTES))
                cut.max_bytes = _CHUNK_BYTES if todo else grown
                uploads.collect()
            return uploads.finish()

    def _put(self, pointer: Pointer, read: Callable[[Pointer], Body]) -> bool:
        import obstore

        data = sized(read, pointer, self.describe())
        if isinstance(data, Pieces):
            data = data.joined()  # obstore takes one buffer
        try:
            obstore.put(
                self._client,
                self._key(pointer),
                data,
                use_multipart=len(data) > _SINGLE_PUT_MAX,
                chunk_size=_PART,
                max_concurrency=_PARTS_AT_ONCE,
            )
        except Exception as exc:
            raise self._error(f"upload of sha256:{pointer.oid[:12]}", exc) from None
        return True

    # -- download -----------------------------------------------------------------------

    def download(
        self, objects: Sequence[Pointer], progress: Progress | None = None
    ) -> Iterator[tuple[Pointer, Data]]:
        wanted = list(dict.fromkeys(objects))
        for pointer in wanted:
            self._key(pointer)  # a damaged id fails before any request
        with _pool(self.concurrency, "s3-download") as pool:
            for pointer, data in ahead(
                iter(wanted),
                self._get,
                lambda p: p.size,
                pool,
                limit=self.concurrency,
                max_bytes=_AHEAD_BYTES,
            ):
                if progress:
                    progress(pointer.size)
                yield pointer, data

    def _get(self, pointer: Pointer) -> Data:
        import obstore

        try:
            data = memoryview(obstore.get(self._client, self._key(pointer)).bytes())  # no copy
        except Exception as exc:
            if s3_code(exc) in _NOT_FOUND:
                raise BlobStoreError(
                    f"{self.describe()} lacks object sha256:{pointer.oid[:12]} "
                    f"({pointer.size} bytes); push it again from a clone that has it, "
                    "or fetch from another remote"
                ) from None
            raise self._error(f"download of sha256:{pointer.oid[:12]}", exc) from None
        return verified(self, pointer, data)  # here: the workers hash in parallel

    # -- helpers ------------------------------------------------------------------------

    def _key(self, pointer: Pointer) -> str:
        """The object's key under the prefix: `<oid[0:2]>/<oid[2:4]>/<oid>`."""
        oid = pointer.oid
        if not _OID.fullmatch(oid):  # ids come from pointer files anyone could have pushed
            raise BlobStoreError(
                f"object id {oid[:70]!r} is not a SHA-256; the pointer that names it is damaged: "
                "run `git mgit fsck`"
            )
        return f"{oid[0:2]}/{oid[2:4]}/{oid}"

    def _error(self, doing: str, exc: BaseException) -> BlobStoreError:
        return store_error(
            self.describe(),
            doing,
            exc,
            bucket=self.location.bucket,
            source=self._chain.source,
            secrets=self._chain.secrets,
        )

    def _diagnosed(self, doing: str, exc: BaseException) -> BlobStoreError:
        """A HEAD's failure has no body: one LIST request asks the store why, by S3 code."""
        import obstore

        if s3_code(exc).startswith("HTTP 5"):
            return self._error(doing, exc)
        try:
            next(iter(obstore.list(self._client, "00", chunk_size=1)), None)
        except Exception as listing:
            return self._error(doing, listing)
        return self._error(doing, exc)


@contextmanager
def _pool(workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    """Threads for one call; on the way out (a failure, a caller that stopped reading)
    requests not started are dropped and those running are waited for."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
