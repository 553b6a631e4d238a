"""git's `http.*` settings for one URL, read as git reads them, so the LFS client goes
where git goes: through the same proxy, trusting the same CAs, with the same extra headers.

- TLS: `http.sslVerify`, `http.sslCAInfo`, `http.sslCAPath`, `http.sslCert`,
  `http.sslKey`, `http.sslCertPasswordProtected`; git's environment variables
  override them (`GIT_SSL_NO_VERIFY`, `GIT_SSL_CAINFO`, `GIT_SSL_CAPATH`,
  `GIT_SSL_CERT`, `GIT_SSL_KEY`, `GIT_SSL_CERT_PASSWORD_PROTECTED`). An https://
  proxy's own: `http.proxySSLCAInfo`, `http.proxySSLCert`, `http.proxySSLKey`,
  `http.proxySSLCertPasswordProtected` (`GIT_PROXY_SSL_*`), always verified.
  tls.py makes the contexts.
- The proxy: the remote's `remote.<name>.proxy`, else `http.proxy`, else the
  environment's (`https_proxy` or `HTTPS_PROXY` for https, `http_proxy` for http,
  then `all_proxy` or `ALL_PROXY`: the first one set, an empty one meaning none), as
  curl reads them; `no_proxy` (else `NO_PROXY`) names hosts, domains and address
  ranges (`10.0.0.0/8`) that go direct, whichever proxy was named (`*` alone: every
  host). An empty setting means no proxy. An HTTP proxy (http:// or, TLS to the
  proxy itself, https://), or SOCKS 4, 4a, 5 or 5h (tunnel.py).
- `http.extraHeader`, as many as given (an empty one drops those before it): CI
  systems pass a token this way (GitHub's checkout action among them).

Each may be set for a URL, `http.<url>.<key>`, by git's rules (urlmatch.c): the
entry whose URL has the longest host, then the longest path (on `/` boundaries),
then a user name that matches, is the one; a later entry as specific as an
earlier one replaces it; an entry less specific than one before it is ignored.
Only git config sets these: a committed `.lfsconfig` may not (gitconfig.py), so
a cloned repository can neither turn verification off nor send headers anywhere.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import SplitResult, unquote, urlsplit

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.policy import DEFAULT_PORTS

_FALSE = frozenset({"false", "no", "off", "0"})
_PROXY_PORTS = {"https": 443}  # curl's, for a proxy URL without one; else 1080
_PROXY_SCHEMES = frozenset({"http", "https", "socks4", "socks4a", "socks5", "socks5h"})
_TLS_SETTINGS = {  # settings' start -> (config key's start, environment variables' start)
    "http.ssl": ("ssl", "GIT_SSL_"),
    "http.proxySSL": ("proxyssl", "GIT_PROXY_SSL_"),
}
_SCHEME_ALIASES = {"socks": "socks4"}  # git's http.c and curl both take socks:// so
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class Tls:
    """How to check the servers' certificates, and which one of ours to show."""

    verify: bool = True
    ca_file: str | None = None
    ca_path: str | None = None
    cert: str | None = None
    key: str | None = None
    password_protected: bool = False  # the key's passphrase from git credential (tls.py)
    settings: str = "http.ssl"  # their names' start, for messages: or http.proxySSL


@dataclass(frozen=True)
class Proxy:
    """A proxy: its kind (`http`, `socks4`, `socks4a`, `socks5`, `socks5h`), where it is,
    and the credentials its URL gave."""

    scheme: str
    host: str
    port: int
    user: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    shown: str = ""  # its URL without credentials, for messages
    setting: str = "http.proxy"  # where it was named, for messages
    tls: Tls = Tls()  # how an https proxy's own certificate is checked, and ours shown it

    def takes_requests_for(self, scheme: str) -> bool:
        """Whether requests to a `scheme` server go to this proxy itself, in absolute form
        (http through an HTTP proxy), not through a tunnel: its 407 and TLS are its own."""
        return self.scheme in ("http", "https") and scheme.lower() == "http"

    @property
    def authorization(self) -> str | None:
        """An HTTP proxy's Proxy-Authorization value for the credentials, if any."""
        if self.user is None:
            return None
        pair = f"{self.user}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode()


@dataclass(frozen=True)
class Route:
    """How to reach one server: the TLS settings, and the proxy (None: direct)."""

    tls: Tls = Tls()
    proxy: Proxy | None = None


@dataclass(frozen=True, order=True)
class _Match:
    """How specific a config entry's URL is for a request (compared field by field)."""

    host: int
    path: int
    user: bool


class HttpConfig:
    """The `http.*` entries of git config, in order, asked about one URL at a time."""

    def __init__(
        self,
        pairs: Iterable[tuple[str, str]],
        env: Mapping[str, str] | None = None,
        remote_proxy: tuple[str, str] | None = None,
    ) -> None:
        """`pairs`: (key, value) as `git config --list` gives them; `env`: the environment;
        `remote_proxy`: (`remote.<name>.proxy`, its value) of the remote the requests are
        for, if set: it wins over `http.proxy`, as in git."""
        self._entries = [(k, v) for k, v in pairs if k.startswith("http.")]
        self._env = os.environ if env is None else env
        self._remote_proxy = remote_proxy

    def route(self, url: str) -> Route:
        """The TLS settings and proxy for requests to `url`; BlobStoreError for a proxy
        setting this client cannot use."""
        said = self._last(url)
        verify = _git_bool(said.get("sslverify", "true")) and "GIT_SSL_NO_VERIFY" not in self._env
        proxy = self._proxy(url, self._remote_proxy or _named("http.proxy", said.get("proxy")))
        if proxy is not None and proxy.scheme == "https":  # always checked, as git has it
            proxy = replace(proxy, tls=self._tls(said, "http.proxySSL", True))
        return Route(self._tls(said, "http.ssl", verify), proxy)

    def _tls(self, said: dict[str, str], settings: str, verify: bool) -> Tls:
        """The TLS settings `<settings>*` (`http.sslCAInfo`, `http.proxySSLCAInfo`), each
        overridden by its environment variable (`GIT_SSL_CAINFO`, `GIT_PROXY_SSL_CAINFO`)."""
        key, var = _TLS_SETTINGS[settings]
        paths = {
            name: os.path.expanduser(path)
            if (path := self._env.get(f"{var}{name.upper()}") or said.get(f"{key}{name}"))
            else None
            for name in ("cainfo", "capath", "cert", "key")
        }
        protected = f"{var}CERT_PASSWORD_PROTECTED" in self._env or _git_bool(
            said.get(f"{key}certpasswordprotected", "false")
        )
        return Tls(
            verify,
            paths["cainfo"],
            paths["capath"] if key == "ssl" else None,  # git has no http.proxySSLCAPath
            paths["cert"],
            paths["key"],
            protected,
            settings,
        )

    def headers(self, url: str) -> list[tuple[str, str]]:
        """The extra headers requests to `url` carry, as (name, value)."""
        out: list[tuple[str, str]] = []
        for value in self._applying(url, "extraheader"):
            if not value:
                out.clear()
                continue
            name, colon, rest = value.partition(":")
            if colon and name.strip():
                out.append((name.strip(), rest.strip()))
        return out

    def _last(self, url: str) -> dict[str, str]:
        """Each single-valued key's value for `url`."""
        said: dict[str, str] = {}
        for key, value in self._accepted(url):
            said[key] = value
        return said

    def _applying(self, url: str, name: str) -> list[str]:
        return [value for key, value in self._accepted(url) if key == name]

    def _accepted(self, url: str) -> Iterable[tuple[str, str]]:
        """(key name, value) of each entry git would apply to `url`, in order (those for
        every URL only, when `url` cannot be parsed: the request fails on its own)."""
        try:
            target: SplitResult | None = urlsplit(url)
            _port(target)
        except ValueError:
            target = None
        best: dict[str, _Match] = {}
        for key, value in self._entries:
            scope, _, name = key[len("http.") :].rpartition(".")
            match = _Match(0, 0, False) if not scope else _match(target, scope) if target else None
            if match is None or (name in best and match < best[name]):
                continue
            best[name] = match
            yield name, value

    def _proxy(self, url: str, configured: tuple[str, str] | None) -> Proxy | None:
        """`configured`: (setting, value) of the proxy git config names, if it does."""
        try:
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
        except ValueError:
            return None  # no request can go there: it fails on its own
        bypass = self._first("no_proxy", "NO_PROXY")
        if bypass is not None and _bypassed(host, bypass[1]):
            return None
        if configured is not None:
            setting, value = configured
            return _parse_proxy(value, setting) if value.strip() else None
        names = ("https_proxy", "HTTPS_PROXY") if parts.scheme == "https" else ("http_proxy",)
        named = self._first(*names, "all_proxy", "ALL_PROXY")
        return _parse_proxy(named[1], named[0]) if named and named[1].strip() else None

    def _first(self, *names: str) -> tuple[str, str] | None:
        """The first of the environment variables `names` that is set (empty or not)."""
        return next(((n, self._env[n]) for n in names if n in self._env), None)


def _named(setting: str, value: str | None) -> tuple[str, str] | None:
    return None if value is None else (setting, value)


def _git_bool(value: str) -> bool:
    """As git reads a boolean: an empty value is false, a number is true unless 0;
    anything git would refuse counts as true here (the safe side for sslVerify)."""
    text = value.strip().lower()
    if text in _FALSE or not text:
        return False
    try:
        return int(text, 0) != 0
    except ValueError:
        return True


def _parse_proxy(value: str, setting: str) -> Proxy:
    """`[scheme://][user[:password]@]host[:port]`, as git and curl take it (no scheme:
    http)."""
    text = value.strip()
    try:
        parts = urlsplit(text if "://" in text else f"http://{text}")
        port = parts.port or _PROXY_PORTS.get(parts.scheme.lower(), 1080)
    except ValueError:  # an unparsable host or port: shown without what it holds
        parts, port = urlsplit(f"{text.partition('://')[0]}://?"), 0
    scheme = _SCHEME_ALIASES.get(parts.scheme.lower(), parts.scheme.lower())
    host = parts.hostname or "?"
    shown = f"{scheme}://{f'[{host}]' if ':' in host else host}:{port or '?'}"
    if scheme not in _PROXY_SCHEMES or not parts.hostname or not port:
        raise BlobStoreError(
            f"{setting} = {shown}: not a proxy git-mgit's LFS client can use (it takes "
            "http://, https://, socks4://, socks4a://, socks5:// and socks5h://"
            f"[user:password@]host[:port]); fix {setting}, or unset it for the LFS server"
        )
    user = None if parts.username is None else unquote(parts.username)
    password = None if parts.password is None else unquote(parts.password)
    return Proxy(scheme, parts.hostname, port, user, password, shown, setting)


def _match(target: SplitResult, scope: str) -> _Match | None:
    """How `scope` (a config entry's URL) matches `target`, or None: git's match_urls."""
    try:
        pattern = urlsplit(scope)
        port, wanted = _port(target), _port(pattern)
    except ValueError:
        return None
    if pattern.scheme.lower() != target.scheme.lower() or port != wanted:
        return None
    host = _host(pattern)
    if not _host_matches(_host(target), host):
        return None
    user = pattern.username
    if user is not None and _unescaped(user) != _unescaped(target.username or ""):
        return None
    path = _path_match(_path(target), _path(pattern))
    if not path:
        return None
    return _Match(len(host), path, user is not None)


def _host(parts: SplitResult) -> str:
    return (parts.hostname or "").lower().removesuffix(".")


def _path(parts: SplitResult) -> str:
    """The path and query as git's url_normalize leaves them: escapes of unreserved
    characters decoded, `.` and `..` segments resolved."""
    kept: list[str] = []
    for segment in _unescaped(parts.path or "/").split("/")[1:]:
        if segment == "..":
            kept = kept[:-1]
        elif segment != ".":
            kept.append(segment)
    query = f"?{_unescaped(parts.query)}" if parts.query else ""
    return "/" + "/".join(kept) + query


def _unescaped(text: str) -> str:
    """`%XX` of an unreserved character decoded, any other in upper case."""

    def one(escape: re.Match[str]) -> str:
        char = chr(int(escape[1], 16))
        return char if char in _UNRESERVED else f"%{escape[1].upper()}"

    return _ESCAPE.sub(one, text)


def _port(parts: SplitResult) -> int | None:
    return parts.port or DEFAULT_PORTS.get(parts.scheme.lower())


def _host_matches(host: str, pattern: str) -> bool:
    """Label by label; a `*` label matches any one label, as git's does."""
    labels, wanted = host.split("."), pattern.split(".")
    return len(labels) == len(wanted) and all(
        want in ("*", label) for label, want in zip(labels, wanted, strict=True)
    )


def _path_match(path: str, prefix: str) -> int:
    """The length of the match (with an implicit final `/`), 0 if none: a prefix matches
    only up to a path component's boundary."""
    if prefix == "/":
        return 1
    prefix = prefix.removesuffix("/")
    if not path.startswith(prefix):
        return 0
    rest = path[len(prefix) :]
    return len(prefix) + 1 if rest in ("", "/") or rest.startswith("/") else 0


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether `no_proxy` sends `host` direct, as curl reads it: `*` alone means every
    host; else comma- or space-separated names (a domain covers its subdomains) and,
    for an address, addresses and ranges (`10.0.0.0/8`; curl reads `/0` as one address)."""
    if no_proxy.strip() == "*":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in no_proxy.replace(",", " ").split():
        entry = entry.lower().lstrip(".")
        if address is not None and "/" in entry:
            with contextlib.suppress(ValueError):
                network = ipaddress.ip_network(entry, strict=False)
                if address == network.network_address or (network.prefixlen and address in network):
                    return True
        elif host == entry or host.endswith(f".{entry}"):
            return True
    return False
