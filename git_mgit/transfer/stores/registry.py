"""From a store's name to the code that speaks to it; adapters are imported only when used."""

from __future__ import annotations

import contextlib
import importlib
import threading

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.transfer.stores.base import Store
from git_mgit.transfer.stores.blobs import BlobStore
from git_mgit.transfer.stores.choice import LFS, REFS, S3, Choice, choose, kind_of


def store_for(repo: Repo, remote: str, choice: Choice) -> Store:
    """The Store that publishes to `remote` as `choice` says."""
    if choice.kind == REFS:
        from git_mgit.transfer.stores.refs import RefsStore

        return RefsStore(repo, remote, choice)
    from git_mgit.transfer.stores.pointers import PointerStore

    return PointerStore(repo, remote, choice)


def blob_store(repo: Repo, remote: str, url: str) -> BlobStore:
    """The blob store a pointer ref's `store <url>` names, reached from `remote`."""
    kind = kind_of(url)
    if kind == LFS:
        from git_mgit.transfer.stores.lfs import LfsStore

        store = LfsStore.for_remote(repo, remote)
        if store is None:
            raise MgitError(
                f"{remote} has no Git LFS endpoint (a local path or file:// URL): set one with "
                f"`git config remote.{remote}.lfsurl URL`, or `git config mgit.store refs`"
            )
        return store
    if kind == S3:
        from git_mgit.transfer.stores.s3 import open_s3

        return open_s3(repo, url)
    raise MgitError(
        f"a version ref on {remote} names an unknown store {url!r}: upgrade git-mgit to fetch it"
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


def warm_up_for(repo: Repo, remote: str) -> None:
    """Import the client of the store a push to `remote` likely uses (what config says, else
    Git LFS where the remote has an endpoint) on a thread of its own, while the push lists
    the remote's refs: the choice itself waits for the listing (a remote may record its
    store), and the client would otherwise be imported beside the encoding."""

    def load() -> None:
        # best effort: whatever fails here fails again, and is said, in the push's own choice
        with contextlib.suppress(Exception):
            kind = choose(repo, remote).kind
            _load([_CLIENTS[kind]] if kind in _CLIENTS else [])

    threading.Thread(target=load, name="mgit-import", daemon=True).start()


def _load(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(ImportError):  # said where it is needed, if it is
            importlib.import_module(name)
