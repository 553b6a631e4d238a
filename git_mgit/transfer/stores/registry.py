"""From a store's name to the code that speaks to it; adapters are imported only when used."""

from __future__ import annotations

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.transfer.stores.base import Store
from git_mgit.transfer.stores.blobs import BlobStore
from git_mgit.transfer.stores.choice import LFS, REFS, S3, Choice, kind_of


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
