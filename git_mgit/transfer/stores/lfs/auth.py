"""When to ask git for credentials, and remembering the answer: git-lfs's access modes.

A server is first asked with no credentials (public repositories need none,
and no user should be prompted for them). After its first 401, this process
fills credentials once per URL, sends them with every later request to it,
approves them on the first success and rejects them on a 401. The
credentials are the process's, shared by every store in it. That a URL asks
for them is remembered for the repository (`AccessModes`), so its next
process sends them from its first request instead of being refused once:
git-lfs keeps the same in `lfs.<url>.access = basic`, which is honoured too;
git-mgit writes no config, only the URLs, in .git/mgit/lfs-access.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.creds import Credential, GitCredentials
from git_mgit.transfer.stores.lfs.policy import redact

_lock = threading.Lock()
_filled: dict[str, Credential] = {}  # credential URL -> what git filled, for this process
_approved: set[str] = set()


class AccessModes:
    """The credential URLs known to ask for credentials (git-lfs's `basic` access mode),
    kept in `path` one a line, each as policy.redact shows it: no user (a remote's user may
    be a token), password or query, and https://h:443 is https://h."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._urls: set[str] = set()
        self._lock = threading.Lock()  # threads remember at once: one writer of the file
        if path is not None:
            with contextlib.suppress(OSError):
                lines = path.read_text().split()
                self._urls = {redact(url) for url in lines}
                if self._urls != set(lines):  # written before users were left out: scrub it
                    self._save()

    def asks(self, cred_url: str) -> bool:
        return redact(cred_url) in self._urls

    def add(self, cred_url: str) -> None:
        """Known to ask, for this process (what git-lfs's config says)."""
        self._urls.add(redact(cred_url))

    def remember(self, cred_url: str) -> None:
        """Known to ask, for later processes too (a file that cannot be written is only a
        round trip lost)."""
        with self._lock:
            if self.asks(cred_url):
                return
            self.add(cred_url)
            self._save()

    def _save(self) -> None:
        if self._path is None:
            return
        with contextlib.suppress(OSError):
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_name(f".{self._path.name}.{os.getpid()}")
            tmp.write_text("".join(f"{url}\n" for url in sorted(self._urls)))
            os.replace(tmp, self._path)


class Access:
    """The credentials a request to one credential URL should carry, if any."""

    def __init__(self, helper: GitCredentials, modes: AccessModes | None = None) -> None:
        self._helper = helper
        self._modes = modes or AccessModes()

    @property
    def helper(self) -> GitCredentials:
        """git credential, for what else the client asks it (a client key's passphrase)."""
        return self._helper

    def current(self, cred_url: str) -> Credential | None:
        """What to send now: the filled credential once the server has asked for one, in
        this process or (`modes`) before."""
        with _lock:
            known = _filled.get(cred_url)
        if known is None and self._modes.asks(cred_url):
            with contextlib.suppress(BlobStoreError):  # asked again after a 401, as at first
                return self.fill(cred_url, None)
        return known

    def prefill(self, cred_url: str) -> None:
        """Fill, ahead of the first request, what a URL known to ask for credentials needs,
        if a helper has them: never prompting (the request asks as usual if not)."""
        if not self._modes.asks(cred_url):
            return
        with _lock:
            if cred_url in _filled:
                return
        with contextlib.suppress(BlobStoreError):
            credential = self._helper.fill(cred_url, prompt=False)
            with _lock:
                _filled.setdefault(cred_url, credential)

    def fill(self, cred_url: str, refused: Credential | None) -> Credential:
        """Credentials after a 401 (`refused`: what was sent, if anything; another thread
        may have filled new ones already)."""
        with _lock:
            known = _filled.get(cred_url)
            if known is not None and known is not refused:
                return known
            credential = self._helper.fill(cred_url)
            _filled[cred_url] = credential
            return credential

    def approve(self, cred_url: str, credential: Credential) -> None:
        with _lock:
            if cred_url in _approved:
                return
            _approved.add(cred_url)
        self._helper.approve(credential)
        self._modes.remember(cred_url)

    def reject(self, cred_url: str, credential: Credential) -> None:
        with _lock:
            if _filled.get(cred_url) is credential:
                del _filled[cred_url]
            _approved.discard(cred_url)
        self._helper.reject(credential)


def forget() -> None:
    """Drop what this process remembers (tests that change a password mid-process)."""
    with _lock:
        _filled.clear()
        _approved.clear()
