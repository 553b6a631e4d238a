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
The copy runs beside the checkout, which reads the objects from the
remote's packs meanwhile.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, env_for
from git_mgit.store.packreader import PackReader
from git_mgit.store.packwriter import PackWriter, built
from git_mgit.store.reader import ObjectReader


def remote_url(repo: Repo, remote: str) -> str:
    """The URL git uses for `remote`: a remote's name resolved, a path or URL as it is
    (git knows no remote by that name)."""
    return repo.git("remote", "get-url", remote, check=False) or remote


def local_git_dir(repo: Repo, remote: str) -> Path | None:
    """The git directory of `remote` (a name, path or URL) if it is a directory here."""
    return git_dir_at(repo, remote_url(repo, remote))


def git_dir_at(repo: Repo, url: str) -> Path | None:
    """The git directory `url` (a URL or path) names, if it is a directory here."""
    if url.startswith("file://"):
        path = Path(unquote(urlsplit(url).path))
    elif "://" in url or (":" in url.split("/", 1)[0] and not url.startswith("/")):
        return None  # another transport, or scp-like ssh syntax (host:path)
    else:
        path = Path(url)
        if not path.is_absolute():
            path = (repo.cwd / path).resolve()
    for git_dir in (path, path / ".git"):
        if (git_dir / "objects").is_dir() and (git_dir / "HEAD").is_file():
            if not (git_dir / "objects" / "info" / "alternates").exists():
                return git_dir
            return None  # objects elsewhere too: leave it to git fetch
    return None


class LocalCopy:
    """Copy what refname -> commit reach and this clone lacks from `source`, then set the refs.

    `entries` lists every tensor object the refs file as (content hash, oid, size),
    so a chunk store can read them from the source's packs while the copy runs
    (ChunkStore.borrow); start() runs it on a thread, wait() joins it and
    raises what it raised.
    """

    def __init__(self, repo: Repo, source: Path, refs: Mapping[str, str]) -> None:
        self.repo, self.source, self.refs = repo, source, dict(refs)
        listing = _git(source, "rev-list", "--objects", "--stdin", input=_lines(refs.values()))
        paths = dict(
            line.split(" ", 1) if " " in line else (line, "") for line in listing.splitlines()
        )
        info = _git(
            source,
            "cat-file",
            "--batch-check=%(objectname) %(objecttype) %(objectsize)",
            input=_lines(paths),
        )
        self.kinds: dict[str, str] = {}
        self.entries: list[tuple[bytes, str, int]] = []
        for line in info.splitlines():
            oid, kind, size = line.split()
            self.kinds[oid] = kind
            name = paths[oid].rsplit("/", 1)[-1]
            if kind == "blob" and paths[oid].count("/") == 2 and len(name) == 64:
                self.entries.append((bytes.fromhex(name), oid, int(size)))
        have = repo.existing(self.kinds)
        self.missing = [oid for oid in self.kinds if oid not in have]
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        if self.missing:
            self._copy()
        lines = "".join(f"update {name} {commit}\n" for name, commit in self.refs.items())
        self.repo.git("update-ref", "--stdin", input=lines.encode())

    def start(self) -> None:
        def work() -> None:
            try:
                self.run()
            except BaseException as exc:  # raised again by wait()
                self._error = exc

        self._thread = threading.Thread(target=work, name="mgit-local-copy")
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise MgitError(f"copying objects from {self.source} failed: {error}")

    def _copy(self) -> None:
        packs = PackReader(self.source / "objects")
        reader = ObjectReader(self.source, env_for(self.source))
        try:
            with PackWriter(self.repo.objects_dir, expected=len(self.missing)) as pack:
                for oid, entry in built(self._objects(packs, reader)):
                    if pack.add_entry(entry).hex() != oid:
                        raise ValueError(f"{self.source}: object {oid} does not hash to its name")
                pack.finish()
        finally:
            packs.close()
            reader.close()

    def _objects(
        self, packs: PackReader, reader: ObjectReader
    ) -> Iterator[tuple[str, str, bytearray]]:
        """(oid, kind, bytes) of each missing object, read in order on this thread."""
        for oid in self.missing:
            kind = self.kinds[oid]
            data = packs.read(oid) if kind == "blob" else None
            if data is None:
                data = reader.read(oid)
            if data is None:
                raise FileNotFoundError(f"{self.source}: object {oid} is not readable")
            yield oid, kind, data


def _lines(items: Iterable[str]) -> str:
    return "".join(f"{i}\n" for i in items)


def _git(git_dir: Path, *args: str, input: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=git_dir,
        env=env_for(git_dir),
        input=input.encode(),
        capture_output=True,
        check=True,
    ).stdout.decode()
