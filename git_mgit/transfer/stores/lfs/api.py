"""Batch requests to one LFS endpoint: where they go, with which credentials, with retries.

An ssh endpoint's requests go to the href git-lfs-authenticate gives, with its
headers; an https one's to `<endpoint>/objects/batch`, with git's credentials
once the server asks for them. git credential is asked about the git
remote's URL when it is on the same scheme and host as the LFS server (so the
credentials git already uses serve LFS too), else about the LFS URL, and for
storage on another origin, about that origin: filled once, its credentials go
with every later object there (lfsapi/auth.go, getCredURLForAPI; git-lfs's
credential cache is keyed by protocol and host). Origins compare with default
ports explicit: https://h and https://h:443 are one.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

from git_mgit.transfer.stores.blobs import Pointer
from git_mgit.transfer.stores.lfs import batch
from git_mgit.transfer.stores.lfs.batch import Answer
from git_mgit.transfer.stores.lfs.endpoint import Endpoint
from git_mgit.transfer.stores.lfs.http import Http, read_body
from git_mgit.transfer.stores.lfs.policy import origin, site
from git_mgit.transfer.stores.lfs.retry import RetryPolicy
from git_mgit.transfer.stores.lfs.sshauth import SshAuthenticator


class BatchApi:
    """The Batch API of one endpoint, for one operation's requests."""

    def __init__(
        self,
        endpoint: Endpoint,
        http: Http,
        retry: RetryPolicy,
        ssh: SshAuthenticator | None,
        where: str,
    ) -> None:
        self.endpoint, self.http, self.retry, self.where = endpoint, http, retry, where
        self._ssh = ssh

    def batch(self, operation: str, objects: Sequence[Pointer]) -> dict[Pointer, Answer]:
        """The server's answer for each of `objects` (at most batch.MAX_OBJECTS)."""

        def attempt() -> dict[Pointer, Answer]:
            base, headers = self._base(operation)
            url = base.rstrip("/") + "/objects/batch"
            response = self.http.send(
                "POST",
                url,
                headers={
                    **headers,
                    "Accept": batch.MEDIA_TYPE,
                    "Content-Type": batch.MEDIA_TYPE,
                },
                body=batch.request_body(operation, objects),
                cred_url=self.credential_url(url),
            )
            data = read_body(response, url)
            if 200 <= response.status < 300:
                return batch.parse_answers(data, objects, self.where)
            raise batch.refused(self.where, operation, response.status, data)

        return self.retry.run(f"the batch {operation} request to {self.where}", attempt)

    def credential_url(self, url: str) -> str:
        """The URL `git credential` is asked about for a request to `url`: for storage on
        another origin, that origin's site, so its every object shares one fill."""
        api = self.endpoint.url
        if origin(url) != origin(api):
            return site(url)
        remote = self.endpoint.remote_url
        if remote and "://" in remote and origin(remote) == origin(api):
            return _bare(remote)
        return _bare(api)

    def _base(self, operation: str) -> tuple[str, dict[str, str]]:
        if self._ssh is not None:
            auth = self._ssh.resolve(operation)
            if auth.href:
                return auth.href, dict(auth.header)
        return self.endpoint.url, {}


def _bare(url: str) -> str:
    """`url` with its user kept (git credential may use it) but no password, query or fragment."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme.lower(), user + host, parts.path, "", ""))
