"""Real git repositories and remotes for end-to-end tests.

Checkpoints travel through git's own transports, so the tests push and fetch
over a plain ``file://`` remote and over git's smart HTTP protocol, served by
the real ``git http-backend`` CGI behind a loopback-only threaded HTTP server.
Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Self
from urllib.parse import unquote, urlsplit

log = logging.getLogger(__name__)

_COPY_CHUNK = 64 * 1024
# How often serve_forever checks for shutdown(); bounds teardown latency.
_SHUTDOWN_POLL_S = 0.05
# Headers that describe one HTTP hop; the CGI's view of them is meaningless.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding"})


def run_git(
    *args: str | os.PathLike[str],
    cwd: str | os.PathLike[str],
    input: str | bytes | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    text: bool | None = None,
) -> subprocess.CompletedProcess[Any]:
    """Run git and capture its output, failing the test with git's own stderr.

    Output is text unless ``input`` is bytes or ``text=False`` (for blobs).
    ``env`` entries are laid over the current environment rather than
    replacing it, so the per-test isolation from conftest stays in force.
    """
    if text is None:
        text = not isinstance(input, bytes)
    full_env = {**os.environ, **env} if env is not None else None
    cmd = ["git", *(os.fspath(a) for a in args)]
    proc = subprocess.run(
        cmd, cwd=cwd, input=input, env=full_env, capture_output=True, text=text, check=False
    )
    if check and proc.returncode != 0:
        stderr = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise AssertionError(
            f"{' '.join(cmd)} (in {os.fspath(cwd)}) exited {proc.returncode}:\n{stderr}"
        )
    return proc


@dataclass(frozen=True)
class Remote:
    """A bare repository and the URL clients use to reach it."""

    path: Path
    url: str
    server: GitHttpServer | None = None
    store: str = "refs"  # where pushes put tensor objects: refs, lfs or s3 (mgit.store)


def init_repo(path: Path, *, bare: bool = False) -> Path:
    """Create an empty repository (branch ``main``, from the isolated global config)."""
    path.mkdir(parents=True, exist_ok=True)
    run_git("init", "--quiet", *(["--bare"] if bare else []), cwd=path)
    return path


def init_bare_remote(path: Path) -> Remote:
    """Create a bare repository reachable as a ``file://`` URL."""
    init_repo(path, bare=True)
    return Remote(path=path, url=path.as_uri())


def clone(url: str, dest: Path) -> Path:
    """Clone ``url`` into ``dest`` and return the working tree."""
    run_git("clone", "--quiet", url, dest, cwd=dest.parent)
    return dest


def commit_files(repo: Path, files: Mapping[str, bytes | str], message: str) -> str:
    """Write ``files`` (path relative to ``repo``), commit them all and return the commit id."""
    for rel, data in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            target.write_bytes(data)
        else:
            target.write_text(data)
    run_git("add", "--", *files, cwd=repo)
    run_git("commit", "--quiet", "-m", message, cwd=repo)
    return rev_parse(repo, "HEAD")


def rev_parse(repo: Path, rev: str) -> str:
    """Resolve ``rev`` to a full object id."""
    return run_git("rev-parse", "--verify", rev, cwd=repo).stdout.strip()


def ls_remote(repo: Path, url: str, *patterns: str) -> dict[str, str]:
    """Refs the remote advertises, as ``{refname: object id}``."""
    out = run_git("ls-remote", url, *patterns, cwd=repo).stdout
    return {ref: oid for oid, ref in (line.split("\t") for line in out.splitlines())}


def transfers(tmp_path: Path, remote: Remote, *args: str, cwd: Path) -> tuple[int, int]:
    """Run git; return the (`git ls-remote`, `git fetch`) processes it ran (git's trace2 events).

    An on-demand fetch is one listing and one `git fetch`, or, from a remote on
    this machine (file://), one listing and a copy from its packs, no fetch.
    """
    trace = tmp_path / "trace2.json"
    trace.unlink(missing_ok=True)
    run_git(*args, cwd=cwd, env={"GIT_TRACE2_EVENT": str(trace)})
    return commands_run(trace)


def commands_run(trace: Path) -> tuple[int, int]:
    """(`git ls-remote`, `git fetch`) processes in a trace2 event log."""
    names = Counter(
        e.get("name")
        for e in map(json.loads, trace.read_text().splitlines())
        if e.get("event") == "cmd_name"
    )
    return names["ls-remote"], names["fetch"]


def one_batch(remote: Remote) -> tuple[int, int]:
    """What an on-demand fetch from `remote` runs: see transfers(). A pointer store's refs
    are always fetched by git (they are tiny); their objects come from the blob store."""
    return (1, 0) if remote.server is None and remote.store == "refs" else (1, 1)


@dataclass(frozen=True)
class RequestRecord:
    """What one request looked like on the wire, so tests can prove which paths they hit."""

    method: str
    path: str
    query: str
    content_encoding: str | None
    transfer_encoding: str | None
    body_size: int
    status: int
    cgi_returncode: int
    cgi_stderr: str
    command: str | None = None  # a protocol v2 request's command (ls-refs, fetch), else None
    git_protocol: str | None = None  # its Git-Protocol header (`version=2`), if it sent one

    @property
    def lists_refs(self) -> bool:
        """Whether it asked for the refs: protocol v2's `ls-refs`, or v0's advertisement (v2's
        `GET info/refs` only advertises capabilities)."""
        if self.command == "ls-refs":
            return True
        v2 = "version=2" in (self.git_protocol or "")
        return self.method == "GET" and "service=git-upload-pack" in self.query and not v2


class _GitHttpHandler(BaseHTTPRequestHandler):
    """Translate one HTTP request into one ``git http-backend`` CGI run."""

    # HTTP/1.1 is what makes git send chunked bodies and ``Expect: 100-continue``.
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as production servers answer (nginx's tcp_nodelay, Go's default): the
    # answer goes out in several small writes, and with Nagle's algorithm the last waits
    # for the client's delayed ACK, which held a request sent right after another (a push
    # right after its ref listing) 25-30 ms on loopback.
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:
        self._run_cgi()

    def do_POST(self) -> None:
        self._run_cgi()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def _spool_body(self, sink: IO[bytes]) -> int:
        """Copy the request body to ``sink``, undoing chunked transfer-encoding.

        The body is spooled to a file rather than piped, so the CGI gets an
        exact CONTENT_LENGTH (RFC 3875) and writing its stdin can never
        deadlock against reading its stdout. Content-Encoding (gzip) is left
        alone: git http-backend inflates it itself from HTTP_CONTENT_ENCODING.
        """
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            total = 0
            while True:
                size_line = self.rfile.readline(1024)
                if not size_line.endswith(b"\n"):
                    raise ConnectionError("truncated chunk size line")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    break
                self._copy_exact(size, sink)
                total += size
                if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                    raise ConnectionError("chunk not followed by CRLF")
            # Trailer fields, if any, end with an empty line.
            while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                pass
            return total
        length = int(self.headers.get("Content-Length") or 0)
        self._copy_exact(length, sink)
        return length

    def _copy_exact(self, size: int, sink: IO[bytes]) -> None:
        while size:
            data = self.rfile.read(min(size, _COPY_CHUNK))
            if not data:
                raise ConnectionError("client closed the connection mid-body")
            sink.write(data)
            size -= len(data)

    def _cgi_env(self, path: str, query: str, body_size: int) -> dict[str, str]:
        env = {
            **self.server.base_env,
            "GIT_PROJECT_ROOT": str(self.server.project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": self.request_version,
            "SERVER_SOFTWARE": self.version_string(),
            "SERVER_NAME": self.server.host,
            "SERVER_PORT": str(self.server.port),
            "REMOTE_ADDR": self.client_address[0],
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote(path),
            "QUERY_STRING": query,
        }
        if self.command == "POST":
            env["CONTENT_LENGTH"] = str(body_size)
            env["CONTENT_TYPE"] = self.headers.get("Content-Type", "")
        for name, value in self.headers.items():
            key = name.upper().replace("-", "_")
            if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                env["HTTP_" + key] = value
        # Protocol v2 is negotiated through this header (see git-http-backend(1)).
        if "Git-Protocol" in self.headers:
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        return env

    def _run_cgi(self) -> None:
        self.server.started()
        record = None
        try:
            record = self._serve_cgi()
        finally:
            self.server.finished(record)

    def _serve_cgi(self) -> RequestRecord:
        parts = urlsplit(self.path)
        with tempfile.TemporaryFile() as body, tempfile.TemporaryFile() as stderr:
            body_size = self._spool_body(body)
            body.seek(0)
            command = _v2_command(body.read(4096), self.headers.get("Content-Encoding"))
            body.seek(0)
            # Leaving the block closes stdout and reaps the CGI even when the
            # client hangs up mid-response.
            with subprocess.Popen(
                ["git", "http-backend"],
                stdin=body,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=self._cgi_env(parts.path, parts.query, body_size),
            ) as proc:
                status = self._relay_response(proc.stdout)
            returncode = proc.returncode
            stderr.seek(0)
            cgi_stderr = stderr.read().decode(errors="replace")
        if returncode != 0:
            log.warning("git http-backend exited %d for %s: %s", returncode, self.path, cgi_stderr)
        return RequestRecord(
            method=self.command,
            path=parts.path,
            query=parts.query,
            content_encoding=self.headers.get("Content-Encoding"),
            transfer_encoding=self.headers.get("Transfer-Encoding"),
            body_size=body_size,
            status=status,
            cgi_returncode=returncode,
            cgi_stderr=cgi_stderr,
            command=command,
            git_protocol=self.headers.get("Git-Protocol"),
        )

    def _relay_response(self, out: io.BufferedReader) -> int:
        """Turn the CGI's header block into an HTTP status line and stream the body.

        Without a CGI Content-Length the body goes out chunked as it is
        produced, so big packs are never held in memory and keep-alive works.
        """
        status, reason = 200, "OK"
        headers: list[tuple[str, str]] = []
        length: int | None = None
        if not out.peek(1):
            status, reason = 502, "CGI produced no response"
        while (line := out.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip(), value.strip()
            if name.lower() == "status":
                code, _, reason = value.partition(" ")
                status = int(code)
            elif name.lower() == "content-length":
                length = int(value)
            elif name.lower() not in _HOP_BY_HOP:
                headers.append((name, value))
        self.send_response(status, reason or None)
        for name, value in headers:
            self.send_header(name, value)
        if length is not None:
            self.send_header("Content-Length", str(length))
            self.end_headers()
            shutil.copyfileobj(out, self.wfile, _COPY_CHUNK)
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while data := out.read1(_COPY_CHUNK):
                self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        return status


def _v2_command(head: bytes, encoding: str | None) -> str | None:
    """The command a protocol v2 request body starts with (its first pkt-line), if any."""
    if encoding == "gzip":
        head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head)
    try:
        line = head[4 : int(head[:4], 16)].decode()
    except ValueError:
        return None
    return line.removeprefix("command=").strip() if line.startswith("command=") else None


_SNAPSHOT_WAIT_S = 30


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, project_root: Path) -> None:
        self.project_root = project_root
        # Snapshot now: the CGI must see the test's isolated git config, not
        # whatever a later fixture teardown restores.
        self.base_env = dict(os.environ)
        self._requests: list[RequestRecord] = []
        # Handlers finish recording after the client already has its answer:
        # count them so a snapshot can wait for the stragglers.
        self._done = threading.Condition()
        self._in_flight = 0
        super().__init__(("127.0.0.1", 0), _GitHttpHandler)
        self.host, self.port = self.server_address[:2]

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup (getfqdn), which can
        # stall in sandboxes; loopback needs no name.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def started(self) -> None:
        with self._done:
            self._in_flight += 1

    def finished(self, request: RequestRecord | None) -> None:
        """A handler is done; None when it failed before it could describe the request."""
        with self._done:
            if request is not None:
                self._requests.append(request)
            self._in_flight -= 1
            self._done.notify_all()

    def snapshot(self) -> list[RequestRecord]:
        with self._done:
            self._done.wait_for(lambda: self._in_flight == 0, timeout=_SNAPSHOT_WAIT_S)
            return list(self._requests)


def without_delay(sock: socket.socket) -> socket.socket:
    """`sock` with Nagle's algorithm off (a relay's connection upstream), as the test
    servers' own connections are (disable_nagle_algorithm): what a relay forwards goes on
    at once, not after the peer's delayed ACK."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class ServedOnThread:
    """A test server bound at construction and served on a daemon thread while entered;
    a subclass sets ``_server`` (a socketserver) and ``_thread`` (its serve_forever)."""

    _server: socketserver.BaseServer
    _thread: threading.Thread

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class GitHttpServer(ServedOnThread):
    """Serve every repository under ``project_root`` over smart HTTP on loopback.

    The port is bound at construction (port 0, so never taken); serving runs
    on a daemon thread between ``__enter__`` and ``__exit__``.
    """

    def __init__(self, project_root: Path) -> None:
        self.project_root = project_root
        self._server = _Server(project_root)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _SHUTDOWN_POLL_S},
            name="git-http-server",
            daemon=True,
        )

    def url_for(self, name: str) -> str:
        return f"http://{self._server.host}:{self._server.port}/{name}"

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request served so far, in completion order (a copy)."""
        return self._server.snapshot()


def init_http_remote(server: GitHttpServer, name: str = "repo.git") -> Remote:
    """Create a bare repository under the server's root that accepts anonymous pushes."""
    path = init_repo(server.project_root / name, bare=True)
    run_git("config", "http.receivepack", "true", cwd=path)
    return Remote(path=path, url=server.url_for(name), server=server)
