"""A remote's Git LFS server as a blob store: batch requests, then parallel basic transfers.

`lfs.concurrenttransfers` objects (default 8) move at once, over a pool of as
many connections. Downloads run ahead of the caller by at most that many
objects and `_AHEAD_BYTES`, so memory stays a few objects whatever the batch;
each object is checked against its SHA-256 and size by the worker that fetched
it (so hashing runs on every core), before it is yielded.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from git_mgit.gitcmd import Repo
from git_mgit.transfer.stores.blobs import (
    BlobStore,
    Body,
    Chunks,
    Data,
    Pointer,
    Progress,
    Uploads,
    sized,
    verified,
)
from git_mgit.transfer.stores.lfs import basic, batch, gitconfig
from git_mgit.transfer.stores.lfs.api import BatchApi
from git_mgit.transfer.stores.lfs.auth import Access, AccessModes
from git_mgit.transfer.stores.lfs.batch import Answer, BatchRefused
from git_mgit.transfer.stores.lfs.creds import GitCredentials
from git_mgit.transfer.stores.lfs.endpoint import Endpoint, endpoint_for
from git_mgit.transfer.stores.lfs.gitconfig import LfsConfig
from git_mgit.transfer.stores.lfs.http import Http, Timeouts
from git_mgit.transfer.stores.lfs.httpconfig import HttpConfig
from git_mgit.transfer.stores.lfs.policy import redact
from git_mgit.transfer.stores.lfs.retry import RetryPolicy
from git_mgit.transfer.stores.lfs.sshauth import SshAuthenticator

_AHEAD_BYTES = 256 << 20
_CHUNK_BYTES = 64 << 20  # an upload's batch request names at most this much (or 100 objects)
_EMPTY = Pointer.of(b"")
# A whole batch refused with these means no asked object is there (giftless answers so
# when every object is missing or damaged; the Batch API's hosts answer 200 with errors).
_NONE_THERE = frozenset({404, 422})


class LfsStore(BlobStore):
    """The LFS server of one remote (its upload endpoint may differ: lfs.pushurl)."""

    def __init__(
        self,
        download: Endpoint,
        upload: Endpoint | None = None,
        *,
        cwd: Path,
        config: LfsConfig | None = None,
        modes: AccessModes | None = None,
        remote_proxy: tuple[str, str] | None = None,
    ) -> None:
        """`remote_proxy`: the remote's `remote.<name>.proxy` setting and value, if set."""
        config = config or LfsConfig()
        self.concurrency = config.number("lfs.concurrenttransfers", 8, 1)
        timeouts = Timeouts(
            connect_s=config.number("lfs.dialtimeout", 30, 1),
            read_s=config.number("lfs.activitytimeout", 30, 1),
        )
        modes = modes or AccessModes()
        access = Access(GitCredentials(cwd), modes)
        http_config = HttpConfig(config.http, remote_proxy=remote_proxy)
        self._http = Http(access, self.concurrency, timeouts, http_config)
        retry = RetryPolicy.from_config(config)
        self.endpoint = download
        self._where = f"Git LFS at {redact(download.url)}"
        self._apis = {
            op: BatchApi(
                ep,
                self._http,
                retry,
                SshAuthenticator(config, ep.ssh, cwd) if ep.ssh else None,
                f"Git LFS at {redact(ep.url)}",
            )
            for op, ep in (("download", download), ("upload", upload or download))
        }
        for api in self._apis.values():  # what git-lfs learnt: `lfs.<endpoint>.access basic`
            if (config.get(f"lfs.{api.endpoint.url}.access") or "").lower() == "basic":
                modes.add(api.credential_url(api.endpoint.url))

    @classmethod
    def for_remote(cls, repo: Repo, remote: str) -> LfsStore | None:
        """The store of `remote` (a name or URL); None when it has no LFS endpoint."""
        config = gitconfig.load(repo)
        download = endpoint_for(repo, remote, "download", config)
        if download is None:
            return None
        upload = endpoint_for(repo, remote, "upload", config)
        modes = AccessModes(repo.mgit_dir / "lfs-access")
        setting = f"remote.{remote}.proxy"  # git's requests to the remote go there too
        proxy = config.get(setting)
        return cls(
            download,
            upload,
            cwd=repo.cwd,
            config=config,
            modes=modes,
            remote_proxy=None if proxy is None else (setting, proxy),
        )

    def describe(self) -> str:
        return self._where

    def prepare(self, operation: str) -> None:
        """Credentials a helper has (for a server known to ask) and a connection to the Batch
        API, so the first batch request goes out at once. Not over ssh: git-lfs-authenticate
        may prompt for a key's passphrase."""
        api = self._apis[operation]
        if api.endpoint.ssh is None:
            url = api.endpoint.url.rstrip("/") + "/objects/batch"
            self._http.prepare(url, api.credential_url(url))

    def close(self) -> None:
        self._http.close()

    def missing(self, objects: Sequence[Pointer]) -> list[Pointer]:
        api = self._apis["download"]
        lacking = []
        for chunk in Chunks([p for p in objects if p != _EMPTY], batch.MAX_OBJECTS):
            try:
                answers = api.batch("download", chunk)
            except BatchRefused as exc:
                if exc.status not in _NONE_THERE:
                    raise
                lacking += chunk
                continue
            for pointer, answer in answers.items():
                code = answer.error[0] if answer.error else None
                if code in (404, 410, 422):  # 422: a size mismatch, an upload cut short
                    lacking.append(pointer)
                elif answer.error:
                    raise batch.object_error(api.where, "download", answer)
        return lacking

    def upload(
        self,
        objects: Iterable[Pointer | None],
        read: Callable[[Pointer], Body],
        progress: Progress | None = None,
        settled: Callable[[Pointer], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
    ) -> int:
        """One batch request per chunk as `objects` come; every upload the server asks for
        goes into one queue of `lfs.concurrenttransfers`, so no chunk waits for the last."""
        api = self._apis["upload"]
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="lfs-upload")
        try:
            uploads = Uploads(pool, progress, settled, failed)
            wanted = (p for p in objects if p != _EMPTY)
            for chunk in Chunks(wanted, batch.MAX_OBJECTS, _CHUNK_BYTES):
                for answer in api.batch("upload", chunk).values():
                    if answer.error:
                        raise batch.object_error(api.where, "upload", answer)
                    if "upload" in answer.actions:
                        uploads.start(answer.pointer, self._upload_one, api, answer, read)
                    else:  # no action: the server holds it already
                        uploads.there(answer.pointer)
                uploads.collect()
            return uploads.finish()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # a failure stops what has not begun

    def _upload_one(self, api: BatchApi, answer: Answer, read: Callable[[Pointer], Body]) -> bool:
        pointer = answer.pointer
        return basic.upload(api, answer, sized(read, pointer, self.describe()))

    def download(
        self, objects: Sequence[Pointer], progress: Progress | None = None
    ) -> Iterator[tuple[Pointer, Data]]:
        api = self._apis["download"]
        wanted = list(dict.fromkeys(objects))
        if _EMPTY in wanted:
            wanted.remove(_EMPTY)
            yield _EMPTY, b""
        chunks = iter(Chunks(wanted, batch.MAX_OBJECTS))
        queue: collections.deque[Answer] = collections.deque()
        running: dict[Future[Data], Pointer] = {}
        ahead = 0
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="lfs-download")
        # The next batch is asked for while this one downloads, as git-lfs does: asked for
        # only once the queue ran dry, its round trip (slowest when the server is busiest
        # sending) left every transfer slot idle.
        asking = ThreadPoolExecutor(1, thread_name_prefix="lfs-batch")

        def ask() -> Future[list[Answer]] | None:
            chunk = next(chunks, None)
            return asking.submit(self._answers, api, chunk) if chunk else None

        upcoming = ask()
        try:
            while True:
                if not queue and upcoming is not None and len(running) < self.concurrency:
                    queue.extend(upcoming.result())
                    upcoming = ask()
                while (
                    queue
                    and len(running) < self.concurrency
                    and (not running or ahead + queue[0].pointer.size <= _AHEAD_BYTES)
                ):
                    answer = queue.popleft()
                    running[pool.submit(self._download_one, api, answer)] = answer.pointer
                    ahead += answer.pointer.size
                if not running:
                    return
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    pointer = running.pop(future)
                    ahead -= pointer.size
                    data = future.result()
                    if progress:
                        progress(pointer.size)
                    yield pointer, data
        finally:
            asking.shutdown(wait=True, cancel_futures=True)
            pool.shutdown(wait=True, cancel_futures=True)

    def _download_one(self, api: BatchApi, answer: Answer) -> Data:
        return verified(self, answer.pointer, basic.download(api, answer))

    @staticmethod
    def _answers(api: BatchApi, chunk: list[Pointer]) -> list[Answer]:
        try:
            answers = api.batch("download", chunk)
        except BatchRefused as exc:
            if exc.status not in _NONE_THERE:
                raise
            first = Answer(chunk[0], error=(exc.status, exc.message))
            raise batch.object_error(api.where, "download", first, len(chunk) - 1) from None
        for answer in answers.values():
            if answer.error:
                raise batch.object_error(api.where, "download", answer)
        return list(answers.values())
