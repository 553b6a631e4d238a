"""`git-lfs-authenticate` over ssh: how an ssh remote's LFS server lends its https credentials.

The ssh program is chosen the way git chooses it (connect.c):
`GIT_SSH_COMMAND`, then `core.sshCommand` (both run through a shell), then
`GIT_SSH` (a program), then `ssh`; `GIT_SSH_VARIANT` / `ssh.variant`, else
the program's name, says how to pass a port. The answer (`href`, `header`,
`expires_in` / `expires_at`) is kept until it is about to expire. A server
without git-lfs-authenticate means "use the https URL as derived", as in
git-lfs (lfshttp/ssh.go).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from git_mgit.console.quoted import quoted
from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.batch import expiry, header_map
from git_mgit.transfer.stores.lfs.endpoint import SshTarget
from git_mgit.transfer.stores.lfs.gitconfig import LfsConfig
from git_mgit.transfer.stores.lfs.trace import trace

COMMAND = "git-lfs-authenticate"
_EXPIRY_MARGIN_S = 5.0
_NOT_FOUND_EXIT = 127
_NOT_FOUND = (
    "git-lfs-authenticate: not found",
    "git-lfs-authenticate: command not found",
    "git-lfs-authenticate: no such file",
    "command not found: git-lfs-authenticate",
)


@dataclass(frozen=True)
class SshAuth:
    """What git-lfs-authenticate answered (href None: use the derived https URL)."""

    href: str | None
    header: dict[str, str] = field(default_factory=dict)
    expires_at: float | None = None  # time.time() seconds

    def fresh(self) -> bool:
        return self.expires_at is None or time.time() + _EXPIRY_MARGIN_S < self.expires_at


def ssh_argv(config: LfsConfig, target: SshTarget, remote_command: str) -> list[str]:
    """The command line that runs `remote_command` on `target`, as git would build it."""
    shell_command = os.environ.get("GIT_SSH_COMMAND") or config.get("core.sshCommand")
    program = shell_command.split()[0] if shell_command else os.environ.get("GIT_SSH") or "ssh"
    variant = _variant(config, program)
    args = ["-batch"] if variant == "tortoiseplink" else []
    if target.port:
        if variant == "simple":
            raise BlobStoreError(
                f"ssh://{target.user_and_host}:{target.port}: this ssh ({program}) takes no port; "
                "set GIT_SSH_VARIANT=ssh if it accepts -p"
            )
        args += ["-P" if variant in ("putty", "tortoiseplink") else "-p", target.port]
    args += [target.user_and_host, remote_command]
    if shell_command:
        return ["sh", "-c", f'{shell_command} "$@"', shell_command, *args]
    return [program, *args]


def _variant(config: LfsConfig, program: str) -> str:
    chosen = os.environ.get("GIT_SSH_VARIANT") or config.get("ssh.variant") or "auto"
    if chosen == "plink":
        return "putty"
    if chosen in ("ssh", "simple", "putty", "tortoiseplink"):
        return chosen
    base = Path(program).stem.lower()
    return {"plink": "putty", "tortoiseplink": "tortoiseplink"}.get(base, "ssh")


class SshAuthenticator:
    """Runs git-lfs-authenticate once per operation and keeps the answer while it is fresh."""

    def __init__(self, config: LfsConfig, target: SshTarget, cwd: Path) -> None:
        self._config, self._target, self._cwd = config, target, cwd
        self._lock = threading.Lock()
        self._cache: dict[str, SshAuth] = {}

    def resolve(self, operation: str) -> SshAuth:
        with self._lock:
            cached = self._cache.get(operation)
            if cached is None or not cached.fresh():
                cached = self._cache[operation] = self._run(operation)
            return cached

    def _run(self, operation: str) -> SshAuth:
        target = self._target
        argv = ssh_argv(self._config, target, f"{COMMAND} {target.path} {operation}")
        where = f"ssh {target.user_and_host} {COMMAND} {target.path} {operation}"
        trace(f"run: {where}")
        started = time.time()
        try:
            proc = subprocess.run(
                argv, cwd=self._cwd, capture_output=True, stdin=subprocess.DEVNULL, check=False
            )
        except OSError as exc:
            raise BlobStoreError(
                f"{where}: could not run ssh ({exc.strerror}); install ssh or set GIT_SSH_COMMAND"
            ) from None
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        if proc.returncode:
            if proc.returncode == _NOT_FOUND_EXIT or any(n in stderr.lower() for n in _NOT_FOUND):
                trace(f"{target.user_and_host} has no {COMMAND}: using the derived https URL")
                return SshAuth(None)
            last = quoted(stderr.splitlines()[-1]) if stderr else f"exit {proc.returncode}"
            raise BlobStoreError(
                f"{where} failed ({last}); check that `ssh {target.user_and_host}` works"
            )
        return _parse(proc.stdout, started, where)


def _parse(out: bytes, started: float, where: str) -> SshAuth:
    try:
        answer = json.loads(out)
        return SshAuth(
            str(answer["href"]), header_map(answer.get("header") or {}), expiry(answer, started)
        )
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        raise BlobStoreError(
            f"{where} answered something that is not git-lfs-authenticate JSON; "
            "check the server's git-lfs-authenticate"
        ) from None
