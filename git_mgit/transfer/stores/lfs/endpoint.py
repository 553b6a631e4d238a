"""Which Git LFS server a remote uses, found exactly as git-lfs finds it (lfsapi/endpoint_finder.go).

In order: `lfs.pushurl` (uploads), `lfs.url`, `remote.<name>.lfspushurl`
(uploads), `remote.<name>.lfsurl`, each from git config or else from the
committed `.lfsconfig`; then derived from the remote's URL (its pushurl for
uploads): `https://host/path` -> `https://host/path.git/info/lfs`, and
`ssh://[user@]host[:port]/path` or `[user@]host:path` -> the same https URL,
authenticated over ssh with `git-lfs-authenticate`. `url.<base>.insteadOf`
(and `pushInsteadOf` for uploads) rewrite URLs first, as git does. A local
path or file:// remote has no LFS endpoint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from git_mgit.gitcmd import Repo
from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs import gitconfig
from git_mgit.transfer.stores.lfs.gitconfig import LfsConfig
from git_mgit.transfer.stores.lfs.policy import redact

# Hosts whose every repository has an LFS server (mgit.store = auto picks LFS for them).
KNOWN_HOSTS = ("huggingface.co", "github.com", "gitlab.com", "bitbucket.org")
_SSH_SCHEMES = ("ssh", "git+ssh", "ssh+git")


@dataclass(frozen=True)
class SshTarget:
    """Where `git-lfs-authenticate` runs: `ssh [-p port] user_and_host git-lfs-authenticate path op`."""

    user_and_host: str
    port: str | None
    path: str


@dataclass(frozen=True)
class Endpoint:
    """A remote's LFS API URL (`.../info/lfs`, never with credentials) and how it was found."""

    url: str
    configured: bool  # set by lfs.url or remote.<name>.lfsurl (else derived from the remote URL)
    source: str  # for messages: "lfs.url in .lfsconfig", "the URL of remote origin"
    remote_url: str | None = None  # the git remote's URL: git credential's host and path
    ssh: SshTarget | None = None

    @property
    def host(self) -> str:
        return (urlsplit(self.url).hostname or "").lower()

    @property
    def known_host(self) -> bool:
        """On a host known to serve LFS for every repository (or a subdomain of one)."""
        return any(self.host == h or self.host.endswith("." + h) for h in KNOWN_HOSTS)

    def __str__(self) -> str:
        return redact(self.url)


def endpoint_for(
    repo: Repo, remote: str, operation: str = "download", config: LfsConfig | None = None
) -> Endpoint | None:
    """The LFS endpoint of `remote` (a remote's name, or a URL) for `operation`
    (`download` or `upload`); None when it has none (a local path, file://)."""
    config = config or gitconfig.load(repo)
    upload = operation == "upload"
    keys = (
        *(["lfs.pushurl"] if upload else []),
        "lfs.url",
        *([f"remote.{remote}.lfspushurl"] if upload else []),
        f"remote.{remote}.lfsurl",
    )
    remote_url = _remote_url(config, remote, upload)
    for key in keys:
        value = config.get(key)
        if value:
            source = f"{key} in {config.where(key)}"
            return _endpoint(rewrite(config, value, upload), source, False, remote_url)
    if remote_url is None:
        return None
    return _endpoint(remote_url, f"the URL of remote {remote}", True, remote_url)


def rewrite(config: LfsConfig, url: str, upload: bool) -> str:
    """`url` after git's `url.<base>.insteadOf` (`pushInsteadOf` first for uploads): longest alias wins."""
    suffixes = (".pushinsteadof", ".insteadof") if upload else (".insteadof",)
    for suffix in suffixes:
        aliases = {
            alias: key[len("url.") : -len(suffix)]
            for key, values in config.items()
            if key.startswith("url.") and key.endswith(suffix)
            for alias in values
            if alias and url.startswith(alias)
        }
        if aliases:
            longest = max(aliases, key=len)
            return aliases[longest] + url[len(longest) :]
    return url


def _remote_url(config: LfsConfig, remote: str, upload: bool) -> str | None:
    """The remote's URL (pushurl for uploads), rewritten; `remote` itself if it is a URL."""
    if upload and (push := config.get(f"remote.{remote}.pushurl")):
        return rewrite(config, push, True)
    if url := config.get(f"remote.{remote}.url"):
        return rewrite(config, url, upload)
    if "://" in remote or ":" in remote or os.sep in remote:
        return rewrite(config, remote, upload)
    return None


def _endpoint(url: str, source: str, derived: bool, remote_url: str | None) -> Endpoint | None:
    """git-lfs's NewEndpoint (a configured URL, used as is) or NewEndpointFromCloneURL (derived)."""
    if _is_local(url):
        return None
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    ssh: SshTarget | None = None
    if scheme in ("http", "https"):
        api = _without_credentials(url)
    elif scheme == "git":
        api = "https" + _without_credentials(url)[len("git") :]
    elif scheme in _SSH_SCHEMES or not scheme:
        ssh, api = _ssh(url)
    else:
        return None  # a remote helper (`hg::...`, `s3://` ...): nothing git-lfs could use either
    if derived:
        api = api.rstrip("/")
        api += "/info/lfs" if api.endswith(".git") else ".git/info/lfs"
    return Endpoint(api, not derived, source, remote_url, ssh)


def _is_local(url: str) -> bool:
    """A path or file:// URL: git's rule is that a colon before any slash makes it ssh."""
    if url.lower().startswith("file://"):
        return True
    if "://" in url:
        return False
    colon, slash = url.find(":"), url.find("/")
    return colon < 0 or (0 <= slash < colon) or os.path.exists(url)


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme.lower(), netloc, parts.path, parts.query, ""))


def _ssh(url: str) -> tuple[SshTarget, str]:
    """(where git-lfs-authenticate runs, the https URL beside it) for an ssh or scp-like URL."""
    if "://" in url:
        parts = urlsplit(url)
        host, user, path = parts.hostname or "", parts.username, parts.path
        try:
            port = str(parts.port) if parts.port else None
        except ValueError as exc:
            raise BlobStoreError(
                f"{redact(url)}: bad port in ssh URL; fix the remote's URL"
            ) from exc
    else:  # [user@]host:path or [user@host:port]:path
        if url.startswith("["):
            inner, _, path = url[1:].partition("]:")
            userhost, _, port_text = inner.rpartition(":") if ":" in inner else (inner, "", "")
            port = port_text or None
        else:
            userhost, _, path = url.partition(":")
            port = None
        user, _, host = userhost.rpartition("@") if "@" in userhost else (None, "", userhost)
        path = path.lstrip("/")
    if not host or host.startswith("-") or (user or "").startswith("-"):
        raise BlobStoreError(
            f"{url.rpartition('@')[2]}: refusing ssh host {host!r}; fix the remote's URL"
        )
    target = SshTarget(f"{user}@{host}" if user else host, port, path)
    return target, f"https://{host}/{path.lstrip('/')}"
