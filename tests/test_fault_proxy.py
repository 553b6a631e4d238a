"""The fault-injecting proxy (tests/servers/faults.py) relays faithfully and fails on cue.

The blob-store tests trust it to pass everything it is not told to break, so
it is checked here against a real HTTP/1.1 server: keep-alive, chunked bodies
both ways, `Expect: 100-continue`, the Host header, and each kind of fault.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.servers.faults import FaultProxy


class _Upstream(BaseHTTPRequestHandler):
    """GET /bytes/N: N bytes (chunked with ?chunked); PUT: the body's size, hash and Host."""

    protocol_version = "HTTP/1.1"
    received: list[int]  # body bytes each PUT delivered, set on the class by the fixture

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):  # the proxy cut it: that is the test
            super().handle()

    def do_GET(self) -> None:
        size = int(self.path.split("/")[2].split("?")[0])
        body = bytes(i % 251 for i in range(size))
        self.send_response(200)
        if self.path.endswith("?chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for at in range(0, size, 1000):
                part = body[at : at + 1000]
                self.wfile.write(b"%x\r\n%b\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(body)

    def do_PUT(self) -> None:
        body = bytearray()
        if self.headers.get("Transfer-Encoding") == "chunked":
            while size := int(self.rfile.readline().strip(), 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            length = int(self.headers["Content-Length"])
            while len(body) < length and (data := self.rfile.read1(length - len(body))):
                body += data
        self.received.append(len(body))
        answer = json.dumps({"size": len(body), "host": self.headers["Host"]}).encode()
        self.send_response(201)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[int]]]:
    received: list[int] = []
    handler = type("Handler", (_Upstream,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def proxy(upstream: tuple[str, list[int]]) -> Iterator[FaultProxy]:
    with FaultProxy(upstream[0]) as proxy:
        yield proxy


def _connect(proxy: FaultProxy) -> http.client.HTTPConnection:
    host, port = proxy.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=30)


def _expected(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


def test_relays_bodies_both_framings_on_one_keep_alive_connection(proxy: FaultProxy) -> None:
    conn = _connect(proxy)
    for target in ("/bytes/100000", "/bytes/100000?chunked", "/bytes/0"):
        conn.request("GET", target)
        response = conn.getresponse()
        assert response.read() == _expected(int(target.split("/")[2].split("?")[0]))
    conn.request("PUT", "/up", body=iter([b"a" * 5000, b"b" * 7000]))  # chunked upload
    assert json.loads(conn.getresponse().read())["size"] == 12000
    sock = conn.sock
    conn.request("PUT", "/up", body=b"x" * 3000, headers={"Expect": "100-continue"})
    answer = json.loads(conn.getresponse().read())
    assert answer == {"size": 3000, "host": proxy.url.removeprefix("http://")}
    assert conn.sock is sock  # still the same connection
    assert proxy.count() == 5 and proxy.count("PUT") == 2 and proxy.count("GET", r"chunked") == 1
    conn.close()


def test_fail_answers_the_next_matching_requests_then_relays(
    proxy: FaultProxy, upstream: tuple[str, list[int]]
) -> None:
    proxy.fail("PUT", times=2)
    proxy.fail("GET", "/bytes/7", status=429, headers={"Retry-After": "1"}, body=b"slow down")
    conn = _connect(proxy)
    statuses = []
    for _ in range(3):
        conn.request("PUT", "/up", body=b"x" * 10)
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
    assert statuses == [500, 500, 201]
    assert upstream[1] == [10]  # the failed ones never reached the upstream
    conn.request("GET", "/bytes/7")
    response = conn.getresponse()
    assert (response.status, response.getheader("Retry-After")) == (429, "1")
    assert response.read() == b"slow down"
    assert proxy.armed == 0
    assert [seen.status for seen in proxy.requests] == [500, 500, 201, 429]


def test_drop_response_cuts_the_body_after_n_bytes(proxy: FaultProxy) -> None:
    proxy.drop_response("GET", after=1000)
    conn = _connect(proxy)
    conn.request("GET", "/bytes/50000")
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    assert cut.value.partial == _expected(1000)
    conn = _connect(proxy)
    conn.request("GET", "/bytes/50000")
    assert conn.getresponse().read() == _expected(50000)


def test_drop_request_hangs_up_after_part_of_the_body(
    proxy: FaultProxy, upstream: tuple[str, list[int]]
) -> None:
    proxy.drop_request("PUT", after=2000)
    conn = _connect(proxy)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        conn.request("PUT", "/up", body=b"x" * 10000)
        conn.getresponse()
    conn = _connect(proxy)
    conn.request("PUT", "/up", body=b"x" * 10000)
    assert json.loads(conn.getresponse().read())["size"] == 10000
    assert upstream[1][-1] == 10000 and proxy.armed == 0
