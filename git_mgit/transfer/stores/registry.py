"""From a store's name to the code that speaks to it; adapters are imported only when used."""

from __future__ import annotations

import contextlib
import importlib
import threading

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, anonymized
from git_mgit.transfer.stores.base import Store
from git_mgit.transfer.stores.blobs import BlobStore
from git_mgit.transfer.stores.choice import LFS, REFS, S3, Choice, choose, kind_of


def store_for(repo: Repo, remote: str, choice: Choice, opening: Opening | None = None) -> Store:
    """The Store that publishes to `remote` as `choice` says (a pointer store takes its blob
    store from `opening` when that opened the one chosen)."""
    if choice.kind == REFS:
        from git_mgit.transfer.stores.refs import RefsStore

        return RefsStore(repo, remote, choice)
    from git_mgit.transfer.stores.pointers import PointerStore

    return PointerStore(repo, remote, choice, opening)


def blob_store(repo: Repo, remote: str, url: str) -> BlobStore:
    """The blob store a pointer ref's `store <url>` names, reached from `remote`."""
    kind = kind_of(url)
    if kind == LFS:
        from git_mgit.transfer.stores.lfs import LfsStore

        store = LfsStore.for_remote(repo, remote)
        if store is None:
            raise MgitError(
                f"{anonymized(remote)} has no Git LFS endpoint (a local path or file:// URL): "
                f"set one with `git config remote.{remote}.lfsurl URL`, or "
                "`git config mgit.store refs`"
            )
        return store
    if kind == S3:
        from git_mgit.transfer.stores.s3 import open_s3

        return open_s3(repo, url)
    raise MgitError(
        f"a version ref on {anonymized(remote)} names an unknown store {url!r}: "
        "upgrade git-mgit to fetch it"
    )


# The blob stores' clients: LFS's (http.client) takes ~30 ms to import, obstore's ~30.
_CLIENTS = {LFS: "git_mgit.transfer.stores.lfs.store", S3: "obstore.store"}


def warm_up(*kinds: str) -> None:
    """Import the clients of these blob stores (all, if none named) on a thread of their
    own, for a transfer that will likely need one: it waits on the network or encodes
    meanwhile, and blob_store() then finds them imported (or waits for the import under
    way: Python's import locks see to it)."""
    names = [_CLIENTS[k] for k in kinds if k in _CLIENTS] if kinds else list(_CLIENTS.values())
    threading.Thread(target=_load, args=(names,), name="mgit-import", daemon=True).start()


class Opening:
    """The blob store a push to `remote` likely uses (what config says, else Git LFS where
    the remote has an endpoint), opened on a thread of its own while the push lists the
    remote's refs: its client imported, its endpoint found, credentials a helper has and a
    connection ready (BlobStore.prepare). The choice itself waits for the listing (a
    remote may record its store): take() hands the store over only if it is the one chosen."""

    def __init__(self, repo: Repo, remote: str, operation: str) -> None:
        self._store: BlobStore | None = None
        self._url: str | None = None
        self._lock = threading.Lock()
        self._abandoned = False
        self._thread = threading.Thread(
            target=self._open, args=(repo, remote, operation), name="mgit-open", daemon=True
        )
        self._thread.start()

    def _open(self, repo: Repo, remote: str, operation: str) -> None:
        # best effort: whatever fails here fails again, and is said, where the store is used
        with contextlib.suppress(Exception):
            choice = choose(repo, remote)
            if choice.kind not in _CLIENTS:
                return
            _load([_CLIENTS[choice.kind]])
            store = blob_store(repo, remote, choice.url)
            with self._lock:
                self._store, self._url = store, choice.url
            store.prepare(operation)
        with self._lock:
            if self._abandoned:
                self._close()

    def take(self, url: str) -> BlobStore | None:
        """The store opened for `url` (waiting for it), once; None if another was opened."""
        self._thread.join()
        with self._lock:
            store, self._store = self._store, None
        if store is not None and self._url != url:
            store.close()
            return None
        return store

    def close(self) -> None:
        """Close the store if nothing took it: now, or when it is open (a push that needed
        none does not wait for it)."""
        with self._lock:
            self._abandoned = True
            if not self._thread.is_alive():
                self._close()

    def _close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.close()


def _load(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(ImportError):  # said where it is needed, if it is
            importlib.import_module(name)
