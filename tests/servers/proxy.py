"""Proxies on 127.0.0.1, as a company network puts between its machines and the servers
outside.

ForwardProxy is an HTTP proxy: `CONNECT host:port` tunnels for https, absolute-URI
requests for http (each on a connection of its own upstream, closed after its answer);
given certificates, it is an https:// proxy (TLS to the proxy, the same inside).
It can ask for credentials (`Proxy-Authorization: Basic`, 407 otherwise), and it logs
each request it took, so a test sees what went through it:

    with ForwardProxy(credentials=("alice", "secret")) as proxy:
        ...                                    # git config http.proxy proxy.url_with_credentials
        proxy.requests                         # [("CONNECT", "127.0.0.1:4443"), ("POST", "http://...")]

SocksProxy speaks SOCKS 4, 4a and 5 (a user and password, if given, are required: RFC
1929 for SOCKS5, the user id for SOCKS4). It can know names no resolver here knows
(`names`), as a bastion does for the network behind it, and it logs each tunnel (the
target as the client sent it: a name or an address) and the first line sent through
each, which for plain HTTP is the first request's:

    with SocksProxy(names={"lfs.internal.test": "127.0.0.1"}) as proxy:
        ...                                    # git config http.proxy proxy.url("socks5h")
        proxy.tunnels                          # [("socks5", "lfs.internal.test:4443"), ...]
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import select
import socket
import socketserver
import ssl
import struct
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from tests.gitsandbox import ServedOnThread, without_delay
from tests.servers.tls import Certificates

_COPY = 1 << 16
_IDLE_S = 30  # a tunnel silent this long both ways is closed
_MAX_LINE = 1 << 16
_HOP_BY_HOP = (b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive")


def _bind(proxy: ServedOnThread, handler: type[socketserver.BaseRequestHandler]) -> None:
    """A port on loopback for `proxy`, each client served on a thread of its own by
    `handler` (which finds the proxy as its server's `proxy`)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.proxy = proxy  # type: ignore[attr-defined]
    proxy._server = server
    proxy.port = server.server_address[1]  # type: ignore[attr-defined]
    proxy._thread = threading.Thread(target=server.serve_forever, daemon=True)


class ForwardProxy(ServedOnThread):
    """The proxy, bound at construction, serving while entered."""

    def __init__(
        self,
        credentials: tuple[str, str] | None = None,
        tls: Certificates | None = None,
        blocked: frozenset[str] = frozenset(),
    ) -> None:
        """`tls`: an https:// proxy, TLS to it with that certificate (else plain http://);
        `blocked`: CONNECT targets (`host:port`) its rules refuse with 403."""
        self.credentials = credentials
        self.blocked = blocked
        self.requests: list[tuple[str, str]] = []  # (method, target) of each request taken
        self.refused: list[tuple[str, str]] = []  # requests answered 407
        self._lock = threading.Lock()
        self.context: ssl.SSLContext | None = None
        if tls is not None:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(tls.cert, tls.key)
        _bind(self, _Handler)

    @property
    def url(self) -> str:
        return f"{'https' if self.context else 'http'}://127.0.0.1:{self.port}"

    @property
    def url_with_credentials(self) -> str:
        assert self.credentials is not None
        user, password = self.credentials
        return self.url.replace("://", f"://{user}:{password}@", 1)

    def admits(self, authorization: str) -> bool:
        if self.credentials is None:
            return True
        expected = base64.b64encode(":".join(self.credentials).encode()).decode()
        return authorization.strip() == f"Basic {expected}"

    def took(self, method: str, target: str) -> None:
        with self._lock:
            self.requests.append((method, target))

    def refuse(self, method: str, target: str) -> None:
        with self._lock:
            self.refused.append((method, target))


class _Handler(socketserver.StreamRequestHandler):
    server: socketserver.ThreadingTCPServer
    rbufsize = 0  # nothing read ahead of the request's head: the relay takes the rest
    disable_nagle_algorithm = True

    def setup(self) -> None:
        context = self.server.proxy.context  # type: ignore[attr-defined]
        if context is not None:  # an https:// proxy: TLS first, then HTTP inside it
            self.request = context.wrap_socket(self.request, server_side=True)
        super().setup()

    def finish(self) -> None:
        super().finish()
        if isinstance(self.request, ssl.SSLSocket):  # socketserver closes the plain one
            self.request.close()

    def handle(self) -> None:
        proxy: ForwardProxy = self.server.proxy  # type: ignore[attr-defined]
        start = self.rfile.readline(_MAX_LINE)
        lines = []
        while (line := self.rfile.readline(_MAX_LINE)) not in (b"\r\n", b"\n", b""):
            lines.append(line)
        try:
            method, target, version = start.decode("latin-1").split()
        except ValueError:
            return
        authorization = _header(lines, b"proxy-authorization")
        if not proxy.admits(authorization):
            proxy.refuse(method, target)
            self.wfile.write(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                b'Proxy-Authenticate: Basic realm="test proxy"\r\n'
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )
            return
        if method == "CONNECT" and target in proxy.blocked:
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        proxy.took(method, target)
        try:
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                upstream = without_delay(socket.create_connection((host.strip("[]"), int(port))))
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                parts = urlsplit(target)
                upstream = without_delay(
                    socket.create_connection((parts.hostname, parts.port or 80))
                )
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                kept = [line for line in lines if _name(line) not in _HOP_BY_HOP]
                head = f"{method} {path} {version}\r\n".encode("latin-1")
                upstream.sendall(head + b"".join(kept) + b"Connection: close\r\n\r\n")
        except OSError:
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        with upstream:
            _relay(self.request, upstream)


class SocksProxy(ServedOnThread):
    """The SOCKS proxy, bound at construction, serving while entered."""

    def __init__(
        self, credentials: tuple[str, str] | None = None, names: dict[str, str] | None = None
    ) -> None:
        self.credentials = credentials
        self.names = names or {}  # what this proxy resolves that nothing else here does
        self.tunnels: list[tuple[str, str]] = []  # ("socks4" or "socks5", target as sent)
        self.first_lines: list[bytes] = []  # of the bytes sent through each tunnel
        self.refused: list[str] = []  # why each client was turned away
        self._lock = threading.Lock()
        _bind(self, _SocksHandler)

    def url(self, scheme: str = "socks5h", credentials: tuple[str, str] | None = None) -> str:
        """Its URL for git's settings (`credentials`: the user and password to put in it)."""
        login = f"{credentials[0]}:{credentials[1]}@" if credentials else ""
        return f"{scheme}://{login}127.0.0.1:{self.port}"

    def note(self, kind: str, target: str) -> None:
        with self._lock:
            self.tunnels.append((kind, target))

    def saw(self, line: bytes) -> None:
        with self._lock:
            self.first_lines.append(line)

    def refuse(self, why: str) -> None:
        with self._lock:
            self.refused.append(why)


class _SocksHandler(socketserver.BaseRequestHandler):
    server: socketserver.ThreadingTCPServer
    request: socket.socket

    def handle(self) -> None:
        proxy: SocksProxy = self.server.proxy  # type: ignore[attr-defined]
        without_delay(self.request)
        try:
            version = _exactly(self.request, 1)
            if version == b"\x05":
                target = self._socks5(proxy)
            elif version == b"\x04":
                target = self._socks4(proxy)
            else:
                return
        except OSError:
            return
        if target is None:
            return
        upstream, answer = target
        with upstream:
            self.request.sendall(answer)
            sniffing = _Sniffing(self.request, proxy)
            sending = threading.Thread(target=_pump, args=(sniffing.read, upstream), daemon=True)
            sending.start()
            _pump(upstream.recv, self.request)
            with contextlib.suppress(OSError):
                self.request.shutdown(socket.SHUT_RDWR)
            sending.join()

    def _socks5(self, proxy: SocksProxy) -> tuple[socket.socket, bytes] | None:
        sock = self.request
        methods = _exactly(sock, _exactly(sock, 1)[0])
        if proxy.credentials is None:
            sock.sendall(b"\x05\x00")
        elif b"\x02" not in methods:
            proxy.refuse("socks5: no user and password offered")
            sock.sendall(b"\x05\xff")
            return None
        else:
            sock.sendall(b"\x05\x02")
            _exactly(sock, 1)
            user = _exactly(sock, _exactly(sock, 1)[0]).decode()
            password = _exactly(sock, _exactly(sock, 1)[0]).decode()
            if (user, password) != proxy.credentials:
                proxy.refuse(f"socks5: wrong password for {user}")
                sock.sendall(b"\x01\x01")
                return None
            sock.sendall(b"\x01\x00")
        _, command, _, kind = _exactly(sock, 4)
        if kind == 3:
            host = _exactly(sock, _exactly(sock, 1)[0]).decode()
        else:
            host = str(ipaddress.ip_address(_exactly(sock, 4 if kind == 1 else 16)))
        port = struct.unpack(">H", _exactly(sock, 2))[0]
        proxy.note("socks5", f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        upstream = _reach(proxy, host, port) if command == 1 else None
        if upstream is None:
            sock.sendall(b"\x05\x05\x00\x01" + bytes(6))  # connection refused
            return None
        return upstream, b"\x05\x00\x00\x01" + bytes(6)

    def _socks4(self, proxy: SocksProxy) -> tuple[socket.socket, bytes] | None:
        sock = self.request
        command, port, address = struct.unpack(">BH4s", _exactly(sock, 7))
        user = _until_nul(sock).decode()
        host = str(ipaddress.IPv4Address(address))
        if address[:3] == b"\x00\x00\x00" and address[3]:  # 4a: the name follows
            host = _until_nul(sock).decode()
        if proxy.credentials is not None and user != proxy.credentials[0]:
            proxy.refuse(f"socks4: unknown user {user!r}")
            sock.sendall(b"\x00\x5b" + bytes(6))
            return None
        proxy.note("socks4", f"{host}:{port}")
        upstream = _reach(proxy, host, port) if command == 1 else None
        if upstream is None:
            sock.sendall(b"\x00\x5b" + bytes(6))
            return None
        return upstream, b"\x00\x5a" + bytes(6)


class _Sniffing:
    """A tunnel's client side, read for the relay; its first line is noted."""

    def __init__(self, sock: socket.socket, proxy: SocksProxy) -> None:
        self._sock, self._proxy, self._first = sock, proxy, True

    def read(self, size: int) -> bytes:
        data = self._sock.recv(size)
        if self._first and data:
            self._first = False
            self._proxy.saw(data.split(b"\r\n", 1)[0])
        return data


def _relay(client: socket.socket, upstream: socket.socket) -> None:
    """Copy both ways on one thread until either side ends (a TLS socket must not be read
    on one thread while another writes to it)."""
    peers = {client: upstream, upstream: client}
    while True:
        pending = [s for s in peers if isinstance(s, ssl.SSLSocket) and s.pending()]
        ready = pending or select.select(list(peers), [], [], _IDLE_S)[0]
        if not ready:
            return
        for sock in ready:
            try:
                data = _received(sock)
                if data is None:
                    continue  # a TLS record that held no data (a ticket, a key update)
                if not data:
                    return
                peers[sock].sendall(data)
            except OSError:
                return


def _received(sock: socket.socket) -> bytes | None:
    """What `sock` has (b"": it ended), None if a TLS socket's readable bytes held no data:
    waiting for some would stall the other direction."""
    sock.settimeout(0 if isinstance(sock, ssl.SSLSocket) else None)
    try:
        return sock.recv(_COPY)
    except (ssl.SSLWantReadError, BlockingIOError):
        return None
    finally:
        sock.settimeout(None)


def _reach(proxy: SocksProxy, host: str, port: int) -> socket.socket | None:
    with contextlib.suppress(OSError):
        return without_delay(
            socket.create_connection((proxy.names.get(host, host), port), timeout=10)
        )
    return None


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        got = sock.recv(n - len(data))
        if not got:
            raise OSError("the client left")
        data += got
    return data


def _until_nul(sock: socket.socket) -> bytes:
    data = b""
    while (byte := _exactly(sock, 1)) != b"\x00":
        data += byte
    return data


def _pump(read: Callable[[int], bytes], to: socket.socket) -> None:
    """Copy until the reading side ends, then end the writing side."""
    with contextlib.suppress(OSError, ValueError):
        while data := read(_COPY):
            to.sendall(data)
    with contextlib.suppress(OSError):
        to.shutdown(socket.SHUT_WR)


def _name(line: bytes) -> bytes:
    return line.split(b":", 1)[0].strip().lower()


def _header(lines: list[bytes], name: bytes) -> str:
    for line in lines:
        if _name(line) == name:
            return line.split(b":", 1)[1].strip().decode("latin-1")
    return ""
