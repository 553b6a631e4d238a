"""A fault-injecting reverse HTTP proxy, for blob-store tests (Git LFS, S3).

It sits on 127.0.0.1:<free port> in front of one upstream server and relays
HTTP/1.1 byte for byte: the Host header and every other header unchanged (S3's
SigV4 signs Host), Content-Length and chunked bodies, `Expect: 100-continue`,
keep-alive towards the client (each request gets a fresh upstream connection,
so a stale one never fakes a fault). A test scripts faults and reads counters:

    with FaultProxy(server.url) as proxy:                   # point the client at proxy.url
        proxy.fail("PUT", times=2)                          # the next 2 PUTs answer 500
        proxy.fail("GET", status=429, headers={"Retry-After": "1"})
        proxy.drop_response("GET", after=1 << 20)           # cut a GET's body after 1 MiB
        proxy.drop_request("PUT", r"/objects/", after=4096) # hang up 4 KiB into an upload
        ...
        assert proxy.armed == 0                             # every scripted fault fired
        proxy.count("PUT")                                  # requests seen, faulted ones too

A fault matches a request by method (None: any) and a regular expression
searched in the request target (path and query, as sent); the oldest armed
fault that matches takes the request. Byte counts are body bytes as sent on
the wire (chunk framing included).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import socketserver
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import BinaryIO, Protocol
from urllib.parse import urlsplit

from tests.gitsandbox import ServedOnThread, without_delay

__all__ = ["FaultProxy", "Seen"]

_COPY = 1 << 20
_MAX_LINE = 1 << 16
_TIMEOUT_S = 300.0
_CRLF = (b"\r\n", b"\n")


@dataclass
class Seen:
    """One request the proxy received."""

    method: str
    target: str  # path and query, as sent
    status: int | None = None  # the upstream's or the injected status; None: no answer
    fault: str | None = None  # "fail", "drop_request" or "drop_response" when one applied
    content_sha256: str = ""  # its x-amz-content-sha256 header (an S3 client's payload hash)


@dataclass
class _Fault:
    kind: str
    method: str | None
    path: re.Pattern[str]
    times: int
    after: int = 0
    skip: int = 0  # matching requests let through before the fault starts
    status: int = 500
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def matches(self, method: str, target: str) -> bool:
        return (self.method is None or self.method == method) and bool(self.path.search(target))


class FaultProxy(ServedOnThread):
    """A reverse proxy to `upstream` (`http://host:port`) that fails requests on demand;
    serving while entered."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._seen: list[Seen] = []
        self._server = _Server((parts.hostname, parts.port), self)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fault-proxy",
            daemon=True,
        )

    # -- scripting faults -------------------------------------------------------------

    def fail(
        self,
        method: str | None = None,
        path: str = "",
        *,
        status: int = 500,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
        skip: int = 0,
    ) -> None:
        """The next `times` matching requests (after `skip` of them pass) get `status` (and
        `headers`, `body`) from the proxy; the upstream never sees them."""
        self._arm(
            _Fault(
                "fail",
                method,
                re.compile(path),
                times,
                skip=skip,
                status=status,
                headers=tuple((headers or {}).items()),
                body=body,
            )
        )

    def drop_request(
        self, method: str | None = None, path: str = "", *, after: int = 0, times: int = 1
    ) -> None:
        """The next `times` matching requests are cut after `after` bytes of their body
        reached the upstream (all of it, if shorter): the client never gets an answer."""
        self._arm(_Fault("drop_request", method, re.compile(path), times, after=after))

    def drop_response(
        self, method: str | None = None, path: str = "", *, after: int = 0, times: int = 1
    ) -> None:
        """The next `times` matching requests get the upstream's status and headers and
        `after` bytes of its body, then the connection closes."""
        self._arm(_Fault("drop_response", method, re.compile(path), times, after=after))

    @property
    def connections(self) -> int:
        """Client connections open now."""
        return self._server.open_count()

    def clear(self) -> None:
        """Disarm every fault not yet used (the counters stay)."""
        with self._lock:
            self._faults.clear()

    @property
    def armed(self) -> int:
        """How many fault applications are still to come: 0 once every one fired."""
        with self._lock:
            return sum(fault.times for fault in self._faults)

    # -- counters ---------------------------------------------------------------------

    def count(self, method: str | None = None, path: str = "") -> int:
        """How many requests matching `method` and `path` (as for faults) arrived."""
        pattern = re.compile(path)
        with self._lock:
            return sum(
                (method is None or seen.method == method) and bool(pattern.search(seen.target))
                for seen in self._seen
            )

    @property
    def requests(self) -> list[Seen]:
        """Every request so far, in arrival order (a copy)."""
        with self._lock:
            return [dataclasses.replace(s) for s in self._seen]

    # -- used by the handler ----------------------------------------------------------

    def _arm(self, fault: _Fault) -> None:
        if fault.method is not None:
            fault.method = fault.method.upper()
        with self._lock:
            self._faults.append(fault)

    def _arrive(
        self, method: str, target: str, content_sha256: str = ""
    ) -> tuple[Seen, _Fault | None]:
        """Record a request and take the fault it meets, if any."""
        with self._lock:
            seen = Seen(method, target, content_sha256=content_sha256)
            self._seen.append(seen)
            for fault in self._faults:
                if fault.matches(method, target):
                    if fault.skip:
                        fault.skip -= 1
                        continue
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    seen.fault = fault.kind
                    return seen, fault
            return seen, None

    def _answered(self, seen: Seen, status: int) -> None:
        with self._lock:
            seen.status = status


class _Closed(ConnectionError):
    """A peer closed its connection mid-message."""


class _Cut(Exception):
    """A scripted drop: close the client's connection now."""


@dataclass
class _Head:
    """A request or response head, kept as raw lines so it is relayed unchanged."""

    start: bytes
    lines: list[bytes]

    def get(self, name: str) -> str:
        """A header's value ('' when absent; repeated fields joined with commas)."""
        key = name.lower().encode()
        values = [
            line.split(b":", 1)[1].strip().decode("latin-1")
            for line in self.lines
            if line.split(b":", 1)[0].strip().lower() == key
        ]
        return ", ".join(values)

    def raw(self) -> bytes:
        return self.start + b"".join(self.lines) + b"\r\n"

    def status(self) -> int:
        return int(self.start.split()[1])


def _read_head(rfile: BinaryIO) -> _Head | None:
    """The next message head; None at a clean end of stream before it."""
    start = rfile.readline(_MAX_LINE)
    while start in _CRLF:  # stray empty lines between messages are allowed
        start = rfile.readline(_MAX_LINE)
    if not start:
        return None
    lines = []
    while (line := rfile.readline(_MAX_LINE)) not in _CRLF:
        if not line:
            raise _Closed("connection closed inside a message head")
        lines.append(line)
    return _Head(start, lines)


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...


class _Sink:
    """Writes to a socket, and raises _Cut once more than `budget` bytes would pass."""

    def __init__(self, sock: socket.socket, budget: int | None = None) -> None:
        self._sock = sock
        self._budget = budget

    def write(self, data: bytes) -> None:
        if self._budget is not None:
            if len(data) > self._budget:
                self._sock.sendall(data[: self._budget])
                raise _Cut
            self._budget -= len(data)
        self._sock.sendall(data)


class _Discard:
    def write(self, data: bytes) -> None:
        pass


def _copy(src: BinaryIO, dst: _Writer, size: int) -> None:
    while size:
        data = src.read(min(size, _COPY))
        if not data:
            raise _Closed("connection closed inside a body")
        dst.write(data)
        size -= len(data)


def _relay_body(src: BinaryIO, dst: _Writer, framing: int | str) -> None:
    """Copy one body, framed as 'chunked', 'eof' (until the peer closes) or a length."""
    if framing == "eof":
        while data := src.read1(_COPY):  # type: ignore[attr-defined]
            dst.write(data)
    elif framing == "chunked":
        while True:
            line = src.readline(_MAX_LINE)
            if not line.endswith(b"\n"):
                raise _Closed("connection closed inside a chunk size line")
            dst.write(line)
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                break
            _copy(src, dst, size + 2)  # the chunk and its CRLF
        while True:  # trailer fields, then an empty line
            line = src.readline(_MAX_LINE)
            if not line:
                raise _Closed("connection closed inside chunk trailers")
            dst.write(line)
            if line in _CRLF:
                break
    else:
        _copy(src, dst, int(framing))


def _request_framing(head: _Head) -> int | str:
    if "chunked" in head.get("Transfer-Encoding").lower():
        return "chunked"
    return int(head.get("Content-Length") or 0)


def _response_framing(head: _Head, method: str) -> int | str:
    status = head.status()
    if method == "HEAD" or status // 100 == 1 or status in (204, 304):
        return 0
    if "chunked" in head.get("Transfer-Encoding").lower():
        return "chunked"
    length = head.get("Content-Length")
    return int(length) if length else "eof"


class _Handler(socketserver.StreamRequestHandler):
    """One client connection: requests in turn, each relayed or failed as scripted."""

    server: _Server
    timeout = _TIMEOUT_S
    disable_nagle_algorithm = True

    def handle(self) -> None:
        self.server.opened(self.connection)
        try:
            while (head := _read_head(self.rfile)) is not None:
                if not self._serve(head):
                    return
        except (_Cut, OSError, ValueError, IndexError):
            return  # leaving closes the client's connection
        finally:
            self.server.closed(self.connection)

    def _serve(self, head: _Head) -> bool:
        """Answer one request; whether the connection can carry another."""
        method, target = head.start.decode("latin-1").split()[:2]
        seen, fault = self.server.proxy._arrive(method, target, head.get("x-amz-content-sha256"))
        keep = "close" not in head.get("Connection").lower() and head.start.rstrip().endswith(
            b"HTTP/1.1"
        )
        expects = "100-continue" in head.get("Expect").lower()
        if fault is not None and fault.kind == "fail":
            if not expects:  # the body is in flight: read it, so the connection stays usable
                _relay_body(self.rfile, _Discard(), _request_framing(head))
            keep = keep and not expects
            self.server.proxy._answered(seen, fault.status)
            self._inject(fault, method, keep)
            return keep
        with socket.create_connection(self.server.upstream, timeout=_TIMEOUT_S) as up:
            without_delay(up)
            upstream = up.makefile("rb")
            up.sendall(head.raw())
            budget = fault.after if fault is not None and fault.kind == "drop_request" else None
            response = None
            if expects:
                response = self._head_from(upstream)
                if response.status() == 100:
                    self.connection.sendall(response.raw())
                    response = None
                else:  # a final answer before the body: the client may or may not send it
                    keep = False
            if response is None:
                _relay_body(self.rfile, _Sink(up, budget), _request_framing(head))
                if budget is not None:
                    raise _Cut
                response = self._head_from(upstream)
                while response.status() // 100 == 1 and response.status() != 101:
                    self.connection.sendall(response.raw())  # interim answers pass through
                    response = self._head_from(upstream)
            self.server.proxy._answered(seen, response.status())
            framing = _response_framing(response, method)
            self.connection.sendall(response.raw())
            budget = fault.after if fault is not None and fault.kind == "drop_response" else None
            _relay_body(upstream, _Sink(self.connection, budget), framing)
            if budget is not None:
                raise _Cut
            return keep and framing != "eof" and "close" not in response.get("Connection").lower()

    @staticmethod
    def _head_from(upstream: BinaryIO) -> _Head:
        head = _read_head(upstream)
        if head is None:
            raise _Closed("the upstream closed without answering")
        return head

    def _inject(self, fault: _Fault, method: str, keep: bool) -> None:
        lines = [f"HTTP/1.1 {fault.status} Injected fault", f"Content-Length: {len(fault.body)}"]
        lines += [f"{name}: {value}" for name, value in fault.headers]
        if not keep:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.connection.sendall(head if method == "HEAD" else head + fault.body)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, upstream: tuple[str, int], proxy: FaultProxy) -> None:
        self.upstream = upstream
        self.proxy = proxy
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def open_count(self) -> int:
        with self._connections_lock:
            return len(self._connections)

    def opened(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)

    def closed(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def server_close(self) -> None:
        """Stop: wake every handler blocked on a keep-alive connection, and stop listening."""
        with self._connections_lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        super().server_close()
