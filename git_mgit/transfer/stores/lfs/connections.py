"""Keep-alive HTTP connections for the LFS client, on the standard library's http.client.

A pool per origin (scheme, host, port) holds at most `size` connections, busy
or idle; a thread that finds them all busy waits for one, so every transfer
thread and the caller's batch requests each get one. A connection goes back
to the pool only when its response was read to the end and the server did
not close it; an idle one the server closed meanwhile is dropped before use.
HTTPS verifies the server's certificate and name against the system's CAs
and those git's `http.sslCAInfo` / `http.sslCAPath` name (httpconfig.py says
what the client takes from git's `http.*` settings). A server behind a proxy
is reached through it: absolute-URI requests for http through an HTTP proxy,
else a tunnel (tunnel.py: CONNECT, or SOCKS). The connect timeout covers
opening a connection, the read timeout each silence after it.

urllib3 did this before: importing it took about 45 ms of every LFS process
(a clone's filter, a push's hook) on a small VM, for nothing this needs.
"""

from __future__ import annotations

import select
import ssl
import threading
from collections.abc import Callable, Iterable
from http.client import HTTPConnection, HTTPMessage, HTTPResponse, HTTPSConnection
from ssl import SSLContext
from urllib.parse import urlsplit

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs import tunnel
from git_mgit.transfer.stores.lfs.httpconfig import Route, Tls
from git_mgit.transfer.stores.lfs.policy import origin
from git_mgit.transfer.stores.lfs.tls import TlsInTls, client_context, wrap

Origin = tuple[str, str, int]
DIRECT = Route()  # no proxy, the system's CAs


class Response:
    """A response whose body the caller reads, then hands back with release()."""

    def __init__(self, raw: HTTPResponse, conn: HTTPConnection, home: _Origin) -> None:
        self.raw = raw  # read straight into a buffer by read_object (readinto, length)
        self.status: int = raw.status
        self.headers: HTTPMessage = raw.headers
        self._conn: HTTPConnection | None = conn
        self._home = home

    def read(self, amt: int | None = None) -> bytes:
        return self.raw.read(amt)

    def isclosed(self) -> bool:
        """Whether the body was read to its end."""
        return self.raw.isclosed()

    def drain(self) -> None:
        """Read what is left of the body, and release the connection."""
        try:
            while self.raw.read(1 << 16):
                pass
        finally:
            self.release()

    def close(self) -> None:
        """Close the connection: bytes are left unread, so it cannot carry another request."""
        self.raw.close()
        if self._conn is not None:
            self._conn.close()

    def release(self) -> None:
        """Hand the connection back: kept for the next request if the body was read to its
        end and the server keeps it open, else closed. Once only."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        reusable = self.raw.isclosed() and not self.raw.will_close and conn.sock is not None
        if not reusable:
            conn.close()
        self._home.put(conn if reusable else None)


class _Origin:
    """One origin's connections: idle ones, and a count of those lent out."""

    def __init__(
        self,
        origin: Origin,
        route: Route,
        size: int,
        timeouts: tuple[float, float],
        tls: Callable[[Tls], SSLContext],
    ) -> None:
        self.origin, self.route = origin, route
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[HTTPConnection] = []
        self._lock = threading.Lock()
        self._connect_s, self._read_s = timeouts
        self._tls = tls

    @property
    def proxied(self) -> bool:
        """Whether requests go to a proxy in absolute form (http through an HTTP proxy)."""
        proxy = self.route.proxy
        return proxy is not None and proxy.takes_requests_for(self.origin[0])

    def get(self) -> HTTPConnection:
        """An open connection: an idle one still open, else a new one (waits for a slot)."""
        self._slots.acquire()
        try:
            while True:
                with self._lock:
                    conn = self._idle.pop() if self._idle else None
                if conn is None:
                    return self._open()
                if not _dropped(conn):
                    return conn
                conn.close()
        except BaseException:
            self._slots.release()
            raise

    def put(self, conn: HTTPConnection | None) -> None:
        """A connection back (None: it was closed), freeing its slot."""
        if conn is not None:
            with self._lock:
                self._idle.append(conn)
        self._slots.release()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _open(self) -> HTTPConnection:
        scheme, host, port = self.origin
        proxy = self.route.proxy
        conn: HTTPConnection
        if proxy is None:
            if scheme == "https":
                context = self._tls(self.route.tls)
                conn = HTTPSConnection(host, port, timeout=self._connect_s, context=context)
            else:
                conn = HTTPConnection(host, port, timeout=self._connect_s)
            conn.connect()
        elif self.proxied:  # the proxy takes the requests themselves
            conn = HTTPConnection(proxy.host, proxy.port, timeout=self._connect_s)
            conn.sock = tunnel.reach(proxy, self._connect_s, self._tls)
        else:  # TLS or HTTP inside a tunnel
            sock = tunnel.connect(proxy, host, port, self._connect_s, self._tls)
            try:
                if scheme == "https":
                    context = self._tls(self.route.tls)
                    conn = HTTPSConnection(host, port, timeout=self._connect_s, context=context)
                    conn.sock = wrap(sock, context, host)
                else:
                    conn = HTTPConnection(host, port, timeout=self._connect_s)
                    conn.sock = sock
            except BaseException:
                sock.close()
                raise
        assert conn.sock is not None
        conn.sock.settimeout(self._read_s)
        return conn


class Pool:
    """Connections to every origin the client talks to (the LFS API, its storage)."""

    def __init__(
        self,
        size: int,
        connect_s: float,
        read_s: float,
        contexts: Callable[[Tls], SSLContext] = client_context,
    ) -> None:
        """`contexts`: the TLS context for a set of settings (made once for each)."""
        self._size, self._timeouts = size, (connect_s, read_s)
        self._make_context = contexts
        self._origins: dict[tuple[Origin, Route], _Origin] = {}
        self._lock = threading.Lock()
        self._contexts: dict[Tls, SSLContext] = {}
        self._failed: dict[Tls, str] = {}  # settings whose context could not be made: why

    def request(
        self,
        method: str,
        url: str,
        body: bytes | memoryview | Iterable[memoryview] | None,
        headers: dict[str, str],
        route: Route = DIRECT,
    ) -> Response:
        """Send one request by `route` (the caller's reading of git's settings: proxy, TLS)
        and read its status and headers; the body is the caller's.
        Raises ValueError for a URL that is not http(s) or has a bad port, InvalidURL for
        one with spaces or control characters, OSError (ssl.SSLError for TLS) or
        http.client.HTTPException on failure, BlobStoreError for settings that cannot be
        used (a CA file)."""
        home = self._origin(url, route)
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        proxy = home.route.proxy
        if home.proxied and proxy is not None:
            target = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{target}"
            if proxy.authorization:
                headers = {**headers, "Proxy-Authorization": proxy.authorization}
        conn = home.get()
        try:
            # http.client frames a bytes body by its length, an iterable one by the
            # Content-Length the caller set (else chunked)
            conn.request(method, target, body=body, headers=headers)
            raw = conn.getresponse()
        except BaseException:
            conn.close()
            home.put(None)
            raise
        return Response(raw, conn, home)

    def connect(self, url: str, route: Route = DIRECT) -> None:
        """Open a connection to `url`'s server ahead of its first request (TLS included),
        kept idle for it. Raises as request() does."""
        home = self._origin(url, route)
        conn = home.get()
        home.put(conn)

    def close(self) -> None:
        with self._lock:
            origins = list(self._origins.values())
        for home in origins:
            home.close()

    def _origin(self, url: str, route: Route) -> _Origin:
        """The connections for `url`'s server by `route`."""
        scheme, host, port = origin(url)
        if port is None:
            raise ValueError(f"not an http(s) URL: {scheme}")
        key = ((scheme, host, port), route)
        with self._lock:
            home = self._origins.get(key)
            if home is None:
                home = _Origin(*key, self._size, self._timeouts, self._tls)
                self._origins[key] = home
            return home

    def _tls(self, tls: Tls) -> SSLContext:
        """One TLS context for each set of settings (loading the CAs takes a while)."""
        with self._lock:
            context = self._contexts.get(tls)
            if context is None:
                if tls in self._failed:  # asked once, refused: never asked again
                    raise BlobStoreError(self._failed[tls])
                try:
                    context = self._contexts[tls] = self._make_context(tls)
                except BlobStoreError as exc:
                    self._failed[tls] = str(exc)
                    raise
            return context


def _dropped(conn: HTTPConnection) -> bool:
    """Whether an idle connection was closed by the server. Readable means EOF or junk,
    unless the bytes were TLS records without data: TLS 1.3 servers send session tickets
    after the handshake, so a connection opened ahead of its first request is readable."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    if not readable:
        return False
    if isinstance(sock, TlsInTls):
        return not sock.idle()
    if not isinstance(sock, ssl.SSLSocket):
        return True
    timeout = sock.gettimeout()
    sock.settimeout(0)
    try:
        sock.recv(1)  # b"": closed; a byte: junk where nothing was asked
        return True
    except ssl.SSLWantReadError:
        return False  # records only, and nothing more yet
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)
