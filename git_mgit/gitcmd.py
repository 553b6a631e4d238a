"""Thin, typed wrappers around the real `git` binary.

git-mgit drives plumbing commands rather than re-implementing them, so that
config precedence, hooksPath, worktrees and alternates behave exactly as git
defines them.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from git_mgit.errors import MgitError


class GitError(MgitError):
    """A git command failed; the message carries git's own stderr (its last line)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail  # everything git wrote to stderr, where it was captured


def git(
    *args: str,
    cwd: str | os.PathLike[str] | None = None,
    input: bytes | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> str:
    """Run git and return stdout as text (stripped of one trailing newline)."""
    out = git_bytes(*args, cwd=cwd, input=input, check=check, env=env)
    text = out.decode("utf-8", "surrogateescape")
    return text[:-1] if text.endswith("\n") else text


def git_bytes(
    *args: str,
    cwd: str | os.PathLike[str] | None = None,
    input: bytes | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> bytes:
    """Run git and return raw stdout; raise GitError with git's message on failure."""
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        env={**os.environ, **env} if env else None,
    )
    if check and proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"git {' '.join(args[:2])} failed: {gist(stderr, proc.returncode)}", stderr)
    return proc.stdout


_DOT_NOT_IN_REFS = re.compile(r"^\.|(?<=\.)\.|\.(?=lock$)")


def anonymized(remote: str) -> str:
    """A remote's name or URL as messages and file names show it: a URL without the user and
    password it may carry (`https://user:token@host/repo`), as git shows it in its own."""
    scheme, sep, rest = remote.partition("://")
    if not sep:
        return remote
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


def remote_file_name(remote: str) -> str:
    """A remote name (or URL, without credentials) as one safe file name or ref component."""
    shown = anonymized(remote)
    name = "".join(c if c.isalnum() or c in "-_." else f"%{ord(c):02x}" for c in shown)
    # a ref component may not start with `.`, hold `..` or end in `.lock` (`../models.git`)
    return _DOT_NOT_IN_REFS.sub("%2e", name)


def gist(stderr: str, returncode: int) -> str:
    """The line of git's stderr that says what went wrong: its first fatal or error line."""
    lines = stderr.strip().splitlines()
    return next(
        (line for line in lines if line.startswith(("fatal:", "error:"))),
        lines[-1] if lines else f"exit {returncode}",
    )


def canonical(key: str) -> str:
    """A key as `git config --list` prints it: section and name lowercased, subsection kept."""
    section, dot, rest = key.partition(".")
    if not dot:
        return key.lower()
    sub, dot, name = rest.rpartition(".")
    return f"{section.lower()}.{sub}.{name.lower()}" if dot else f"{section.lower()}.{name.lower()}"


def parse_config_list(out: bytes) -> list[tuple[str, str]]:
    """`git config -z --list` output as (key, value) pairs, in order."""
    pairs = []
    for entry in out.split(b"\0"):
        if entry:
            key, _, value = entry.decode("utf-8", "surrogateescape").partition("\n")
            pairs.append((key, value))
    return pairs


class _ConfigSnapshot:
    """Everything `git config` says, read once: a push asked git for settings in seven
    processes. Forgotten when this process runs `git config` through the same Repo (a
    write, as a clone's setup makes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: tuple[list[tuple[str, str]], dict[str, str]] | None = None

    def read(self, repo: Repo) -> tuple[list[tuple[str, str]], dict[str, str]]:
        """(every pair in order, each key's last value)."""
        with self._lock:  # the store's opening thread reads it beside the push's
            if self._read is None:
                # as `git config --get` with check=False was read: unreadable is unset
                listed = git_bytes("config", "-z", "--list", cwd=repo.cwd, check=False)
                pairs = parse_config_list(listed)
                self._read = pairs, dict(pairs)
            return self._read

    def forget(self) -> None:
        with self._lock:
            self._read = None


_INFO = "%(objectname) %(objecttype) %(objectsize)"  # what a kept batch-check answers
_INFO_FIELDS = {atom: i for i, atom in enumerate(_INFO.split())}
# Names asked before their answers are read: no more than the smallest pipe holds (one
# page, where a user has used up the kernel's pipe pages), so that writing them never
# waits on a cat-file that waits for its answers to be read.
_ROUND_BYTES = 4096
Answer = tuple[list[str], bytes | None] | None  # (header fields, content), None: no object


class _CatFile:
    """One long-lived `git cat-file --batch` or `--batch-check`, asked again and again: a
    process start costs 2-3 ms, an answer a tenth of one, and a push asked nine times.

    Names go in rounds of at most _ROUND_BYTES, each round's answers read before the next
    is asked. A process inherited through fork() is left to its parent: the child starts
    its own."""

    def __init__(self, cwd: Path, contents: bool) -> None:
        self._args = ["git", "cat-file", "--batch" if contents else f"--batch-check={_INFO}"]
        self._cwd, self._contents = cwd, contents
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = 0

    def ask(self, names: list[str]) -> list[Answer]:
        """Per name, in order: its header's fields and (`--batch`) its content, or None
        where git has no such object (a name with a newline cannot be asked)."""
        asked = [_lines([n]) for n in names if "\n" not in n]
        got: list[Answer] = []
        with self._lock:
            start = 0
            while start < len(asked):
                end, size = start + 1, len(asked[start])  # one name, however long
                while end < len(asked) and size + len(asked[end]) <= _ROUND_BYTES:
                    size += len(asked[end])
                    end += 1
                got += self._round(b"".join(asked[start:end]), end - start)
                start = end
        answers = iter(got)
        return [None if "\n" in n else next(answers) for n in names]

    def _round(self, lines: bytes, count: int) -> list[Answer]:
        proc = self._process()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(lines)
            proc.stdin.flush()
            return [self._answer(proc.stdout) for _ in range(count)]
        except (OSError, ValueError, EOFError) as exc:
            raise GitError(f"git cat-file failed: {self._died()}") from exc

    def _answer(self, stdout) -> Answer:
        line = stdout.readline()
        if not line.endswith(b"\n"):
            raise EOFError
        if line.endswith((b" missing\n", b" ambiguous\n")):
            return None
        fields = line.decode("utf-8", "replace").split()
        if not self._contents:
            return fields, None
        size = int(fields[2])
        data = stdout.read(size + 1)
        if len(data) != size + 1:
            raise EOFError
        return fields, data[:size]

    def _process(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._pid != os.getpid() or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                self._args,
                cwd=self._cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            self._pid = os.getpid()
            weakref.finalize(self, _end, self._proc, self._pid)
        return self._proc

    def _died(self) -> str:
        """git's words where cat-file stopped answering; the next question starts another."""
        proc, self._proc = self._proc, None
        if proc is None or self._pid != os.getpid():
            return "cat-file did not answer"
        proc.kill()
        _, err = proc.communicate()
        return gist(err.decode("utf-8", "replace"), proc.returncode)


def _end(proc: subprocess.Popen[bytes], pid: int) -> None:
    """Close a cat-file's input, where this process started it: it exits, and is reaped."""
    if os.getpid() != pid:
        return
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait(timeout=5)


# `git remote` subcommands that change git config (listing remotes, or a URL, does not)
_REMOTE_WRITES = frozenset(
    (name,) for name in ("add", "rename", "remove", "rm", "set-url", "set-head", "set-branches")
)


@dataclass(frozen=True)
class Repo:
    """Paths of one git repository, as git itself resolves them."""

    worktree: Path | None
    git_dir: Path
    common_dir: Path
    _config: _ConfigSnapshot = field(
        default_factory=_ConfigSnapshot, compare=False, repr=False, init=False
    )

    @cached_property
    def objects_dir(self) -> Path:
        env = os.environ.get("GIT_OBJECT_DIRECTORY")
        return Path(env) if env else self.common_dir / "objects"

    @cached_property
    def mgit_dir(self) -> Path:
        """Local, rebuildable state (lookup cache, locks) under .git/mgit/."""
        path = self.common_dir / "mgit"
        path.mkdir(exist_ok=True)
        return path

    @property
    def cwd(self) -> Path:
        """Where git runs for this repository: its worktree, or its git dir when bare."""
        return self.worktree or self.git_dir

    def git(self, *args: str, **kwargs) -> str:
        self._before(args)
        return git(*args, cwd=self.cwd, **kwargs)

    def git_bytes(self, *args: str, **kwargs) -> bytes:
        self._before(args)
        return git_bytes(*args, cwd=self.cwd, **kwargs)

    def _before(self, args: tuple[str, ...]) -> None:
        """Forget the config read before a git command that most likely writes it."""
        if args[:1] == ("config",) or (args[:1] == ("remote",) and args[1:2] in _REMOTE_WRITES):
            self._config.forget()

    def config(self, key: str) -> str | None:
        """`git config --get key` (its last value; None where unset), from one snapshot of
        git's whole configuration per process."""
        return self._config.read(self)[1].get(canonical(key))

    def config_list(self) -> list[tuple[str, str]]:
        """Every (key, value) `git config -z --list` gives, in order (keys canonical)."""
        return self._config.read(self)[0]

    def existing(self, oids: Iterable[str]) -> set[str]:
        """Which of `oids` this repository has."""
        asked = [o for o in dict.fromkeys(oids) if o and o.strip("0")]
        return {fields[0] for fields in self.batch_check(asked, "%(objectname)")}

    def batch_check(self, oids: Iterable[str], format: str) -> list[list[str]]:
        """The fields `format` names (`%(objectname) %(objectsize)`) of each of `oids` this
        repository has, in order: asked of this Repo's `git cat-file --batch-check`."""
        names, fields = list(oids), format.split()
        if not names:
            return []
        if any(atom not in _INFO_FIELDS for atom in fields):
            # an atom the kept process does not print: a process of its own
            out = self.git_bytes("cat-file", f"--batch-check={format}", input=_lines(names))
            lines = out.decode("utf-8", "replace").splitlines()
            return [line.split() for line in lines if not line.endswith(" missing")]
        atoms = [_INFO_FIELDS[atom] for atom in fields]
        answers = self._info.ask(names)
        return [[a[0][i] for i in atoms] for a in answers if a is not None]

    def deletions(self, refs: Iterable[str]) -> list[str]:
        """`update-ref --stdin` lines deleting those of `refs` that exist here."""
        refs = list(refs)
        if not refs:  # for-each-ref with no pattern would list every ref
            return []
        have = set(self.git("for-each-ref", "--format=%(refname)", *refs).split())
        return [f"delete {name}\n" for name in refs if name in have]

    def cat_blobs(self, oids: list[str]) -> list[bytes | None]:
        """The contents of many small objects, in order (None for an object git does not
        have), from this Repo's `git cat-file --batch`.

        For objects read whole (notes, manifests); ObjectReader streams large ones.
        """
        return [None if a is None else a[1] for a in self._contents.ask(oids)]

    @cached_property
    def _info(self) -> _CatFile:
        return _CatFile(self.cwd, contents=False)

    @cached_property
    def _contents(self) -> _CatFile:
        return _CatFile(self.cwd, contents=True)


def _lines(names: Iterable[str]) -> bytes:
    return "".join(f"{n}\n" for n in names).encode("utf-8", "surrogateescape")


def find_repo(cwd: str | os.PathLike[str] | None = None) -> Repo:
    """Locate the repository containing `cwd` (default: the current directory)."""
    try:
        out = git(
            "rev-parse",
            "--path-format=absolute",
            "--git-dir",
            "--git-common-dir",
            "--show-toplevel",
            cwd=cwd,
        )
    except GitError:
        out = ""
    lines = out.splitlines()
    if len(lines) < 2:
        # Bare repository: --show-toplevel fails, ask again without it.
        try:
            lines = git(
                "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir", cwd=cwd
            ).splitlines()
        except GitError as exc:
            raise MgitError(
                f"{os.path.abspath(cwd or '.')}: not a git repository; run this inside one"
            ) from exc
    worktree = Path(lines[2]) if len(lines) > 2 and lines[2] else None
    return Repo(worktree=worktree, git_dir=Path(lines[0]), common_dir=Path(lines[1]))


def approxidate(repo: Repo, when: str) -> int:
    """Unix time of a git date (`2.weeks.ago`, `now`, an ISO date), as git reads it."""
    if when == "now":
        return int(time.time()) + 1
    out = repo.git("rev-parse", f"--since={when}")
    return int(out.split("=", 1)[1])


# For git run ahead of need (a listing, a credential fill begun early): it fails at once
# where it would prompt, and the need, when it comes, asks the usual way.
NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "GCM_INTERACTIVE": "never"}

# What locates a repository, an index or an object store: git sets them for a filter.
_REPO_VARS = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_PREFIX",
    }
)


def env_for(git_dir: Path) -> dict[str, str]:
    """git's environment for the repository at git_dir, whatever repository ours is."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_VARS}
    env["GIT_DIR"] = str(git_dir)
    return env
