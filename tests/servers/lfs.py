"""A Git LFS server and git's smart HTTP on one loopback port, behind HTTP Basic auth.

One werkzeug `make_server("127.0.0.1", 0, app, threaded=True)` serves both,
as a host does: `http://127.0.0.1:P/org/repo.git` for git clone/fetch/push
(the real `git http-backend`, through tests/gitsandbox.py's CGI handler) and
`http://127.0.0.1:P/org/repo.git/info/lfs` for the Batch API (giftless 0.6.2
over its local storage), where git-lfs and git-mgit find it by themselves.

Clients authenticate with HTTP Basic, a username and password the test
chooses, which they get only from git's credential helper (a `store` file
the fixture writes). Behind the gate giftless sees a token of its own JWT
provider; the actions it hands out carry short-lived tokens of that provider
(a Bearer header for uploads, `?jwt=` for downloads), which pass the gate as
they are, as pre-signed hrefs pass a host's front door. A request log lets
tests count what reached the server.
"""

from __future__ import annotations

import base64
import hmac
import logging
import os
import secrets
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, urlsplit

import jwt
from giftless.app import init_app
from giftless.storage.local_storage import LocalStorage
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from tests.gitsandbox import (
    RequestRecord,
    ServedOnThread,
    _GitHttpHandler,
    init_repo,
    run_git,
)
from tests.servers.tls import Certificates

_REALM = "git-mgit test server"
_TOKEN_LIFETIME_S = 24 * 3600
_ACTION_LIFETIME_S = 900
_BLOCK = 1 << 20
_SNAPSHOT_WAIT_S = 30
# giftless keeps its transfer adapters and authenticators in module globals, set up by
# the first app: every server in this process signs with one key, one server at a time.
_KEY = secrets.token_hex(32)
_running = threading.Lock()


@dataclass(frozen=True)
class Hit:
    """One request as the server answered it."""

    method: str
    path: str  # without the query (download hrefs carry tokens there)
    status: int
    lfs: bool  # served by giftless (else by git http-backend, or refused at the gate)


class RequestLog:
    """Every request, in the order their answers began (git's: when their CGI exits)."""

    def __init__(self) -> None:
        # git's requests are noted once their CGI exits, which can be after the client
        # has its whole answer: count those in flight so a snapshot waits for them.
        self._done = threading.Condition()
        self._in_flight = 0
        self._hits: list[Hit] = []

    def add(self, hit: Hit) -> None:
        with self._done:
            self._hits.append(hit)

    def started(self) -> None:
        """gitsandbox's CGI handler announces each git request."""
        with self._done:
            self._in_flight += 1

    def finished(self, record: RequestRecord | None) -> None:
        """gitsandbox's CGI handler reports each git request here, once answered."""
        with self._done:
            if record is not None:
                self._hits.append(Hit(record.method, record.path, record.status, lfs=False))
            self._in_flight -= 1
            self._done.notify_all()

    def snapshot(self) -> list[Hit]:
        """The requests so far, once no git request is still being answered (or 30 s)."""
        with self._done:
            self._done.wait_for(lambda: self._in_flight == 0, timeout=_SNAPSHOT_WAIT_S)
            return list(self._hits)


def _logged(app: Any, log: RequestLog) -> Any:
    """`app` (WSGI), each request recorded in `log` as its answer begins: before the
    client can have it, so a test that got its answer finds the request in the log."""

    def logged(environ: dict[str, Any], start_response: Any) -> Any:
        def start(line: str, headers: Any, exc_info: Any = None) -> Any:
            status = int(line.split(" ", 1)[0])
            log.add(Hit(environ["REQUEST_METHOD"], environ["PATH_INFO"], status, lfs=True))
            return start_response(line, headers, exc_info)

        return app(environ, start)

    return logged


class _Blocks:
    """A stored object as a WSGI body of 1 MiB blocks (a file iterates by lines: random
    bytes would go out in ~256-byte chunks, at a few dozen MB/s)."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def __iter__(self) -> Iterator[bytes]:
        return iter(lambda: self._file.read(_BLOCK), b"")

    def read(self, size: int = -1) -> bytes:
        return self._file.read(size)

    def close(self) -> None:
        self._file.close()


class BlockStorage(LocalStorage):
    """giftless's local storage, serving objects in large blocks and storing them whole."""

    def get(self, prefix: str, oid: str) -> BinaryIO:
        return _Blocks(super().get(prefix, oid))  # type: ignore[return-value]

    def put(self, prefix: str, oid: str, data_stream: BinaryIO) -> int:
        """Written beside, then renamed into place, as an object store makes a PUT atomic.
        giftless writes in place: a PUT the fault proxy cut, whose handler only began after
        the client's retry had stored the object, truncated it to the bytes it got."""
        path = Path(self._get_path(prefix, oid))
        self._create_path(str(path.parent))
        fd, partial = tempfile.mkstemp(prefix=f".{oid}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as dest:
                shutil.copyfileobj(data_stream, dest)
                size = dest.tell()
            os.replace(partial, path)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
        return size

    @staticmethod
    def _create_path(spath: str) -> None:
        # giftless checks, then creates: two first uploads to a repository at once both
        # see no folder, and the second mkdir fails the PUT with a 500 nobody caused.
        Path(spath).mkdir(parents=True, exist_ok=True)


def _is_lfs(path: str) -> bool:
    target = urlsplit(path).path
    return "/info/lfs/" in target or target.endswith("/info/lfs")


class _Handler(WSGIRequestHandler, _GitHttpHandler):
    """The gate, then giftless (WSGI) for LFS paths or git http-backend (CGI) for the rest."""

    server: Any  # werkzeug's server, with the attributes LfsServer adds

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # any other method meets the gate too
            return self._dispatch
        return super().__getattr__(name)

    def _dispatch(self) -> None:
        lfs = _is_lfs(self.path)
        verdict = self.server.gate.admit(self.headers.get("Authorization"), self.path, lfs)
        if verdict is None:
            self._challenge(lfs)
        elif not lfs:
            self._run_cgi()  # reports to server.started / server.finished (the log)
        else:
            if verdict != "token":
                del self.headers["Authorization"]
            if verdict == "basic":
                self.headers["Authorization"] = f"Bearer {self.server.gate.token(self.path)}"
            self.run_wsgi()  # giftless, through _logged

    def _challenge(self, lfs: bool) -> None:
        self.server.log.add(Hit(self.command, urlsplit(self.path).path, 401, lfs))
        body = b'{"message": "Credentials needed: HTTP Basic"}\n' if lfs else b"Unauthorized\n"
        self.send_response(401, "Unauthorized")
        self.send_header("WWW-Authenticate", f'Basic realm="{_REALM}"')
        self.send_header("Content-Type", "application/vnd.git-lfs+json" if lfs else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")  # the unread request body goes with it
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


class _Gate:
    """HTTP Basic with the test's username and password; giftless's own tokens on LFS paths."""

    def __init__(self, username: str, password: str) -> None:
        raw = f"{username}:{password}".encode()
        self._expected = base64.b64encode(raw)
        self._username = username

    def token(self, path: str) -> str:
        """giftless's token for what HTTP Basic opens: every object of the repository `path`
        is in (`obj:org/repo/*`; giftless's `obj:*` opens batch requests, not storage hrefs:
        a test's storage on another host gets Basic credentials, as a host's would)."""
        repo = urlsplit(path).path.partition("/info/lfs")[0].strip("/").removesuffix(".git")
        claims = {"sub": self._username, "exp": int(time.time()) + _TOKEN_LIFETIME_S}
        return jwt.encode({**claims, "scopes": [f"obj:{repo}/*"]}, _KEY, algorithm="HS256")

    def admit(self, authorization: str | None, path: str, lfs: bool) -> str | None:
        """ "signed" (a pre-signed href: its query's token, whatever else the request
        carries), "basic", "token" (giftless checks it) or None (refused)."""
        if lfs and "jwt=" in urlsplit(path).query:
            return "signed"
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() == "basic" and hmac.compare_digest(given.encode(), self._expected):
            return "basic"
        if lfs and scheme.lower() == "bearer":
            return "token"
        return None


def _server_context(tls: Certificates, client_certificates: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.cert, tls.key)
    if client_certificates:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(tls.ca)
    return context


class LfsServer(ServedOnThread):
    """giftless and git http-backend on one port (bound at construction, served while entered)."""

    def __init__(
        self,
        root: Path,
        username: str,
        password: str,
        tls: Certificates | None = None,
        client_certificates: bool = False,
    ) -> None:
        """Bind the port; use it as a context manager (leaving it stops the server).
        `tls`: serve HTTPS with that certificate (else plain HTTP); `client_certificates`:
        and accept only clients showing a certificate its authority signed."""
        if not _running.acquire(blocking=False):
            raise RuntimeError("one LfsServer per process at a time (giftless's globals)")
        try:
            self._build(root, username, password, tls, client_certificates)
        except BaseException:
            _running.release()
            raise

    def _build(
        self,
        root: Path,
        username: str,
        password: str,
        tls: Certificates | None,
        client_certificates: bool,
    ) -> None:
        self.root = root
        self.username, self.password = username, password
        self.git_root = root / "git"
        self.storage = root / "lfs-storage"
        self.git_root.mkdir(parents=True, exist_ok=True)
        self.log = RequestLog()
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        server: BaseWSGIServer = make_server(
            "127.0.0.1",
            0,
            _logged(self._giftless(), self.log),
            threaded=True,
            request_handler=_Handler,
            ssl_context=None if tls is None else _server_context(tls, client_certificates),
        )
        # What the shared handlers read from their server: gitsandbox's CGI (project root,
        # environment, request log) and the gate.
        server.project_root = self.git_root  # type: ignore[attr-defined]
        server.base_env = dict(os.environ)  # type: ignore[attr-defined]
        server.started = self.log.started  # type: ignore[attr-defined]
        server.finished = self.log.finished  # type: ignore[attr-defined]
        server.log = self.log  # type: ignore[attr-defined]
        server.gate = _Gate(username, password)  # type: ignore[attr-defined]
        self._server = server
        self.url = f"{'http' if tls is None else 'https'}://127.0.0.1:{server.port}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def _giftless(self) -> Any:
        jwt_provider = {
            "factory": "giftless.auth.jwt:factory",
            "options": {
                "private_key": _KEY,
                "algorithm": "HS256",
                "default_lifetime": _ACTION_LIFETIME_S,
            },
        }
        return init_app(
            additional_config={
                "LEGACY_ENDPOINTS": False,
                "AUTH_PROVIDERS": [jwt_provider],
                "PRE_AUTHORIZED_ACTION_PROVIDER": jwt_provider,
                "TRANSFER_ADAPTERS": {
                    "basic": {
                        "options": {
                            "storage_class": f"{__name__}:BlockStorage",
                            "storage_options": {"path": str(self.storage)},
                            "action_lifetime": _ACTION_LIFETIME_S,
                        }
                    }
                },
            }
        )

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        _running.release()

    def repo_url(self, name: str = "org/repo") -> str:
        """The git URL of bare repository `name` (`org/repo`; created, pushable, on first use)."""
        path = self.git_root / f"{name}.git"
        if not path.exists():
            init_repo(path, bare=True)
            run_git("config", "http.receivepack", "true", cwd=path)
        return f"{self.url}/{name}.git"

    def lfs_url(self, name: str = "org/repo") -> str:
        return f"{self.repo_url(name)}/info/lfs"

    def stored(self, oid: str, name: str = "org/repo") -> Path:
        """Where giftless keeps object `oid` of repository `name` (tests corrupt it there)."""
        return self.storage / name / oid

    @property
    def requests(self) -> list[Hit]:
        return self.log.snapshot()

    def uploads(self) -> list[str]:
        """The object ids PUT to storage, one per successful upload."""
        return [
            h.path.rsplit("/", 1)[1]
            for h in self.requests
            if h.method == "PUT" and "/objects/storage/" in h.path and h.status == 200
        ]

    def store_credentials(
        self, path: Path, password: str | None = None, also: tuple[str, ...] = ()
    ) -> None:
        """Make git's credential helper (for every repository: --global) a `store` file
        holding the username and `password` (default: the right one) for this server, and
        for the `also` URLs (a proxy in front of it)."""
        user = quote(self.username, safe="")
        secret = quote(password if password is not None else self.password, safe="")
        hosts = [urlsplit(url).netloc for url in (self.url, *also)]
        scheme = urlsplit(self.url).scheme
        path.write_text("".join(f"{scheme}://{user}:{secret}@{host}\n" for host in hosts))
        path.chmod(0o600)
        run_git("config", "--global", "credential.helper", f"store --file={path}", cwd=self.root)
