"""When to ask git for credentials, and remembering the answer: git-lfs's access modes.

A server is first asked with no credentials (public repositories need none,
and no user should be prompted for them). After its first 401, this process
fills credentials once per URL, sends them with every later request to it,
approves them on the first success and rejects them on a 401. The memory is
the process's, shared by every store in it (git-lfs keeps it in
`lfs.<url>.access`; git-mgit writes no config).
"""

from __future__ import annotations

import threading

from git_mgit.transfer.stores.lfs.creds import Credential, GitCredentials

_lock = threading.Lock()
_filled: dict[str, Credential] = {}  # credential URL -> what git filled, for this process
_approved: set[str] = set()


class Access:
    """The credentials a request to one credential URL should carry, if any."""

    def __init__(self, helper: GitCredentials) -> None:
        self._helper = helper

    def current(self, cred_url: str) -> Credential | None:
        """What to send now: the filled credential once the server has asked for one."""
        with _lock:
            return _filled.get(cred_url)

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
