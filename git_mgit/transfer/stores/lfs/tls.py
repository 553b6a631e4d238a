"""The LFS client's TLS context, as git's `http.ssl*` settings make curl's.

The CAs git is told of are trusted beside the system's (git-lfs's way: a
company CA for its git server, and public storage hosts stay trusted). A
client key behind a passphrase is opened as git opens it: with
`http.sslCertPasswordProtected` (or `GIT_SSL_CERT_PASSWORD_PROTECTED`) the
passphrase comes from `git credential fill` for `cert:///<the certificate's
path>` (a helper, else git's own prompt), is approved once it opens the key
and rejected when it does not; without that setting OpenSSL would prompt on
the terminal, under a git that waits on the filter, so the key is refused in
one line instead.

TLS to a server through an https:// proxy's CONNECT runs inside the TLS to
the proxy: `ssl` wraps only a plain socket, so the inner session is an
SSLObject over memory buffers, its records carried by the outer socket
(TlsInTls).
"""

from __future__ import annotations

import io
import socket
import ssl
from collections.abc import Callable
from ssl import SSLContext
from typing import TypeVar

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.creds import GitCredentials
from git_mgit.transfer.stores.lfs.httpconfig import Tls

T = TypeVar("T")
_RECORD = 1 << 14  # TLS's largest record: what one write hands the inner session


def client_context(tls: Tls, helper: GitCredentials | None = None) -> SSLContext:
    """A client context as git's settings ask; BlobStoreError naming the file it cannot use
    (`helper`: where a protected key's passphrase comes from)."""
    try:
        context = ssl.create_default_context()
        if tls.ca_file or tls.ca_path:
            context.load_verify_locations(cafile=tls.ca_file, capath=tls.ca_path)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise _unusable(tls, exc) from None
    if tls.cert:
        _load_certificate(context, tls, helper)
    if not tls.verify:  # http.sslVerify=false or GIT_SSL_NO_VERIFY, as git has it
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_certificate(context: SSLContext, tls: Tls, helper: GitCredentials | None) -> None:
    assert tls.cert is not None
    if not tls.password_protected or helper is None:
        try:  # a key behind a passphrase fails here, as curl's does, never prompts
            context.load_cert_chain(tls.cert, tls.key, password=_no_passphrase)
        except (OSError, ValueError) as exc:
            raise _unusable(tls, exc) from None
        return
    credential = helper.fill_key(tls.cert)
    try:
        context.load_cert_chain(tls.cert, tls.key, password=credential.get("password") or "")
    except ssl.SSLError:
        helper.reject(credential)  # a wrong passphrase is not kept (git rejects it too)
        raise BlobStoreError(
            f"the client key for {tls.cert} did not open with the passphrase git's credential "
            "helper gave (now rejected there); run the command again to be asked anew, or "
            "check http.sslCert and http.sslKey"
        ) from None
    except OSError as exc:
        raise _unusable(tls, exc) from None
    helper.approve(credential)


def _no_passphrase() -> str:
    raise ValueError(
        "a client key behind a passphrase: set http.sslCertPasswordProtected true for git "
        "and git-mgit to ask for it"
    )


def _unusable(tls: Tls, exc: OSError | ValueError) -> BlobStoreError:
    files = [f for f in (tls.ca_file, tls.ca_path, tls.cert, tls.key) if f]
    return BlobStoreError(
        f"git's TLS settings name files the LFS client cannot use ({', '.join(files)}: "
        f"{getattr(exc, 'strerror', None) or exc}); check http.sslCAInfo, http.sslCAPath, "
        "http.sslCert and http.sslKey (or GIT_SSL_CAINFO and the like)"
    )


def wrap(sock: socket.socket, context: SSLContext, host: str) -> socket.socket | TlsInTls:
    """TLS to `host` over `sock`: a plain socket's own, else inside the TLS `sock` has."""
    if isinstance(sock, ssl.SSLSocket):
        return TlsInTls(sock, context, host)
    return context.wrap_socket(sock, server_hostname=host)


class TlsInTls:
    """A TLS session inside another, with the socket methods http.client uses."""

    def __init__(self, outer: ssl.SSLSocket, context: SSLContext, host: str) -> None:
        self._outer = outer
        self._readers, self._closed = 0, False
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=host)
        self._run(self._tls.do_handshake)

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            sent = self._run(self._tls.write, view[:_RECORD])
            view = view[sent:]

    def recv_into(self, buffer: bytearray | memoryview, nbytes: int = 0) -> int:
        try:
            return self._run(self._tls.read, nbytes or len(buffer), buffer)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return 0  # the server closed, cleanly or not: the end of what it sent

    def recv(self, size: int) -> bytes:
        buffer = bytearray(size)
        return bytes(buffer[: self.recv_into(buffer)])

    def makefile(self, mode: str = "rb", buffering: int | None = None) -> io.BufferedReader:
        """A reader for http.client's responses (it asks for "rb" only). As a socket's,
        it keeps the connection open after close() until it is closed itself: http.client
        closes the connection of a response that ends it before the body is read."""
        self._readers += 1
        return io.BufferedReader(socket.SocketIO(self, "rb"))  # type: ignore[arg-type]

    def _decref_socketios(self) -> None:
        """SocketIO's call when a reader closes."""
        self._readers -= 1
        if self._closed and self._readers <= 0:
            self._outer.close()

    def settimeout(self, timeout: float | None) -> None:
        self._outer.settimeout(timeout)

    def gettimeout(self) -> float | None:
        return self._outer.gettimeout()

    def fileno(self) -> int:
        return self._outer.fileno()

    def close(self) -> None:
        self._closed = True
        if self._readers <= 0:
            self._outer.close()

    def _run(self, step: Callable[..., T], *args: object) -> T:
        """`step(*args)` of the inner session, carrying its records over the outer socket
        until it completes."""
        while True:
            try:
                result = step(*args)
            except ssl.SSLWantReadError:
                self._flush()
                data = self._outer.recv(1 << 16)
                if data:
                    self._incoming.write(data)
                else:
                    self._incoming.write_eof()
                continue
            self._flush()
            return result

    def _flush(self) -> None:
        if data := self._outgoing.read():
            self._outer.sendall(data)
