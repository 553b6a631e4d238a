"""A proxy's password from git credential, where the proxy's URL names a user only.

git does this (http.c, init_curl_proxy_auth): `http.proxy =
http://alice@proxy:3128` makes it ask `git credential fill` for
protocol=http, host=proxy:3128, username=alice, approve what worked and
reject what the proxy refused. The password is asked for once per command,
whichever thread needs it first; the others wait for that answer.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from urllib.parse import quote

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.creds import Credential, GitCredentials
from git_mgit.transfer.stores.lfs.httpconfig import Proxy


class ProxyLogins:
    """Passwords filled for proxies, and whether each has been approved yet."""

    def __init__(self, helper: GitCredentials) -> None:
        self._helper = helper
        self._lock = threading.Lock()
        self._filled: dict[Proxy, tuple[Proxy, Credential]] = {}  # as set -> (filled, from)
        self._approved: set[Proxy] = set()  # filled ones whose password was approved

    def filled(self, proxy: Proxy | None, prompt: bool) -> Proxy | None:
        """`proxy` with its password where its URL gave a user only (None where `prompt` is
        False and no helper has one); `proxy` itself otherwise."""
        if proxy is None or proxy.user is None or proxy.password is not None:
            return proxy
        with self._lock:  # one question at a time: the first thread's answer serves all
            found = self._filled.get(proxy)
            if found is None:
                try:
                    credential = self._helper.fill(_credential_url(proxy), prompt=prompt)
                except BlobStoreError:
                    if prompt:
                        raise
                    return None
                found = (replace(proxy, password=credential.get("password") or ""), credential)
                self._filled[proxy] = found
            return found[0]

    def worked(self, proxy: Proxy | None) -> None:
        """The proxy took a request with this password: approve it, once."""
        if not self._may_be_filled(proxy):
            return
        assert proxy is not None
        with self._lock:
            credential = self._credential(proxy)
            if credential is None or proxy in self._approved:
                return
            self._approved.add(proxy)
        self._helper.approve(credential)

    def refused(self, proxy: Proxy | None) -> None:
        """The proxy refused this password: reject it and forget it."""
        if not self._may_be_filled(proxy):
            return
        assert proxy is not None
        with self._lock:
            credential = self._credential(proxy)
            if credential is None:
                return
            del self._filled[_as_set(proxy)]
            self._approved.discard(proxy)
        self._helper.reject(credential)

    def _may_be_filled(self, proxy: Proxy | None) -> bool:
        """Cheap, on every request: whether `proxy` may be one this filled a password in."""
        return proxy is not None and proxy.password is not None and bool(self._filled)

    def _credential(self, proxy: Proxy) -> Credential | None:
        """What `proxy`'s password was filled from, if this filled it (under the lock)."""
        found = self._filled.get(_as_set(proxy))
        return found[1] if found is not None and found[0] == proxy else None


def _as_set(proxy: Proxy) -> Proxy:
    """The proxy as git's settings gave it, before its password was filled in."""
    return replace(proxy, password=None)


def _credential_url(proxy: Proxy) -> str:
    """The proxy as git credential is asked about it; the user (taken apart from its
    setting, so decoded) quoted again, as request_fields() decodes it once more."""
    host = f"[{proxy.host}]" if ":" in proxy.host else proxy.host
    return f"{proxy.scheme}://{quote(proxy.user or '', safe='')}@{host}:{proxy.port}"
