"""A connection to a server through the proxy git's settings name, as curl opens one for
git: an HTTP proxy's `CONNECT host:port` (over TLS to an https:// proxy), or SOCKS 4,
4a and 5 (RFC 1928, with RFC 1929's user and password; `http.proxy =
socks5h://host:1080`). What goes through it (TLS, HTTP) is the caller's.

socks4 and socks5 resolve the server's name here and send its address; socks4a and
socks5h send the name, for the proxy to resolve (a network whose names only the proxy
knows). Bytes, as the SOCKS protocols have them:

    SOCKS5  greeting  05 n methods...             (00 no credentials, 02 user and password)
            choice    05 method                   (FF: none of those offered)
            login     01 len user len password -> 01 status (00: accepted)
            request   05 01 00 type address port  (type 01 IPv4, 03 name, 04 IPv6)
            reply     05 code 00 type address port  (code 00: connected)
    SOCKS4  request   04 01 port IPv4 user 00 [name 00]  (4a: IPv4 0.0.0.1, then the name)
            reply     00 code port IPv4           (code 5A: granted)
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import struct
from collections.abc import Callable

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.httpconfig import Proxy, Tls
from git_mgit.transfer.stores.lfs.tls import tls_failure

_MAX_LINE = 1 << 16  # of an HTTP proxy's answer to CONNECT
_SOCKS5_FAILURES = {
    1: "general failure",
    2: "connection not allowed by its rules",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}
_REFUSING = frozenset({2})  # answers no retry mends: the proxy's rules
_RETRIED = frozenset({408, 429})  # a CONNECT refused for now
_SOCKS4_GRANTED = 0x5A
_SOCKS4_FAILED = 0x5B  # rejected or failed: the server may be down
_SOCKS4A_MARK = b"\x00\x00\x00\x01"  # an IPv4 address no host has: the name follows


class TunnelError(OSError):
    """The proxy could not reach the server (worth a retry). The message is for the user as
    it is: it names the proxy, never its credentials."""


class ProxyRefused(TunnelError):
    """The proxy will not connect us as we asked: credentials it wants or refused
    (`login`), or its rules. No retry mends it."""

    def __init__(self, message: str, login: bool = True) -> None:
        super().__init__(message)
        self.login = login


def proxy_tls_failure(proxy: Proxy, exc: ssl.SSLError) -> BlobStoreError:
    """One line for a failed TLS exchange with an https:// proxy, naming its own settings."""
    return tls_failure(f"proxy {proxy.shown}", exc, proxy.tls)


def reach(proxy: Proxy, timeout: float, contexts: Callable[[Tls], ssl.SSLContext]) -> socket.socket:
    """A connection to the proxy itself: TLS for an https:// proxy (checked with
    `contexts(proxy.tls)`; BlobStoreError naming the proxy's TLS settings when that fails).
    Nagle's algorithm is off, as http.client turns it off on the connections it makes: a
    request's body sent after its head would otherwise wait for the proxy's delayed ACK."""
    sock = socket.create_connection((proxy.host, proxy.port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if proxy.scheme != "https":
        return sock
    try:
        return contexts(proxy.tls).wrap_socket(sock, server_hostname=proxy.host)
    except ssl.SSLError as exc:
        sock.close()
        raise proxy_tls_failure(proxy, exc) from None
    except BaseException:
        sock.close()
        raise


def connect(
    proxy: Proxy,
    host: str,
    port: int,
    timeout: float,
    contexts: Callable[[Tls], ssl.SSLContext],
) -> socket.socket:
    """A connection to `host`:`port` through `proxy`; TunnelError when the proxy cannot
    reach it (ProxyRefused when it will not), OSError when the proxy cannot be reached."""
    sock = reach(proxy, timeout, contexts)
    try:
        if proxy.scheme in ("http", "https"):
            _connect(sock, proxy, host, port)
        elif proxy.scheme in ("socks5", "socks5h"):
            _socks5(sock, proxy, host, port)
        else:
            _socks4(sock, proxy, host, port)
    except ssl.SSLError as exc:  # TLS 1.3: an https proxy refuses our certificate only now
        sock.close()
        raise proxy_tls_failure(proxy, exc) from None
    except BaseException:
        sock.close()
        raise
    return sock


def _connect(sock: socket.socket, proxy: Proxy, host: str, port: int) -> None:
    """HTTP's CONNECT (http.client's own writes an IPv6 address without brackets before
    Python 3.12), the proxy's credentials on it alone."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    with sock.makefile("rb", buffering=0) as answer:  # unbuffered: TLS bytes follow
        status = answer.readline(_MAX_LINE).split(b" ", 2)
        while answer.readline(_MAX_LINE) not in (b"\r\n", b"\n", b""):
            pass
    code = int(status[1]) if len(status) > 1 and status[1].isdigit() else 0
    said = f"proxy {proxy.shown} answered {code or 'no HTTP'} to CONNECT {target}"
    if code == 407:
        raise ProxyRefused(f"{said} (Proxy Authentication Required)")
    if 400 <= code < 500 and code not in _RETRIED:  # 403: its rules (ports, hosts)
        raise ProxyRefused(said, login=False)
    if code // 100 != 2:
        raise TunnelError(said)


def _socks5(sock: socket.socket, proxy: Proxy, host: str, port: int) -> None:
    methods = b"\x00\x02" if proxy.user is not None else b"\x00"
    sock.sendall(b"\x05" + bytes([len(methods)]) + methods)
    version, method = _read(sock, 2)
    if version != 5:
        raise TunnelError(f"{proxy.shown} is not a SOCKS5 proxy")
    if method == 0x02 and proxy.user is not None:
        user, password = proxy.user.encode(), (proxy.password or "").encode()
        if len(user) > 255 or len(password) > 255:
            raise ProxyRefused(f"SOCKS5 proxy {proxy.shown}: a user or password over 255 bytes")
        sock.sendall(b"\x01" + bytes([len(user)]) + user + bytes([len(password)]) + password)
        if _read(sock, 2)[1] != 0:
            raise ProxyRefused(f"SOCKS5 proxy {proxy.shown} refused the user and password")
    elif method != 0x00:
        wants = "a user and password" if method == 0x02 else "a login method this client lacks"
        raise ProxyRefused(f"SOCKS5 proxy {proxy.shown} wants {wants}")
    sock.sendall(b"\x05\x01\x00" + _socks5_address(proxy, host, port))
    _, code, _, kind = _read(sock, 4)
    if code != 0:
        failure = f"SOCKS5 proxy {proxy.shown}: {_SOCKS5_FAILURES.get(code, f'error {code}')}"
        raise ProxyRefused(failure, login=False) if code in _REFUSING else TunnelError(failure)
    length = {1: 4, 4: 16}.get(kind) or _read(sock, 1)[0]
    _read(sock, length + 2)  # the address the proxy bound, and its port: unused


def _socks5_address(proxy: Proxy, host: str, port: int) -> bytes:
    """The request's address: the name itself for socks5h, else an address found here."""
    address = _literal(host)
    if address is None and proxy.scheme == "socks5h":
        name = host.encode("idna")
        if len(name) > 255:
            raise ProxyRefused(f"{host}: a name too long for SOCKS5", login=False)
        return b"\x03" + bytes([len(name)]) + name + struct.pack(">H", port)
    if address is None:
        address = _resolved(host, port, socket.AF_UNSPEC, proxy)
    kind = b"\x01" if address.version == 4 else b"\x04"
    return kind + address.packed + struct.pack(">H", port)


def _socks4(sock: socket.socket, proxy: Proxy, host: str, port: int) -> None:
    user = (proxy.user or "").encode() + b"\x00"
    address = _literal(host)
    if address is None and proxy.scheme == "socks4a":
        request = _SOCKS4A_MARK + user + host.encode("idna") + b"\x00"
    else:
        address = address or _resolved(host, port, socket.AF_INET, proxy)
        if address.version != 4:
            raise ProxyRefused(
                f"SOCKS4 proxy {proxy.shown} reaches IPv4 addresses only, not {host}; use "
                "socks4a:// or socks5h://",
                login=False,
            )
        request = address.packed + user
    sock.sendall(b"\x04\x01" + struct.pack(">H", port) + request)
    _, code = _read(sock, 8)[:2]
    if code == _SOCKS4_FAILED:
        raise TunnelError(f"SOCKS4 proxy {proxy.shown}: request rejected or failed")
    if code != _SOCKS4_GRANTED:
        raise ProxyRefused(f"SOCKS4 proxy {proxy.shown} refused the user id (code {code:#x})")


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _resolved(
    host: str, port: int, family: socket.AddressFamily, proxy: Proxy
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The first address `host` resolves to here (socks4 and socks5 send an address)."""
    try:
        found = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    except socket.gaierror:
        kind = "an IPv4 address" if family == socket.AF_INET else "an address"
        raise TunnelError(
            f"{host} has no {kind} here, and {proxy.scheme}:// sends one; use "
            f"{'socks4a' if family == socket.AF_INET else 'socks5h'}:// for the proxy to "
            "resolve it"
        ) from None
    return ipaddress.ip_address(found[0][4][0])


def _read(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes of the proxy's answer."""
    data = bytearray()
    while len(data) < n:
        got = sock.recv(n - len(data))
        if not got:
            raise TunnelError("the proxy closed the connection mid-answer")
        data += got
    return bytes(data)
