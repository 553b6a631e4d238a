"""Where credentials may go, and how a URL is shown: the rules every request obeys.

Credentials (git's, git-lfs-authenticate's, a server's action tokens) travel
only over https, or plain http to this machine's loopback, and only to the
host they were meant for. Any URL a user sees has no user, password, query
or fragment: pre-signed hrefs carry tokens in their query strings (and a
remote's user may be a token). Credentials are keyed by a URL's site:
scheme://host[:port], where https://h and https://h:443 are one.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
DEFAULT_PORTS = {"http": 80, "https": 443}  # a URL without a port means these
_UNSHOWN = re.compile(r"[\x00-\x20\x7f-\x9f]")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: traffic that never leaves this machine."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def may_send_credentials(url: str, proxy_host: str | None = None) -> bool:
    """Whether an Authorization header may go to `url` (https, or http to loopback; and
    then, through a proxy, only one on loopback too)."""
    parts = _split(url)
    if parts is None:
        return False
    scheme = parts.scheme.lower()
    if scheme == "https":
        return True
    through = proxy_host is None or is_loopback(proxy_host)
    return scheme == "http" and is_loopback(parts.hostname or "") and through


def parsable(url: str) -> bool:
    """Whether `url` can be taken apart (a server's href may hold `https://[::1/x`)."""
    return _split(url) is not None


def _split(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises for a port that is no number)
    except ValueError:
        return None
    return parts


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the default port made explicit: who a request goes to.
    The port is None where no request can go: not http(s), or a port that is no number
    or out of range (a server's href or redirect may hold anything)."""
    parts = _split(url)
    if parts is None:
        return url.partition(":")[0].lower(), "", None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(scheme)


def site(url: str) -> str:
    """`scheme://host[:port]`, the port only when not the scheme's default (https://h and
    https://h:443 are one site), never a user or password: how credentials are keyed."""
    scheme, host, port = origin(url)
    if port is None:  # unparsable, a bad port, or an unknown scheme's: as written
        authority = url.partition("://")[2].partition("/")[0].partition("?")[0]
        return f"{scheme}://{authority.rpartition('@')[2]}"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}{'' if port == DEFAULT_PORTS.get(scheme) else f':{port}'}"


def redact(url: str) -> str:
    """`url` as messages, traces and files show it: its site and path only, control
    characters and spaces %-escaped (one line, nothing a terminal acts on)."""
    parts = _split(url)
    shown = site(url) + (parts.path if parts else "")
    return _UNSHOWN.sub(lambda m: f"%{ord(m[0]):02X}", shown)
