"""Rewrite history between plain blobs or git-lfs pointers and git-mgit manifests (`git mgit migrate`).

import: every version of a matching path that history stores as a plain
blob, or as a git-lfs pointer (its content read from .git/lfs/objects), is
stored the git-mgit way: cleaned, in history order, each version with the
one before it on the same path as its delta base. `.gitattributes` files get
`PATTERN filter=mgit diff=mgit merge=mgit -text` in place of git-lfs's
attributes, and a commit that holds matching files but no root
.gitattributes gets one.

export: the reverse, to plain blobs or to git-lfs objects and pointers.

Mechanics: `git fast-export --no-data` names every blob by its id, so the
rewrite reads only what it converts; the converted stream goes to
`git fast-import --force`, which writes the new commits and moves the refs.
Commit messages, authors, dates, tags and every other file are kept. Each
distinct blob is converted once. With dry_run (`migrate info`) the objects
are written (git mgit gc reclaims them) but no ref moves.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from git_mgit import config
from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.clean import clean
from git_mgit.modelfile.smudge import smudge
from git_mgit.setup import GIT_LFS_ATTRS, TRACK_ATTRS, attribute_line, kept_lfs_line
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.safetensors_format import GIT_LFS_SPEC

MGIT_ATTRS = " ".join(TRACK_ATTRS)
LFS_ATTRS = " ".join(GIT_LFS_ATTRS)
_OWN_ATTRS = ("filter=", "diff=", "merge=")
_SHA1 = re.compile(rb"[0-9a-f]{40}")
_LFS_POINTER = re.compile(rb"oid sha256:([0-9a-f]{64})\nsize (\d+)\n")

IMPORT, TO_PLAIN, TO_LFS = "import", "plain", "lfs"


class MigrateError(MgitError):
    """History cannot be rewritten as asked."""


@dataclass
class Summary:
    mode: str
    refs: list[str] = field(default_factory=list)
    commits: int = 0
    versions: int = 0  # distinct file versions converted
    raw_bytes: int = 0  # their size as files
    before_bytes: int = 0  # what their old form stores
    after_bytes: int = 0  # what their new form stores


def matches(path: str, patterns: list[str]) -> bool:
    """gitattributes-style: a pattern without a slash matches the file name at any depth."""
    name = path.rsplit("/", 1)[-1]
    return any(
        fnmatch.fnmatchcase(path, p.lstrip("/"))
        if "/" in p.strip("/")
        else fnmatch.fnmatchcase(name, p)
        for p in patterns
    )


def _unquote(token: bytes) -> str:
    """A path as fast-export writes it: C-quoted when it holds special characters."""
    if not token.startswith(b'"'):
        return token.decode("utf-8", "surrogateescape")
    body, out, i = token[1:-1], bytearray(), 0
    escapes = {ord("n"): 10, ord("t"): 9, ord('"'): 34, ord("\\"): 92, ord("a"): 7, ord("b"): 8,
               ord("f"): 12, ord("r"): 13, ord("v"): 11}  # fmt: skip
    while i < len(body):
        c = body[i]
        if c != 92:
            out.append(c)
            i += 1
        elif body[i + 1 : i + 2].isdigit():
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(escapes.get(body[i + 1], body[i + 1]))
            i += 2
    return out.decode("utf-8", "surrogateescape")


def rewrite_attributes(text: str, patterns: list[str], mode: str) -> str:
    """A .gitattributes with the patterns' filter attributes for the target form."""
    want = {IMPORT: MGIT_ATTRS, TO_LFS: LFS_ATTRS, TO_PLAIN: ""}[mode]
    out, seen = [], set()
    for line in text.splitlines():
        fields = line.split()
        kept = kept_lfs_line(line)
        if kept is not None and attribute_line(kept)[0] in patterns:
            continue  # `git mgit track`'s note of git-lfs's line: the rewrite decides the pattern
        if fields and not fields[0].startswith("#") and fields[0] in patterns:
            rest = [
                a for a in fields[1:] if not a.startswith(_OWN_ATTRS) and a not in ("-text", "text")
            ]
            kept = " ".join([want, *rest]).strip()
            if kept:
                out.append(f"{fields[0]} {kept}")
            seen.add(fields[0])
        else:
            out.append(line)
    if want:
        out += [f"{p} {want}" for p in patterns if p not in seen]
    return "".join(f"{line}\n" for line in out)


class _Converter:
    """Converts blobs (each once) and .gitattributes files, writing the new blobs."""

    def __init__(self, repo: Repo, patterns: list[str], mode: str, progress: Progress) -> None:
        self.repo, self.patterns, self.mode, self.progress = repo, patterns, mode, progress
        self.store = ChunkStore(repo)
        self.settings = config.load(repo)
        self.done: dict[str, str] = {}  # old blob id -> new blob id
        self.previous: dict[str, mf.Manifest] = {}  # path -> its last version (delta base)
        self.counted: set[bytes] = set()  # chunks already in after_bytes
        self.lfs_dir = repo.common_dir / "lfs" / "objects"
        self.summary = Summary(mode)

    def close(self) -> None:
        self.store.close()

    def _write_blob(self, data: bytes) -> str:
        return self.repo.git("hash-object", "-w", "--stdin", "--no-filters", input=data)

    def blob(self, oid: str, path: str) -> str:
        if oid not in self.done:
            self.done[oid] = self._convert(oid, path)
        return self.done[oid]

    def attributes(self, oid: str | None) -> str:
        key = f"attributes:{oid}"
        if key not in self.done:
            text = "" if oid is None else self.repo.git_bytes("cat-file", "blob", oid).decode()
            self.done[key] = self._write_blob(
                rewrite_attributes(text, self.patterns, self.mode).encode()
            )
        return self.done[key]

    def _convert(self, oid: str, path: str) -> str:
        info = self.repo.git(
            "cat-file", "--batch-check=%(objectsize) %(objectsize:disk)", input=oid.encode()
        )
        size, disk = (int(x) for x in info.split())
        with subprocess.Popen(
            ["git", "cat-file", "blob", oid], cwd=self.repo.cwd,
            stdout=subprocess.PIPE,
        ) as proc:  # fmt: skip
            assert proc.stdout is not None
            stream = io.BufferedReader(proc.stdout, 1 << 20)  # type: ignore[arg-type]
            head = stream.peek(len(mf.FIRST_LINE))[: len(mf.FIRST_LINE)]
            if self.mode == IMPORT:
                new = self._import(oid, path, stream, head, size, disk)
            else:
                new = self._export(oid, path, stream, head)
            stream.read()  # let git finish
        return new

    def _import(
        self, oid: str, path: str, stream: BinaryIO, head: bytes, size: int, disk: int
    ) -> str:
        if mf.looks_like_manifest(head):
            return oid  # already git-mgit
        if size < 1024 and stream.peek(len(GIT_LFS_SPEC))[: len(GIT_LFS_SPEC)] == GIT_LFS_SPEC:
            pointer = _LFS_POINTER.search(stream.read())
            if pointer is None:
                raise MigrateError(
                    f"{path}: blob {oid[:10]} looks like a git-lfs pointer but is malformed"
                )
            sha, size = pointer.group(1).decode(), int(pointer.group(2))
            local = self.lfs_dir / sha[:2] / sha[2:4] / sha
            if not local.is_file():
                raise MigrateError(
                    f"{path}: git-lfs object {sha[:12]} is not in .git/lfs/objects; "
                    "run `git lfs fetch --all` first"
                )
            with local.open("rb") as f:
                text = clean(
                    f, path, self.store, self.settings, self.previous.get(path), from_index=False
                )
            disk = size
        else:
            text = clean(
                stream, path, self.store, self.settings, self.previous.get(path), from_index=False
            )
        m = mf.parse(text)
        self.previous[path] = m
        self._count(size, disk, m)
        return self._write_blob(text)

    def _count(self, raw: int, before: int, m: mf.Manifest) -> None:
        s = self.summary
        s.versions += 1
        s.raw_bytes += raw
        s.before_bytes += before
        s.after_bytes += self._stored(m)
        self.progress.update(1)

    def _stored(self, m: mf.Manifest) -> int:
        """Bytes the objects of m's chunks take that no version counted before took."""
        total = 0
        for c in m.chunks():
            if c.content_hash not in self.counted:
                self.counted.add(c.content_hash)
                loc = self.store.locate(c.content_hash)
                total += loc[1] if loc else 0
        return total

    def _export(self, oid: str, path: str, stream: BinaryIO, head: bytes) -> str:
        if not mf.looks_like_manifest(head):
            return oid  # not git-mgit's: already plain (or someone else's pointer)
        m = mf.parse(stream.read())
        s = self.summary
        s.versions += 1
        s.raw_bytes += m.size
        s.before_bytes += self._stored(m)
        self.progress.update(1)
        if self.mode == TO_LFS:
            return self._to_lfs(m, path)
        with subprocess.Popen(
            ["git", "hash-object", "-w", "--stdin", "--no-filters"],
            cwd=self.repo.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        ) as proc:  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None
            smudge(m, path, self.store, proc.stdin.write)
            proc.stdin.close()
            new = proc.stdout.read().decode().strip()
        s.after_bytes += int(
            self.repo.git("cat-file", "--batch-check=%(objectsize:disk)", input=new.encode())
        )
        return new

    def _to_lfs(self, m: mf.Manifest, path: str) -> str:
        tmp_dir = self.lfs_dir.parent / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"mgit-export-{os.getpid()}"
        sha = hashlib.sha256()
        with tmp.open("wb") as f:

            def write(data: memoryview | bytes) -> None:
                sha.update(data)
                f.write(data)

            smudge(m, path, self.store, write)
        digest = sha.hexdigest()
        dest = self.lfs_dir / digest[:2] / digest[2:4] / digest
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            tmp.unlink()
        else:
            os.replace(tmp, dest)
            self.summary.after_bytes += m.size
        pointer = f"{GIT_LFS_SPEC.decode()}\noid sha256:{digest}\nsize {m.size}\n"
        return self._write_blob(pointer.encode())


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    while line := stream.readline():
        yield line


def _rewrite(src: BinaryIO, dst: BinaryIO | None, conv: _Converter) -> None:
    """Copy a fast-export stream, converting matching blobs and .gitattributes files."""
    root_attrs: dict[bytes, str | None] = {}  # commit mark -> its root .gitattributes blob

    def out(data: bytes) -> None:
        if dst is not None:
            dst.write(data)

    lines = _lines(src)
    for line in lines:
        if line.startswith(b"data "):
            n = int(line[5:])
            out(line + src.read(n))
            continue
        if not line.startswith(b"commit "):
            out(line)
            continue
        conv.summary.commits += 1
        head, changes, mark, parent = [line], [], None, None
        for line in lines:
            if line.startswith(b"data "):
                head.append(line + src.read(int(line[5:])))
            elif line.startswith(b"mark "):
                mark = line.split()[1]
                head.append(line)
            elif line.startswith(b"from "):
                parent = line.split()[1]
                head.append(line)
            elif line[:2] in (b"M ", b"D ", b"C ", b"R ") or line.startswith(b"deleteall"):
                changes.append(line)
            elif line == b"\n":
                break
            else:
                head.append(line)
        attrs = root_attrs.get(parent) if parent else None
        new_changes, has_models = [], False
        for change in changes:
            if change.startswith(b"M "):
                _, mode, ref, token = change.rstrip(b"\n").split(b" ", 3)
                path = _unquote(token)
                if _SHA1.fullmatch(ref) and path.rsplit("/", 1)[-1] == ".gitattributes":
                    ref = conv.attributes(ref.decode()).encode()
                    if path == ".gitattributes":
                        attrs = ref.decode()
                elif _SHA1.fullmatch(ref) and matches(path, conv.patterns):
                    ref = conv.blob(ref.decode(), path).encode()
                    has_models = True
                change = b" ".join((b"M", mode, ref, token)) + b"\n"
            elif (
                change.startswith(b"D ") and _unquote(change[2:].rstrip(b"\n")) == ".gitattributes"
            ) or change.startswith(b"deleteall"):
                attrs = None
            new_changes.append(change)
        if attrs is None and has_models and conv.mode in (IMPORT, TO_LFS):
            attrs = conv.attributes(None)
            new_changes.append(f"M 100644 {attrs} .gitattributes\n".encode())
        if mark is not None:
            root_attrs[mark] = attrs
        out(b"".join(head) + b"".join(new_changes) + b"\n")


def refs_to_rewrite(repo: Repo, everything: bool, refs: list[str]) -> list[str]:
    if refs:
        return refs
    if everything:
        listing = repo.git("for-each-ref", "--format=%(refname)", "refs/heads", "refs/tags")
        return listing.split()
    head = repo.git("symbolic-ref", "-q", "HEAD", check=False)
    if not head:
        raise MigrateError("HEAD is detached: name the refs to rewrite, or use --everything")
    return [head]


def run(
    repo: Repo, patterns: list[str], mode: str, refs: list[str], dry_run: bool = False
) -> Summary:
    """Rewrite `refs` (or, with dry_run, only measure); the worktree follows if HEAD moved."""
    if not dry_run and repo.git("status", "--porcelain", "--untracked-files=no"):
        raise MigrateError("the working tree has changes: commit or stash them first")
    progress = Progress(f"git-mgit: migrate {mode}: converting file versions")
    conv = _Converter(repo, patterns, mode, progress)
    cwd = repo.cwd
    export = subprocess.Popen(
        ["git", "fast-export", "--no-data", "--signed-tags=strip", "--reencode=no",
         "--tag-of-filtered-object=rewrite", *refs],
        cwd=cwd, stdout=subprocess.PIPE,
    )  # fmt: skip
    importer = None
    if not dry_run:
        # --done: a stream that stops early (an error here) moves no ref at all.
        importer = subprocess.Popen(
            ["git", "fast-import", "--force", "--quiet", "--done"], cwd=cwd, stdin=subprocess.PIPE
        )
    try:
        assert export.stdout is not None
        _rewrite(export.stdout, importer.stdin if importer else None, conv)  # type: ignore[arg-type]
        if importer is not None and importer.stdin is not None:
            importer.stdin.write(b"done\n")
    finally:
        progress.finish()
        conv.close()
        if importer is not None and importer.stdin is not None:
            importer.stdin.close()
        export.wait()
    if export.returncode:
        raise MigrateError(f"git fast-export failed (exit {export.returncode})")
    if importer is not None and importer.wait():
        raise MigrateError(f"git fast-import failed (exit {importer.returncode}); no ref moved")
    conv.summary.refs = refs
    head = repo.git("symbolic-ref", "-q", "HEAD", check=False)
    if not dry_run and repo.worktree is not None and head in refs:
        repo.git("reset", "-q", "--hard", "HEAD")  # the new form of the files, checked out
    return conv.summary
