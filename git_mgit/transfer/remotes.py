"""Which remote to talk to, and what it lists.

One `git ls-remote` (protocol v2 sends just the prefixes asked for) tells a
fetch which version refs exist and a push what the remote already holds.
"""

from __future__ import annotations

import os
import subprocess
import sys

from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo, gist
from git_mgit.store.lookup import VERSION_PREFIX

# Keep every fetched pack as it arrives: git unpacks small fetches into loose
# objects, recompressing tensor objects and hiding them from the pack reader.
KEEP_PACKS = ("-c", "fetch.unpackLimit=1")


class RemoteUnreachable(MgitError):
    """A remote could not be asked (offline, wrong URL, no permission)."""


def remotes(repo: Repo) -> list[str]:
    return [r for r in repo.git("remote").splitlines() if r]


def default_remote(repo: Repo) -> str | None:
    """The current branch's upstream remote, else origin, else the only remote."""
    branch = repo.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    if branch:
        up = repo.git("config", "--get", f"branch.{branch}.remote", check=False)
        if up and up != ".":
            return up
    names = remotes(repo)
    if "origin" in names:
        return "origin"
    return names[0] if len(names) == 1 else None


def candidates(repo: Repo) -> list[str]:
    """Remotes to try in order: the default one first, then the others."""
    first = default_remote(repo)
    return ([first] if first else []) + [r for r in remotes(repo) if r != first]


def ls_remote(repo: Repo, remote: str, *patterns: str) -> dict[str, str]:
    """refname -> object id of the remote's refs matching `patterns` (git ls-remote globs)."""
    try:
        out = repo.git("ls-remote", remote, *patterns)
    except GitError as exc:
        raise RemoteUnreachable(f"{remote} could not be reached ({exc})") from exc
    refs = {}
    for line in out.splitlines():
        oid, _, name = line.partition("\t")
        if name:
            refs[name] = oid
    return refs


def transfer(repo: Repo, *args: str) -> None:
    """Run a `git fetch` or `git push` whose progress shows on a terminal (quiet otherwise).

    Raises GitError with git's last line of stderr (on a terminal the user saw it all).
    What the remote itself said (its `remote:` lines: a hook's reason for refusing)
    is printed either way: it is the most useful line the user can get.
    """
    visible = sys.stderr.isatty()
    command, *rest = args
    keep = KEEP_PACKS if command == "fetch" else ()
    proc = subprocess.run(
        ["git", *keep, command, "--progress" if visible else "--quiet", *rest],
        cwd=repo.worktree or repo.git_dir,
        stdout=subprocess.DEVNULL,
        stderr=None if visible else subprocess.PIPE,
        check=False,
    )
    if proc.returncode:
        detail = "" if visible else proc.stderr.decode("utf-8", "replace").strip()
        said = [line for line in detail.splitlines() if line.startswith("remote:")]
        if said:
            sys.stderr.write("".join(f"{line}\n" for line in said))
        what = gist(detail, proc.returncode) if detail else f"exit {proc.returncode}, see above"
        raise GitError(f"git {command} failed: {what}", detail)


def list_versions(repo: Repo, remote: str, *patterns: str) -> dict[str, str]:
    """The remote's version refs (and refs matching `patterns`), as ls_remote.

    What it lists of version refs is kept in .git/mgit/remotes/ (a note of what
    the remote held when last asked), for commands that do not go online.
    """
    listing = ls_remote(repo, remote, f"{VERSION_PREFIX}*", *patterns)
    remember(repo, remote, listing)
    return listing


def remember(repo: Repo, remote: str, listing: dict[str, str]) -> None:
    """Keep the version refs of `listing` as what `remote` holds (a push that knows what it
    changed there says so without asking again)."""
    record = "".join(
        f"{oid} {name}\n" for name, oid in listing.items() if name.startswith(VERSION_PREFIX)
    )
    folder = repo.mgit_dir / "remotes"
    folder.mkdir(exist_ok=True)
    tmp = folder / f".{file_name(remote)}.{os.getpid()}"
    tmp.write_text(record)
    os.replace(tmp, folder / file_name(remote))


def recorded_versions(repo: Repo, remote: str) -> dict[str, str] | None:
    """The version refs `remote` listed when last asked (None if never)."""
    try:
        text = (repo.mgit_dir / "remotes" / file_name(remote)).read_text()
    except FileNotFoundError:
        return None
    return {name: oid for oid, _, name in (line.partition(" ") for line in text.splitlines())}


def file_name(remote: str) -> str:
    """A remote name (or URL) as one safe file name."""
    return "".join(c if c.isalnum() or c in "-_." else f"%{ord(c):02x}" for c in remote)
