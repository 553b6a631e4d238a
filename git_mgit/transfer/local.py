"""Remotes on this machine (a path, or a file:// URL): refs copied straight from their files.

`git fetch` sends objects through upload-pack and index-pack, and index-pack
hashes every byte twice with git's collision-detecting SHA-1 (about
0.25 GB/s here): half of a fresh clone's time. For a remote that is a
directory here, git's own clone of a path and git-lfs's file:// transfer
read the remote's files directly; so does this: the objects the refs reach
and this clone lacks are read from the remote's packs (any byte range of a
stored blob, or through `git cat-file` for anything else) and written into
one new pack here by our pack writer, whose object ids are computed with
hashlib's SHA-1 (several times faster, the same ids). Then the refs are set.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from git_mgit.gitcmd import Repo
from git_mgit.store.packreader import PackReader
from git_mgit.store.packwriter import PackWriter
from git_mgit.store.reader import ObjectReader

# What locates a repository, an index or an object store: set by git for a filter.
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


def local_git_dir(repo: Repo, remote: str) -> Path | None:
    """The git directory of `remote` (a name, path or URL) if it is a directory here."""
    url = remote
    if remote in repo.git("remote").split():
        url = repo.git("remote", "get-url", remote)
    if url.startswith("file://"):
        path = Path(unquote(urlsplit(url).path))
    elif "://" in url or (":" in url.split("/", 1)[0] and not url.startswith("/")):
        return None  # another transport, or scp-like ssh syntax (host:path)
    else:
        path = Path(url)
        if not path.is_absolute():
            path = (repo.worktree or repo.git_dir) / path
    for git_dir in (path, path / ".git"):
        if (git_dir / "objects").is_dir() and (git_dir / "HEAD").is_file():
            if not (git_dir / "objects" / "info" / "alternates").exists():
                return git_dir
            return None  # objects elsewhere too: leave it to git fetch
    return None


def copy_refs(repo: Repo, source: Path, refs: Mapping[str, str]) -> None:
    """Set refname -> commit here, copying from `source` the objects they reach that are missing."""
    listing = _git(
        source, "rev-list", "--objects", "--stdin", input="".join(f"{c}\n" for c in refs.values())
    )
    oids = [line.split(" ", 1)[0] for line in listing.splitlines() if line]
    have = _git(
        repo.git_dir,
        "cat-file",
        "--batch-check=%(objectname) %(objecttype)",
        input="".join(f"{o}\n" for o in oids),
    )
    missing = [line.split()[0] for line in have.splitlines() if line.endswith(" missing")]
    if missing:
        _copy(repo, source, missing)
    lines = "".join(f"update {name} {commit}\n" for name, commit in refs.items())
    repo.git("update-ref", "--stdin", input=lines.encode())


def _copy(repo: Repo, source: Path, oids: list[str]) -> None:
    kinds = dict(
        line.split()
        for line in _git(
            source,
            "cat-file",
            "--batch-check=%(objectname) %(objecttype)",
            input="".join(f"{o}\n" for o in oids),
        ).splitlines()
    )
    packs = PackReader(source / "objects")
    reader = ObjectReader(source, _env(source))
    pack = PackWriter(repo.objects_dir)
    try:
        for oid in oids:
            kind = kinds.get(oid)
            data = packs.read(oid) if kind == "blob" else None
            if data is None:
                data = reader.read(oid)
            if data is None or kind is None:
                raise FileNotFoundError(f"{source}: object {oid} is not readable")
            if pack.add(kind, [data]).hex() != oid:
                raise ValueError(f"{source}: object {oid} does not hash to its name")
        pack.finish()
    except BaseException:
        pack.abort()
        raise
    finally:
        packs.close()
        reader.close()


def _env(git_dir: Path) -> dict[str, str]:
    """git's environment for the repository at git_dir: a filter runs with ours in GIT_DIR & co."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_VARS}
    env["GIT_DIR"] = str(git_dir)
    return env


def _git(git_dir: Path, *args: str, input: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=git_dir,
        env=_env(git_dir),
        input=input.encode(),
        capture_output=True,
        check=True,
    ).stdout.decode()
