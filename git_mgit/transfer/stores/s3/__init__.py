"""An S3-compatible bucket as a blob store: AWS S3, MinIO, SeaweedFS, Cloudflare R2, GCS's S3 API.

Objects live at `<prefix>/<oid[0:2]>/<oid[2:4]>/<oid>` in the bucket (oid: the
SHA-256 of the bytes, as a Git LFS object id), so a listing of one `<oid[0:2]>/`
shard is small and a prefix holds one repository's objects.

- location.py: `s3://bucket/prefix?endpoint=...&region=...`, what may be sent where;
- credentials.py: the standard AWS chain (obstore's own, plus shared profiles);
- errors.py: what the store said, as one line with what to do;
- store.py: S3Store, the BlobStore, on obstore (imported only when a store opens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from git_mgit.transfer.stores.s3.location import S3Location, parse_s3_url

if TYPE_CHECKING:
    from git_mgit.gitcmd import Repo
    from git_mgit.transfer.stores.s3.store import S3Store

__all__ = ["S3Location", "open_s3", "parse_s3_url"]

DEFAULT_CONCURRENCY = 8  # as git-lfs's lfs.concurrenttransfers


def open_s3(repo: Repo, url: str) -> S3Store:
    """The store an `s3://` URL names; endpoint and region the URL lacks come from
    `mgit.s3Endpoint` and `mgit.s3Region`, parallel transfers from `mgit.s3Concurrency`."""
    from git_mgit.transfer.stores.s3.store import S3Store

    location = parse_s3_url(url)
    endpoint = location.endpoint or _setting(repo, "mgit.s3Endpoint")
    region = location.region or _setting(repo, "mgit.s3Region")
    location = parse_s3_url(location.with_settings(endpoint, region))
    text = _setting(repo, "mgit.s3Concurrency")
    concurrency = int(text) if text and text.isdigit() and int(text) > 0 else DEFAULT_CONCURRENCY
    return S3Store(location, concurrency=concurrency)


def _setting(repo: Repo, key: str) -> str | None:
    return (repo.config(key) or "").strip() or None
