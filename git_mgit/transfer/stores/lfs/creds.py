"""Credentials only through `git credential fill / approve / reject`, as git and git-lfs use them.

So whatever helper the user set up (a store, the OS keychain, a host's own
helper) serves git-mgit too, and git-mgit never stores, logs or prints a
password. With GIT_TERMINAL_PROMPT=0 and no helper, git fails at once
instead of prompting: nothing here ever waits on a terminal git was told not
to use.
"""

from __future__ import annotations

import base64
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from git_mgit.gitcmd import NO_PROMPT
from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.policy import redact
from git_mgit.transfer.stores.lfs.trace import trace

_BREAKS = "\n\r\0"  # what ends a line of git credential's input, or the input


@dataclass(frozen=True, repr=False)
class Credential:
    """What `git credential fill` returned: the fields to hand back to approve or reject."""

    fields: tuple[tuple[str, str], ...]

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.fields if k == key), None)

    def authorization(self) -> str:
        """The Authorization header value: `Basic user:password`, or a helper's own scheme."""
        authtype, credential = self.get("authtype"), self.get("credential")
        if authtype and credential:
            return f"{authtype} {credential}"
        token = f"{self.get('username') or ''}:{self.get('password') or ''}".encode()
        return "Basic " + base64.b64encode(token).decode()

    def __repr__(self) -> str:  # never the secret, even in a traceback's locals
        return f"Credential({self.get('protocol')}://{self.get('host')}, <redacted>)"


def request_fields(url: str) -> list[tuple[str, str]]:
    """What describes `url` to git credential: protocol, host (with port), path, username.

    git itself drops `path` for http(s) unless credential.useHttpPath is set, so
    helpers see exactly what git-lfs would send them.
    """
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    fields = [("protocol", parts.scheme.lower()), ("host", host)]
    if parts.path.strip("/"):
        fields.append(("path", unquote(parts.path.lstrip("/"))))
    if parts.username:
        fields.append(("username", unquote(parts.username)))
    return fields


class GitCredentials:
    """Runs `git credential` in the repository, so its config picks the helpers."""

    def __init__(self, cwd: Path) -> None:
        self._cwd = cwd

    def fill(self, url: str, prompt: bool = True) -> Credential:
        """`prompt`=False: only what a helper has, never a terminal or askpass prompt."""
        return self._fill(request_fields(url), url, prompt)

    def fill_key(self, cert: str) -> Credential:
        """The passphrase of the key that goes with client certificate `cert`, asked for as
        git asks (http.c: protocol `cert`, the certificate's path, no host or user)."""
        fields = [("protocol", "cert"), ("host", ""), ("path", cert), ("username", "")]
        return self._fill(fields, f"cert:///{cert.lstrip('/')}", prompt=True)

    def _fill(self, asked: list[tuple[str, str]], url: str, prompt: bool) -> Credential:
        for key, value in asked:
            if any(c in value for c in _BREAKS):
                # `%0ahost=other` decodes into a line of its own: git credential would then
                # answer for that host (git's CVE-2020-5260, git-lfs's CVE-2024-53263)
                raise BlobStoreError(
                    f"{redact(url)}: its {key}, decoded, holds a line break or a NUL, so it "
                    "could speak for another host to git credential; git-mgit sends it no "
                    "credentials (check the remote's URL, lfs.url and .lfsconfig)"
                )
        out = self._run("fill", asked, env=None if prompt else NO_PROMPT)
        fields = tuple(
            (k, v) for k, _, v in (line.partition("=") for line in out.splitlines()) if k
        )
        credential = Credential(fields)
        if credential.get("password") is None and credential.get("credential") is None:
            raise _no_credentials(url)
        trace(f"filled credentials for {redact(url)}")
        return credential

    def approve(self, credential: Credential) -> None:
        self._run("approve", list(credential.fields), check=False)

    def reject(self, credential: Credential) -> None:
        trace(f"rejecting credentials for {credential.get('protocol')}://{credential.get('host')}")
        self._run("reject", list(credential.fields), check=False)

    def _run(
        self,
        action: str,
        fields: list[tuple[str, str]],
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> str:
        text = "".join(f"{k}={v}\n" for k, v in fields) + "\n"
        try:
            proc = subprocess.run(
                ["git", "credential", action],
                cwd=self._cwd,
                env={**os.environ, **env} if env else None,
                input=text.encode(),
                capture_output=True,
                check=False,
            )
        except OSError as exc:
            raise BlobStoreError(f"could not run git credential ({exc.strerror})") from None
        if check and proc.returncode != 0:
            # git's own message may quote what a helper printed: never pass it on.
            url = f"{dict(fields)['protocol']}://{dict(fields)['host']}/{dict(fields).get('path', '')}"
            raise _no_credentials(url)
        return proc.stdout.decode("utf-8", "surrogateescape")


def _no_credentials(url: str) -> BlobStoreError:
    return BlobStoreError(
        f"{redact(url)} asks for credentials and no git credential helper gave any; "
        "set one up (git config --global credential.helper store, or your host's helper), "
        "or allow prompts (GIT_TERMINAL_PROMPT=1)"
    )
