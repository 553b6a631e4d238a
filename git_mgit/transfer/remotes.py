"""Which remote to talk to, and what it lists.

One `git ls-remote` tells a fetch which version refs exist and a push what
the remote already holds. The pre-push hook's shell script begins that
listing before git-mgit starts, and hands it over on a descriptor
(hooks/hookfiles.py; push_listing): the remote answers while Python starts
and imports, where the two took some 40 ms each, one after the other.

Listings, and a fresh clone's fetch of refs by name (guess.py), speak git's
protocol v0: its first answer is the ref advertisement itself, where v2
takes a second exchange (its capabilities, then `ls-refs`). That is a round
trip less, and over smart HTTP one run of the server's git less (an HTTP
listing of a giftless remote on loopback: 0.064 s in v2, 0.020 s in v0). v0
advertises every ref, not just the prefixes asked for, so the patterns are
matched here, as git matches them in v2; a remote that advertises more than
MANY_REFS refs beyond those asked for (a busy GitHub repository's
`refs/pull/*`) is noted in .git/mgit/many-refs/ and listed in v2 from then
on.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo, anonymized, gist, remote_file_name
from git_mgit.hooks.hookfiles import LISTING_END
from git_mgit.store import keep
from git_mgit.store.lookup import ANCHOR_PREFIX, PARTIAL_PREFIX, RECORD_REF, VERSION_PREFIX
from git_mgit.transfer.notes import NOTES_REF

# Keep every fetched pack as it arrives: git unpacks small fetches into loose
# objects, recompressing tensor objects and hiding them from the pack reader.
KEEP_PACKS = ("-c", "fetch.unpackLimit=1")
# A fetch git-mgit makes inside a git command (a checkout's objects, a clone's refs) leaves
# git's housekeeping to git's own commands: `git maintenance run --auto` took 6 ms of a
# fresh clone's way to its first download, and may start a gc in the middle of a checkout.
NO_MAINTENANCE = "--no-auto-maintenance"


class RemoteUnreachable(MgitError):
    """A remote could not be asked (offline, wrong URL, no permission)."""


def remotes(repo: Repo) -> list[str]:
    return [r for r in repo.git("remote").splitlines() if r]


def default_remote(repo: Repo) -> str | None:
    """The current branch's upstream remote, else origin, else the only remote."""
    branch = repo.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    if branch:
        up = repo.config(f"branch.{branch}.remote")
        if up and up != ".":
            return up
    names = remotes(repo)
    if "origin" in names:
        return "origin"
    return names[0] if len(names) == 1 else None


def candidates(repo: Repo) -> Iterator[str]:
    """Remotes to try in order: the default one first, then the others, listed only if the
    first did not do."""
    first = default_remote(repo)
    if first:
        yield first
    yield from (r for r in remotes(repo) if r != first)


# What a push lists beside the version refs: parts of an unfinished push, the branches and
# tags (whose versions the remote holds), and the store the remote records.
_PUSH_PATTERNS = (f"{PARTIAL_PREFIX}*", "refs/heads/*", "refs/tags/*", RECORD_REF)
# What a fetch lists beside the version refs: anchors (a remote from before version refs),
# the lineage notes, and the store the remote records.
_FETCH_PATTERNS = (f"{ANCHOR_PREFIX}*", NOTES_REF, RECORD_REF)


MANY_REFS = 4096  # past this many refs not asked for (~300 KB), a listing asks in v2
_REF_LINE = re.compile(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?\t")
_V0 = ("-c", "protocol.version=0")


def _many_refs_mark(repo: Repo, remote: str) -> Path:
    # not repo.mgit_dir, which creates .git/mgit: a fresh clone's filter asks before anything
    return repo.common_dir / "mgit" / "many-refs" / remote_file_name(remote)


def protocol(repo: Repo, remote: str) -> tuple[str, ...]:
    """git's options for asking `remote` for refs by name in one exchange: protocol v0,
    unless the remote advertises too many refs for it."""
    return () if _many_refs_mark(repo, remote).exists() else _V0


class _Handed:
    """A `git -c protocol.version=0 ls-remote` a hook's shell began (hookfiles.py), read
    from a descriptor as a subprocess's pipes are: its output and error lines, then its
    exit status on a line of its own (LISTING_END)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._came = bytearray()
        self._said = (b"", b"")
        self.returncode: int | None = None

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._fd is not None:
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                if not select.select([self._fd], [], [], left)[0]:
                    raise subprocess.TimeoutExpired("git ls-remote", timeout or 0)
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                self._close()
                self._said, self.returncode = _split_handed(bytes(self._came))
                break
            self._came += chunk
        return self._said

    def kill(self) -> None:
        """Stop reading a listing nobody wants (its shell's git then gets EPIPE)."""
        if self._fd is not None:
            self._close()
            self.returncode = -signal.SIGKILL

    def _close(self) -> None:
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None


def _split_handed(data: bytes) -> tuple[tuple[bytes, bytes], int]:
    """((refs lines, the rest), exit status) of what a hook's listing wrote."""
    lines = data.splitlines(keepends=True)
    end = LISTING_END.encode()
    if not lines or not lines[-1].startswith(end):
        return (b"", b"the hook's listing ended early\n"), 1
    status = int(lines.pop()[len(end) :].strip() or b"1")
    refs = [line for line in lines if _REF_LINE.match(line)]
    said = [line for line in lines if not _REF_LINE.match(line)]
    return (b"".join(refs), b"".join(said)), status


class Listing:
    """A `git ls-remote` under way, read when needed."""

    def __init__(
        self,
        repo: Repo,
        remote: str,
        patterns: Sequence[str],
        env: Mapping[str, str] | None = None,
        handed: int | None = None,
    ) -> None:
        """`env`: set in git's environment (to keep it from prompting, say); `handed`: the
        descriptor of the same listing in protocol v0, begun by a hook's shell (else closed)."""
        self.remote = remote
        self._repo = repo
        v0 = protocol(repo, remote)
        # v0 lists every ref whatever is asked: the patterns are matched in refs()
        self._patterns = list(patterns) if v0 else None
        self._proc: subprocess.Popen[bytes] | _Handed
        if handed is not None and v0:
            self._proc = _Handed(handed)
        else:
            if handed is not None:  # v2 for this remote: the hook's listing does not do
                os.close(handed)
            self._proc = subprocess.Popen(
                ["git", *v0, "ls-remote", remote, *([] if v0 else patterns)],
                cwd=repo.cwd,
                env={**os.environ, **env} if env else None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        self._said: tuple[bytes, bytes] | None = None

    def wait(self, timeout: float) -> bool:
        """Whether git ls-remote has answered, waiting up to `timeout` seconds for it."""
        try:
            self._output(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _output(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        if self._said is None:  # read while waiting: a long listing fills the pipe
            self._said = self._proc.communicate(timeout=timeout)
        return self._said

    def refs(self) -> dict[str, str]:
        """refname -> object id of the remote's refs matching the patterns (git ls-remote
        globs); RemoteUnreachable when the remote could not be asked."""
        out, err = self._output()
        if self._proc.returncode:
            detail = gist(err.decode("utf-8", "replace"), self._proc.returncode)
            shown = anonymized(self.remote)
            raise RemoteUnreachable(
                f"{shown} could not be reached (git ls-remote {shown} failed: {detail})"
            )
        refs = {}
        lines = out.decode("utf-8", "surrogateescape").splitlines()
        for line in lines:
            oid, _, name = line.partition("\t")
            # as git ls-remote in v2 matches: the whole name (v2 asks by prefix), `*` crossing `/`
            if name and (
                self._patterns is None or any(fnmatchcase(name, p) for p in self._patterns)
            ):
                refs[name] = oid
        # what v0 sent beyond what was asked for: v2 would not have sent it
        if self._patterns is not None and len(lines) - len(refs) > MANY_REFS:
            mark = _many_refs_mark(self._repo, self.remote)
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.write_text(f"{len(lines) - len(refs)}\n")
        return refs

    def close(self) -> None:
        """Stop it, if nobody read it."""
        if self._proc.returncode is None:
            self._proc.kill()
            self._proc.communicate()


def push_urls(repo: Repo, remote: str) -> list[str]:
    """Where a push to `remote` goes, in git's order: each of its push URLs (a mirror has
    several, and git runs the pre-push hook once for each), or `remote` when it is a URL."""
    return _urls(repo, remote, "--push")


def pushed_to(repo: Repo, remote: str) -> list[str]:
    """What to list to see what a push to `remote` changed: the remote itself where its
    pushes go where it fetches from, else each of its push URLs."""
    urls = push_urls(repo, remote)
    return [remote] if urls == _urls(repo, remote)[:1] else urls


def _urls(repo: Repo, remote: str, *push: str) -> list[str]:
    said = repo.git("remote", "get-url", *push, "--all", remote, check=False)
    return said.splitlines() or [remote]


def ls_remote(repo: Repo, remote: str, *patterns: str) -> dict[str, str]:
    """refname -> object id of the remote's refs matching `patterns` (git ls-remote globs)."""
    return Listing(repo, remote, patterns).refs()


def push_listing(repo: Repo, remote: str, handed: int | None = None) -> Listing:
    """What a push to `remote` lists (its version refs and _PUSH_PATTERNS), started now;
    `handed`: the descriptor of the listing the pre-push hook's shell began."""
    return Listing(repo, remote, (f"{VERSION_PREFIX}*", *_PUSH_PATTERNS), handed=handed)


def fetch_listing(repo: Repo, remote: str, env: Mapping[str, str] | None = None) -> Listing:
    """What a fetch from `remote` lists (its version refs and _FETCH_PATTERNS), started now;
    `env` as Listing takes it."""
    return Listing(repo, remote, (f"{VERSION_PREFIX}*", *_FETCH_PATTERNS), env)


def transfer(repo: Repo, *args: str) -> None:
    """Run a `git fetch` or `git push` whose progress shows on a terminal (quiet otherwise).

    Raises GitError with git's last line of stderr (on a terminal the user saw it all).
    What the remote itself said (its `remote:` lines: a hook's reason for refusing)
    is printed either way: it is the most useful line the user can get.
    """
    Transfer(repo, *args).wait()


class Transfer:
    """transfer(), begun: wait() ends it. `config` goes before the command (`-c` pairs),
    `fds` are passed on to git (and its hooks), `env` is added to git's."""

    def __init__(
        self,
        repo: Repo,
        *args: str,
        config: Sequence[str] = (),
        fds: Sequence[int] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._visible = sys.stderr.isatty()
        self.command, *rest = args
        self._repo = repo
        fetch = self.command == "fetch"
        # a fetch's packs are kept from git gc --auto, as the packs git-mgit writes are
        self._packs = keep.packs(repo.objects_dir) if fetch else None
        verbosity = "--progress" if self._visible else "--quiet"
        self._proc = subprocess.Popen(
            ["git", *(KEEP_PACKS if fetch else ()), *config, self.command, verbosity]
            + ([NO_MAINTENANCE] if fetch else [])
            + rest,
            cwd=repo.cwd,
            stdout=subprocess.DEVNULL,
            stderr=None if self._visible else subprocess.PIPE,
            pass_fds=fds,
            env=None if env is None else {**os.environ, **env},
        )

    def stop(self) -> None:
        """End git now, wherever it is, and what it runs: https's remote helper may be at
        a credentials prompt, on the terminal (git restores a terminal it prompted on)."""
        for pid in [*_descendants(self._proc.pid), self._proc.pid]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        self._proc.wait()
        if self._proc.stderr is not None:  # not read to its end: a helper may hold it yet
            self._proc.stderr.close()

    def wait(self) -> None:
        """Raises GitError as transfer() does."""
        _, stderr = self._proc.communicate()
        if self._proc.returncode:
            detail = "" if self._visible else stderr.decode("utf-8", "replace").strip()
            said = [line for line in detail.splitlines() if line.startswith("remote:")]
            if said:
                sys.stderr.write("".join(f"{line}\n" for line in said))
            code = self._proc.returncode
            what = gist(detail, code) if detail else f"exit {code}, see above"
            raise GitError(f"git {self.command} failed: {what}", detail)
        if self._packs is not None:
            keep.mark_new(self._repo.objects_dir, self._packs)


def _descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, read from /proc at once (none where there
    is no /proc): taken before any is stopped, while their parents still hold them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def list_versions(repo: Repo, remote: str, *patterns: str) -> dict[str, str]:
    """The remote's version refs (and refs matching `patterns`), as ls_remote, remembered."""
    return remembered(repo, Listing(repo, remote, (f"{VERSION_PREFIX}*", *patterns)))


def remembered(repo: Repo, started: Listing) -> dict[str, str]:
    """What a listing of version refs (among others) found.

    What it lists of version refs is kept in .git/mgit/remotes/ (a note of what
    the remote held when last asked), for commands that do not go online.
    """
    listing = started.refs()
    remember(repo, started.remote, listing)
    return listing


def remember(repo: Repo, remote: str, listing: dict[str, str]) -> None:
    """Keep the version refs of `listing` as what `remote` holds (a push that knows what it
    changed there says so without asking again)."""
    record = "".join(
        f"{oid} {name}\n" for name, oid in listing.items() if name.startswith(VERSION_PREFIX)
    )
    folder = repo.mgit_dir / "remotes"
    folder.mkdir(exist_ok=True)
    tmp = folder / f".{remote_file_name(remote)}.{os.getpid()}"
    tmp.write_text(record)
    os.replace(tmp, folder / remote_file_name(remote))


def recorded_versions(repo: Repo, remote: str) -> dict[str, str] | None:
    """The version refs `remote` listed when last asked (None if never)."""
    try:
        text = (repo.mgit_dir / "remotes" / remote_file_name(remote)).read_text()
    except FileNotFoundError:
        return None
    return {name: oid for oid, _, name in (line.partition(" ") for line in text.splitlines())}
