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
        except _NoPassphrase:
            raise BlobStoreError(
                f"the client key for {tls.cert} is behind a passphrase: set "
                f"{tls.settings}CertPasswordProtected true for git and git-mgit to ask for it"
            ) from None
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
            f"check {tls.settings}Cert and {tls.settings}Key"
        ) from None
    except OSError as exc:
        raise _unusable(tls, exc) from None
    helper.approve(credential)


class _NoPassphrase(ValueError):
    """OpenSSL asked for a passphrase nobody was to give."""


def _no_passphrase() -> str:
    raise _NoPassphrase


def _unusable(tls: Tls, exc: OSError | ValueError) -> BlobStoreError:
    files = [f for f in (tls.ca_file, tls.ca_path, tls.cert, tls.key) if f]
    names = (
        ("CAInfo", "CAPath", "Cert", "Key")
        if tls.settings == "http.ssl"
        else ("CAInfo", "Cert", "Key")
    )
    settings = ", ".join(f"{tls.settings}{name}" for name in names)
    variables = "GIT_SSL_CAINFO" if tls.settings == "http.ssl" else "GIT_PROXY_SSL_CAINFO"
    return BlobStoreError(
        f"git's TLS settings name files the LFS client cannot use ({', '.join(files)}: "
        f"{getattr(exc, 'strerror', None) or exc}); check {settings} (or {variables} and "
        "the like)"
    )


# OpenSSL's reasons for a peer's alert about our certificate (none, or refused)
_CLIENT_CERTIFICATE_ALERTS = (
    "CERTIFICATE_REQUIRED",
    "BAD_CERTIFICATE",
    "UNKNOWN_CA",
    "CERTIFICATE_UNKNOWN",
    "CERTIFICATE_EXPIRED",
    "CERTIFICATE_REVOKED",
)


def tls_failure(where: str, exc: ssl.SSLError, tls: Tls) -> BlobStoreError:
    """One line for a failed TLS exchange with `where` (a server's URL, a proxy), naming
    the settings `tls` came from. A peer that wants a client certificate says so in an
    alert, or (TLS 1.3, the request already sent) just closes: so without one, the hint
    names the settings either way."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return BlobStoreError(
            f"{where}: its certificate is not trusted ({exc.verify_message}); if your "
            "organisation's CA signs it, point git at that CA (git config "
            f"{tls.settings}CAInfo /path/to/ca.pem): git and git-mgit both use it"
        )
    reason = exc.reason or "the connection ended mid-exchange"
    fix = (
        f"point git at yours (git config {tls.settings}Cert and {tls.settings}Key): git and "
        "git-mgit both use it"
    )
    if any(alert in reason for alert in _CLIENT_CERTIFICATE_ALERTS):
        return BlobStoreError(
            f"{where}: it wants a client certificate it accepts ({reason}); {fix}"
        )
    hint = "" if tls.cert else f"; if it asks for a client certificate, {fix}"
    return BlobStoreError(f"{where}: TLS failed ({reason}); check its certificate{hint}")


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

    def idle(self) -> bool:
        """Whether the session is open with no data waiting (asked when the socket is
        readable: records without data, a TLS 1.3 ticket of either session, are read)."""
        timeout = self._outer.gettimeout()
        self._outer.settimeout(0)
        try:
            try:
                data = self._outer.recv(1 << 16)
            except ssl.SSLWantReadError:
                data = None  # the proxy's own records only
            if data == b"":
                return False
            if data:
                self._incoming.write(data)
            try:
                self._tls.read(1)  # b"": closed; a byte: junk where nothing was asked
            except ssl.SSLWantReadError:
                return True
            return False
        except OSError:
            return False
        finally:
            self._outer.settimeout(timeout)

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
