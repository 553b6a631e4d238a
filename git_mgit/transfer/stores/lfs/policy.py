"""Where credentials may go, and how a URL is shown: the rules every request obeys.

Credentials (git's, git-lfs-authenticate's, a server's action tokens) travel
only over https, or plain http to this machine's loopback, and only to the
host they were meant for. Any URL a user sees has no user, password, query
or fragment: pre-signed hrefs carry tokens in their query strings.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: traffic that never leaves this machine."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def may_send_credentials(url: str) -> bool:
    """Whether an Authorization header may go to `url` (https, or http to loopback)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https":
        return True
    return scheme == "http" and is_loopback(parts.hostname or "")


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the default port made explicit: who a request goes to."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    default = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), parts.port or default


def redact(url: str) -> str:
    """`url` as messages and traces show it: scheme, host, port and path only."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
