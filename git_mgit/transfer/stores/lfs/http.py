"""HTTP for the LFS client: kept-alive connections, redirects followed here, credentials by the rules.

- A request is sent without git's credentials until its server answers 401
  (auth.Access); a request that carries its own Authorization (an action's
  header, git-lfs-authenticate's) never gets git's.
- Redirects are followed here, so that a hop to another scheme, host or
  port drops every Authorization header and asks for no credentials there.
- No Authorization header ever goes over plain http except to loopback.
- git's `http.extraHeader` for a request's URL goes with it (httpconfig.py);
  an Authorization among them (a CI token) stands in for git's credentials.
- Failures worth a retry raise retry.Transient; the caller decides to retry.
"""

from __future__ import annotations

import contextlib
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from http.client import HTTPException, InvalidURL
from typing import TypeVar
from urllib.parse import urljoin

from git_mgit.transfer.stores.blobs import BlobStoreError, Body
from git_mgit.transfer.stores.lfs.auth import Access
from git_mgit.transfer.stores.lfs.connections import Pool, Response
from git_mgit.transfer.stores.lfs.creds import Credential
from git_mgit.transfer.stores.lfs.httpconfig import HttpConfig, Proxy, Route
from git_mgit.transfer.stores.lfs.policy import (
    may_send_credentials,
    origin,
    parsable,
    redact,
    site,
)
from git_mgit.transfer.stores.lfs.proxylogins import ProxyLogins
from git_mgit.transfer.stores.lfs.retry import Transient, retry_after, transient
from git_mgit.transfer.stores.lfs.tls import client_context, tls_failure
from git_mgit.transfer.stores.lfs.trace import trace
from git_mgit.transfer.stores.lfs.tunnel import ProxyRefused, TunnelError, proxy_tls_failure

T = TypeVar("T")

USER_AGENT = "git-mgit (git-lfs compatible)"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 5
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"\]\)]+)")
_QUOTES = re.compile(r"['\"/?]|http", re.IGNORECASE)  # a reason that may quote a URL


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 30.0  # lfs.dialtimeout
    read_s: float = 30.0  # lfs.activitytimeout: silence between bytes


class Http:
    """Requests to one LFS server and the storage its actions point to."""

    def __init__(
        self,
        access: Access,
        pool_size: int,
        timeouts: Timeouts,
        config: HttpConfig | None = None,
    ) -> None:
        """`config`: git's http.* settings (default: none but the environment's)."""
        self._access = access
        self._config = config or HttpConfig([])
        self._logins = ProxyLogins(access.helper)
        # One connection per transfer thread, and one for the caller's batch requests; a
        # thread that finds them all busy waits for one: none is ever left unreturned.
        contexts = partial(client_context, helper=access.helper)
        self._pool = Pool(pool_size + 1, timeouts.connect_s, timeouts.read_s, contexts)

    def close(self) -> None:
        self._pool.close()

    def prepare(self, url: str, cred_url: str) -> None:
        """Credentials a helper has and a connection, ready for a first request to `url`,
        which then starts at once (best effort: that request fails as usual if they do not).
        Never prompts: no connection where a key's passphrase or a proxy's password would
        have to be asked for."""
        self._access.prefill(cred_url)
        with contextlib.suppress(OSError, HTTPException, ValueError, BlobStoreError):
            route = self._route(url, prompt=False)
            if route is not None and not _asks_passphrase(route):
                self._pool.connect(url, route)

    def send(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str],
        body: Body | None = None,
        cred_url: str | None = None,
    ) -> Response:
        """The final response (body unread; the caller reads and releases it).

        `cred_url`: the URL git credential describes (None: never use git's credentials).
        Raises Transient for a connection failure or a status worth retrying.
        """
        headers = {"User-Agent": USER_AGENT, **headers}
        _check(url)
        hop = _under(self._config.headers(url), headers)  # what each request to `url` carries
        if _has_auth(hop):
            cred_url = None
        sent: Credential | None = self._access.current(cred_url) if cred_url else None
        redirects = 0  # a 401 answered with credentials is no redirect
        while True:
            wire = dict(hop)
            if _has_auth(wire):  # its own, or an extra header's (a path's, after a redirect)
                cred_url, sent = None, None
            elif sent is not None:
                wire["Authorization"] = sent.authorization()
            response = self._request(method, url, wire, body)
            try:
                status = response.status
                if status in _REDIRECTS and response.headers.get("Location"):
                    _discard(response)
                    redirects += 1
                    if redirects > _MAX_REDIRECTS:
                        raise BlobStoreError(
                            f"{redact(url)}: more than {_MAX_REDIRECTS} redirects; check the LFS URL"
                        )
                    target = _followed(url, response.headers["Location"])
                    if url.startswith("https:") and not target.startswith("https:"):
                        # the body and the action's headers would cross the network in clear
                        raise BlobStoreError(
                            f"{redact(url)} redirected to plain http ({redact(target)}); "
                            "refusing to send the request unencrypted: report it to the "
                            "server's owner, or set the LFS URL to where it should go"
                        )
                    if origin(target) != origin(url):
                        headers = _without(headers, "authorization")
                        cred_url, sent = None, None
                    if status == 303 or (status in (301, 302) and method == "POST"):
                        method, body = "GET", None
                        headers = _without(headers, "content-length")
                    url = target
                    hop = _under(self._config.headers(url), headers)
                    continue
                if status == 401 and cred_url is not None:
                    _discard(response)
                    if sent is not None:
                        self._access.reject(cred_url, sent)
                        raise BlobStoreError(
                            f"{redact(url)} refused the credentials git's credential helper "
                            f"gave for {site(cred_url)} (HTTP 401) and they were rejected "
                            "(git credential reject); store the right ones in your credential helper"
                        )
                    sent = self._access.fill(cred_url, None)
                    continue
                if sent is not None and cred_url is not None and 200 <= status < 300:
                    self._access.approve(cred_url, sent)
                if transient(status):
                    _discard(response)
                    raise Transient(
                        f"HTTP {status} from {redact(url)}", retry_after(response.headers)
                    )
                return response
            except BaseException:  # whatever failed, the connection goes back (closed if unread)
                response.release()
                raise

    def _request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: Body | None,
    ) -> Response:
        route = self._route(url)
        assert route is not None  # prompts allowed: a route or an error
        proxy = route.proxy
        # the proxy takes the request itself (its 407 and TLS are its own), or tunnels it
        at_proxy = proxy is not None and proxy.takes_requests_for(url.partition(":")[0])
        if _has_auth(headers) and not may_send_credentials(url, proxy and proxy.host):
            raise BlobStoreError(
                f"{redact(url)}: refusing to send credentials over plain http to a host, or "
                "through a proxy, that is not this machine; use an https URL for the LFS server"
            )
        try:
            response = self._pool.request(method, url, body, headers, route)
        except ssl.SSLError as exc:
            if at_proxy:
                raise proxy_tls_failure(proxy, exc) from None
            raise tls_failure(redact(url), exc, route.tls) from None
        except (ValueError, InvalidURL):  # from an answer or redirect: no retry mends it
            raise _unsendable(url) from None
        except ProxyRefused as refused:
            if refused.login:
                self._logins.refused(proxy)
            raise _proxy_refused(url, proxy, str(refused), refused.login) from None
        except TunnelError as exc:  # its message names the proxy and what it said
            raise Transient(f"{exc} (for {redact(url)})") from None
        except (OSError, HTTPException) as exc:
            through = f" through proxy {proxy.shown}" if proxy else ""
            raise Transient(f"{describe(exc)} talking to {redact(url)}{through}") from None
        trace(f"{method} {redact(url)} -> {response.status}")
        if response.status == 407 and at_proxy:
            _discard(response)
            self._logins.refused(proxy)
            raise _proxy_refused(
                url, proxy, f"proxy {proxy.shown} answered 407 (Proxy Authentication Required)"
            )
        self._logins.worked(proxy)
        return response

    def _route(self, url: str, prompt: bool = True) -> Route | None:
        """The way to `url` (git's settings for it), the proxy's password filled in where
        its URL names a user only; None where `prompt` is False and no helper has it."""
        route = self._config.route(url)
        proxy = self._logins.filled(route.proxy, prompt)
        if proxy is route.proxy:  # no password to fill in (the usual case): as configured
            return route
        return None if proxy is None else replace(route, proxy=proxy)


def _asks_passphrase(route: Route) -> bool:
    """Whether opening a connection by `route` asks for a client key's passphrase."""
    tls = [route.tls] + ([route.proxy.tls] if route.proxy else [])
    return any(t.password_protected and t.cert for t in tls)


def _proxy_refused(url: str, proxy: Proxy | None, why: str, login: bool = True) -> BlobStoreError:
    setting = proxy.setting if proxy else "http.proxy"
    fix = (
        f"give its user and password in {setting} (scheme://user:password@host:port)"
        if login
        else f"ask its keepers to let the server through, or change {setting}"
    )
    return BlobStoreError(f"the proxy for {redact(url)} refused it ({why}); {fix}")


def read_body(response: Response, url: str, limit: int | None = None) -> bytes:
    """The whole body (at most `limit` bytes are read: more is the caller's to judge);
    a body cut short is Transient."""

    def read() -> tuple[bytes, bool]:
        if limit is None:
            return response.read(), True
        parts, total = [], 0
        while total <= limit and (piece := response.read(min(1 << 20, limit + 1 - total))):
            parts.append(piece)
            total += len(piece)
        data = b"".join(parts)
        return data, response.isclosed() or len(data) <= limit

    return _released(response, url, read)


def read_object(response: Response, url: str, size: int) -> bytes | memoryview:
    """At most size + 1 bytes of the body (one more tells the caller it is too long).

    A body whose Content-Length is the pointer's size is received straight into one
    buffer: read() in pieces would copy every byte twice more (the pieces, then their
    join), which on a small VM costs about as much as the SHA-256 that checks them.
    Any other (encoded, chunked, of another length) is read as it comes: a pointer's
    size, which a remote's refs say, must not take memory before the bytes arrive."""
    raw = response.raw
    encoded = response.headers.get("Content-Encoding", "identity").lower() != "identity"
    if encoded or getattr(raw, "length", None) != size:
        return read_body(response, url, limit=size)

    def read() -> tuple[memoryview, bool]:
        buf = memoryview(bytearray(size + 1))
        got = 0
        while got <= size and (n := raw.readinto(buf[got:])):
            got += n
        if got <= size and getattr(raw, "length", None):  # http.client returns 0 at an early end
            raise Transient(f"IncompleteRead: connection closed reading from {redact(url)}")
        return buf[:got], response.isclosed() or got <= size

    return _released(response, url, read)


def _released(response: Response, url: str, read: Callable[[], tuple[T, bool]]) -> T:
    """What `read` returns (the body, and whether it was read to its end), the connection
    released after: closed when bytes are left unread (it cannot carry another request)."""
    whole = False
    try:
        data, whole = read()
        return data
    except (OSError, HTTPException) as exc:
        raise Transient(f"{describe(exc)} reading from {redact(url)}") from None
    finally:
        if not whole:
            response.close()
        response.release()


def describe(exc: BaseException) -> str:
    """A connection's failure in a few words, never its URL or anything it quotes (hrefs
    carry tokens in queries)."""
    name = type(exc).__name__
    errno = _ERRNO.search(str(exc))
    if errno:
        return f"{name}: {errno[1].strip()}"
    reason = exc.args[0] if exc.args else None
    if isinstance(reason, str) and not _QUOTES.search(reason):
        return f"{name}: {reason}"
    return name


def _check(url: str) -> str:
    """`url`, if a request can be sent to it; else the one-line error."""
    if not parsable(url):
        raise _unsendable(url)
    return url


def _followed(url: str, location: str) -> str:
    """Where a redirect's `location` points from `url`, if a request can go there."""
    try:
        return _check(urljoin(url, location))
    except ValueError:  # urljoin could not take `location` apart
        raise _unsendable(location) from None


def _unsendable(url: str) -> BlobStoreError:
    return BlobStoreError(
        f"{redact(url)}: not a URL a request can go to (not http(s), a bad port or host, or "
        "spaces or control characters in it); check the LFS URL, or report it to the LFS "
        "server's operator"
    )


def _under(extra: list[tuple[str, str]], headers: dict[str, str]) -> dict[str, str]:
    """`headers` over git's extra headers: a name in both (in any case) keeps the request's
    own value (an action's Authorization over a CI token), as git-lfs sets them. An extra
    header goes out as the bytes git config holds (http.client sends a str as latin-1)."""
    own = {name.lower() for name in headers}
    raw = {_bytes_as_is(k): _bytes_as_is(v) for k, v in extra if k.lower() not in own}
    return {**raw, **headers}


def _bytes_as_is(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").decode("latin-1")


def _without(headers: dict[str, str], name: str) -> dict[str, str]:
    """`headers` less `name` (lower case), whatever its case there."""
    return {k: v for k, v in headers.items() if k.lower() != name}


def _has_auth(headers: dict[str, str]) -> bool:
    return any(k.lower() == "authorization" for k in headers)


def _discard(response: Response) -> None:
    with contextlib.suppress(OSError, HTTPException):
        response.drain()
    response.release()
