"""`git push` of git-mgit's own refs: never our hook again, and what a refusal means.

Whatever the remote says when it refuses (its `remote:` lines, a hook's
message) reaches the user (remotes.transfer prints it), followed by one line
on what to do.

A gated push (Gate) is begun before the refs may reach the remote: git
connects and lists the remote's refs (two requests over HTTP, one of them
refused for credentials) while the objects those refs name still upload,
then waits in a pre-push hook of ours until the gate opens. The hook reads
one line from a pipe this process holds: `go` lets the push send; anything
else, or the pipe closing because this process stopped, stops it. git runs
the hook once for each push URL of the remote (a mirror's), so opening says
`go` once for each. Shutting a push that has sent nothing stops git
wherever it is: listing a slow remote, or waiting at a credentials prompt.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from git_mgit import config
from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo, anonymized
from git_mgit.store import anchors
from git_mgit.transfer.remotes import (
    RemoteUnreachable,
    Transfer,
    ls_remote,
    push_urls,
    pushed_to,
    transfer,
)

PAD_PREFIX = "refs/mgit/pad/"
PAD_OBJECTS = 100  # git's default receive.unpackLimit
PAD_FROM = 1 << 20  # pushes of fewer object bytes stay as they are: loose is cheap there
_ATTEMPTS = 3  # pushes of a batch that raced another clone's
_MARGIN = 0.95  # of mgit.maxPushSize: what git adds to our estimate stays under it
GATE_ENV = "GIT_MGIT_PUSH_GATE"  # the descriptor the gate's hook reads its verdict from
_GATE_HOOK = f"""#!/bin/sh
# git-mgit: a push of pointer refs waits here until their objects are in the blob store.
cat >/dev/null
case "${GATE_ENV}" in ''|*[!0-9]*) exit 1 ;; esac
IFS= read -r verdict <"/dev/fd/${GATE_ENV}" || exit 1
test "$verdict" = go
"""
# What hosts say when they refuse large or binary files in git (the Hub, GitHub, GitLab,
# Bitbucket, a size hook).
_TOO_LARGE = (
    "larger than",
    "exceeds",
    "git-lfs",
    "git lfs",
    "large file",
    "file size limit",
    "binary files",
    "/xet",
)


def push_limit(repo: Repo) -> int:
    """The most object bytes one `git push` may carry (mgit.maxPushSize, less a margin)."""
    return int(config.load(repo).max_push_size * _MARGIN)


def push(repo: Repo, remote: str, specs: Sequence[str], payload: int = 0) -> None:
    """One `git push --no-verify` of `specs`; padded when it carries `payload` bytes of tensor
    objects (see refs.py). Raises MgitError: git's reason and what to do."""
    specs = list(specs)
    if payload >= PAD_FROM:
        specs.append(f"+{_pad(repo)}:{PAD_PREFIX}{_clone_id(repo)}")
    try:
        transfer(repo, "push", "--no-verify", remote, *specs)
    except GitError as exc:
        raise _failed(remote, exc) from exc


class Gate:
    """A `git push` of `specs` (see the module's docstring), begun; open() or shut() ends it.
    begin() makes one."""

    def __init__(self, repo: Repo, remote: str, specs: Sequence[str], hooks: Path) -> None:
        self._remote = remote
        self._hook_runs = len(push_urls(repo, remote))
        verdict, self._say = os.pipe()
        try:
            self._push = Transfer(
                repo,
                "push",
                remote,
                *specs,
                config=("-c", f"core.hooksPath={hooks}"),
                fds=(verdict,),
                env={GATE_ENV: str(verdict)},
            )
        except BaseException:
            os.close(self._say)
            raise
        finally:
            os.close(verdict)

    @classmethod
    def begin(cls, repo: Repo, remote: str, specs: Sequence[str]) -> Gate | None:
        """The push begun, or None where git could not run the gate's hook: git skips a hook
        it may not execute (Windows, a folder mounted noexec) and would send at once."""
        if os.name != "posix":
            return None
        hooks = _gate_hooks(repo)
        if not os.access(hooks / "pre-push", os.X_OK):  # what git asks before it runs one
            return None
        return cls(repo, remote, specs, hooks)

    def open(self) -> None:
        """Let the push send (to each push URL), and wait for it; raises MgitError as
        push() does."""
        try:
            os.write(self._say, b"go\n" * self._hook_runs)  # a pipe holds 4 KiB at least
        except BrokenPipeError:
            pass  # git stopped before its hook: wait() says why
        finally:
            os.close(self._say)
        try:
            self._push.wait()
        except GitError as exc:
            raise _failed(self._remote, exc) from exc

    def shut(self) -> None:
        """Stop the push before it sends anything, wherever it is, and wait for it."""
        os.close(self._say)  # a hook under way reads no verdict: it refuses
        self._push.stop()


def _gate_hooks(repo: Repo) -> Path:
    """The folder of the gate's hook (made once, in .git/mgit/)."""
    folder = repo.mgit_dir / "gate-hooks"
    hook = folder / "pre-push"
    if not hook.is_file() or hook.read_text() != _GATE_HOOK:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f"pre-push.{os.getpid()}"
        temporary.write_text(_GATE_HOOK)
        temporary.chmod(0o755)
        os.replace(temporary, hook)
    return folder


def _failed(remote: str, exc: GitError) -> MgitError:
    return MgitError(f"pushing tensor objects to {anonymized(remote)} failed ({exc}); {hint(exc)}")


def hint(exc: GitError) -> str:
    """What to do about a refused push, from what git and the remote said."""
    said = exc.detail.lower()
    if "exceeds maximum allowed size" in said:
        return "the remote refused the pack's size: lower `git config mgit.maxPushSize`"
    if any(word in said for word in _TOO_LARGE):
        return (
            "the remote refuses large files in git: keep tensor objects in its Git LFS store "
            "(`git config mgit.store lfs`) or a bucket (`git config mgit.store s3://bucket/prefix`)"
        )
    return "run the push again: it resumes where it stopped"


def push_refs(
    repo: Repo,
    remote: str,
    names: Sequence[str],
    payload: int = 0,
    first: Callable[[], None] | None = None,
    before: Mapping[str, str] | None = None,
) -> bool:
    """Force-push refs of the same name; True if a push carried them. `first`: the first
    attempt, begun already (a Gate's open()); `before`: what the remote held under those
    names when it was listed (a migration replaces refs).

    Another clone publishing one of them at the same moment makes git refuse
    ours: its ref is as good (the same version, complete), so what the remote
    then has counts as done (a name that still holds what it held before does
    not) and the rest is pushed again. A remote with several push URLs counts
    a name done only where every one of them has it.
    """
    before = before or {}
    todo = list(names)
    for attempt in range(_ATTEMPTS):
        if not todo:
            return False
        try:
            if first is not None and attempt == 0:
                first()
            else:
                push(repo, remote, [f"+{name}:{name}" for name in todo], payload)
            return True
        except MgitError:
            if attempt + 1 == _ATTEMPTS:
                raise
            listed = [_holding(repo, where, todo) for where in pushed_to(repo, remote)]
            todo = [
                name
                for name in todo
                if any(there.get(name, before.get(name)) == before.get(name) for there in listed)
            ]
    return False


def _holding(repo: Repo, where: str, names: Sequence[str]) -> dict[str, str]:
    """What `where` holds of `names`: nothing, where it cannot be asked now (an outage
    that may pass; the next push says what git says)."""
    try:
        return ls_remote(repo, where, *names)
    except RemoteUnreachable:
        return {}


def _pad(repo: Repo) -> str:
    """A commit of PAD_OBJECTS blobs no remote has yet (unique to this push)."""
    nonce = f"{time.time_ns()} {os.getpid()}"
    blobs = [f"git-mgit pad {nonce} {i}\n".encode() for i in range(PAD_OBJECTS)]
    return anchors.commit_blobs(repo, blobs, "git-mgit pad: keeps a push a pack on the remote\n")


def _clone_id(repo: Repo) -> str:
    """A random name for this clone, made once (.git/mgit/clone-id)."""
    path = repo.mgit_dir / "clone-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.write_text(os.urandom(8).hex() + "\n")
        return path.read_text().strip()
