"""Where a bucket is: `s3://bucket/prefix?endpoint=...&region=...`, checked before any request.

Credentials never appear in a location: an endpoint with a user or password
is refused, and plain HTTP is allowed to loopback only (MinIO or SeaweedFS
on this machine), so signed requests never cross a network in clear.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

from git_mgit.transfer.stores.blobs import BlobStoreError

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]")
_SEGMENT = re.compile(r"[A-Za-z0-9!\-_.*'()]+")  # AWS's "safe characters" for keys


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str = ""  # no leading or trailing slash; "" for the bucket's root
    endpoint: str | None = None  # None: AWS
    region: str | None = None  # None: the AWS chain's (AWS_REGION, the profile's), else us-east-1

    @property
    def url(self) -> str:
        """The store's URL, as pointer refs record it."""
        return self.with_settings(self.endpoint, self.region)

    def with_settings(self, endpoint: str | None, region: str | None) -> str:
        query = {k: v for k, v in (("endpoint", endpoint), ("region", region)) if v}
        path = f"/{self.prefix}" if self.prefix else ""
        return f"s3://{self.bucket}{path}" + (
            f"?{urlencode(sorted(query.items()))}" if query else ""
        )

    def describe(self) -> str:
        """For messages: `s3://bucket/prefix`, and the endpoint when it is not AWS."""
        path = f"/{self.prefix}" if self.prefix else ""
        return f"s3://{self.bucket}{path}" + (f" at {self.endpoint}" if self.endpoint else "")

    @property
    def plain_http(self) -> bool:
        return bool(self.endpoint and self.endpoint.startswith("http://"))


def parse_s3_url(url: str) -> S3Location:
    """`s3://bucket/prefix?endpoint=https://host:port&region=r` as a checked S3Location."""
    parts = urlsplit(url.strip())
    if parts.scheme != "s3" or not parts.netloc:
        raise _bad(url, "an S3 store is written s3://bucket/prefix")
    if not _BUCKET.fullmatch(parts.netloc) or ".." in parts.netloc:
        raise _bad(url, f"{parts.netloc!r} is not a bucket name (3-63 of a-z 0-9 . - _)")
    segments = [s for s in parts.path.split("/") if s]
    if any(s in (".", "..") or not _SEGMENT.fullmatch(s) for s in segments):
        raise _bad(url, "a prefix is folder names of letters, digits and !-_.*'()")
    query = dict(parse_qsl(parts.query))
    unknown = set(query) - {"endpoint", "region"}
    if unknown:
        raise _bad(url, f"unknown setting {sorted(unknown)[0]!r} (endpoint and region are known)")
    endpoint = query.get("endpoint") or None
    if endpoint is not None:
        endpoint = _checked_endpoint(url, endpoint)
    region = query.get("region") or None
    if region is not None and not re.fullmatch(r"[a-z0-9\-]{2,32}", region):
        raise _bad(url, f"{region!r} is not a region name")
    return S3Location(parts.netloc, "/".join(segments), endpoint, region)


def _checked_endpoint(url: str, endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(url, f"endpoint {endpoint!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise _bad(url, "the endpoint holds credentials; give them through the AWS chain instead")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise _bad(
            url,
            f"endpoint {parts.scheme}://{parts.netloc} is plain HTTP: signed requests would "
            "cross the network in clear; use https (plain http is for 127.0.0.1 only)",
        )
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bad(url: str, why: str) -> BlobStoreError:
    parts = urlsplit(url.strip())
    shown = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"  # no user, no query
    return BlobStoreError(
        f"S3 store {shown}: {why}; fix git config mgit.store, mgit.s3Endpoint or mgit.s3Region"
    )
