"""A forward HTTP proxy on 127.0.0.1, as a company network puts between its machines and
the servers outside: `CONNECT host:port` tunnels for https, absolute-URI requests for
http (each on a connection of its own upstream, closed after its answer). It can ask for
credentials (`Proxy-Authorization: Basic`, 407 otherwise), and it logs each request it
took, so a test sees what went through it:

    with ForwardProxy(credentials=("alice", "secret")) as proxy:
        ...                                    # git config http.proxy proxy.url_with_credentials
        proxy.requests                         # [("CONNECT", "127.0.0.1:4443"), ("POST", "http://...")]
"""

from __future__ import annotations

import base64
import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from tests.gitsandbox import ServedOnThread

_COPY = 1 << 16
_MAX_LINE = 1 << 16
_HOP_BY_HOP = (b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive")


class ForwardProxy(ServedOnThread):
    """The proxy, bound at construction, serving while entered."""

    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        self.credentials = credentials
        self.requests: list[tuple[str, str]] = []  # (method, target) of each request taken
        self.refused: list[tuple[str, str]] = []  # requests answered 407
        self._lock = threading.Lock()
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.proxy = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url_with_credentials(self) -> str:
        assert self.credentials is not None
        user, password = self.credentials
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

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
        proxy.took(method, target)
        try:
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                upstream = socket.create_connection((host.strip("[]"), int(port)))
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                parts = urlsplit(target)
                upstream = socket.create_connection((parts.hostname, parts.port or 80))
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                kept = [line for line in lines if _name(line) not in _HOP_BY_HOP]
                head = f"{method} {path} {version}\r\n".encode("latin-1")
                upstream.sendall(head + b"".join(kept) + b"Connection: close\r\n\r\n")
        except OSError:
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        with upstream:
            sending = threading.Thread(target=_pump, args=(self.rfile.read1, upstream), daemon=True)
            sending.start()
            _pump(upstream.recv, self.request)
            with contextlib.suppress(OSError):  # wakes the sending thread's read
                self.request.shutdown(socket.SHUT_RDWR)
            sending.join()


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
