"""Checks before a commit: the pre-commit hook and `git mgit check` (and the pre-commit framework).

- tracked: a `*.safetensors` file that no filter tracks would go into git as
  a plain blob; the fix is a `git mgit track` command.
- header:  the file must be a valid safetensors file (else it is stored
  opaque, and nothing tensor-wise works on it).
- finite:  floating tensors must hold no NaN or infinity, unless mgit.toml
  allows it for the path (`[checks] allow-nonfinite = ["debug/*"]`).
- objects: every object a staged manifest needs must be here and decode to
  its hash.

Staged files are read from the index: their manifests, and only the chunks
that are new relative to HEAD are decoded (unchanged ones were checked when
they were committed). Files named on the command line (what the pre-commit
framework passes: the working tree, with unstaged changes stashed) are read
directly, except `objects`, which is about the index.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError, NotSafetensors
from git_mgit.gitcmd import Repo
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.tracked import filters
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors.dtypes import DTYPES
from git_mgit.tensors.safetensors_format import header_length, parse_header, why_not

CHECKS = ("tracked", "header", "finite", "objects")
SUFFIX = ".safetensors"
_NO_FILTER = ("unspecified", "unset")


def _untracked(path: str) -> str:
    return (
        f"no filter tracks this model file; run `git mgit track '*{SUFFIX}'` "
        f"(or `git mgit track '{path}'`), then `git add {path}`"
    )


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")


def _nonfinite_allowed(repo: Repo, wanted: set[str]) -> list[str]:
    """mgit.toml's `allow-nonfinite` patterns (read only when the finite check runs)."""
    if "finite" not in wanted:
        return []
    from git_mgit import repoconfig

    return repoconfig.load(repo.worktree).allow_nonfinite


def _finite_checked(path: str, wanted: set[str], allowed: list[str]) -> bool:
    return "finite" in wanted and not any(fnmatch.fnmatchcase(path, p) for p in allowed)


def _nonfinite(dtype: str, pieces: Iterable[bytes | memoryview]) -> tuple[int, int]:
    from git_mgit.tensors.stats import nonfinite  # numpy: only when a tensor is checked

    return nonfinite(dtype, pieces)


def _is_float(dtype: str | None) -> bool:
    info = DTYPES.get(dtype or "")
    return info is not None and info.kind in ("float", "complex")


def _say_nonfinite(report: Report, path: str, name: str | None, nan: int, inf: int) -> None:
    if nan or inf:
        report.add(
            path,
            f"tensor {name!r} holds {nan} NaN and {inf} infinite value(s); fix the model, or "
            f'allow it with `[checks] allow-nonfinite = ["{path}"]` in mgit.toml',
        )


# -- staged files: manifests in the index ---------------------------------------------------


def staged_paths(repo: Repo) -> list[str]:
    out = repo.git_bytes("diff", "--cached", "--name-only", "-z", "--diff-filter=ACMR")
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def _manifest(store: ChunkStore, rev: str) -> mf.Manifest | None:
    data = store.reader.read(rev)
    if data is None or not mf.looks_like_manifest(data):
        return None
    try:
        return mf.parse(bytes(data))
    except mf.ManifestError:
        return None


def check_staged(repo: Repo, wanted: Iterable[str] = CHECKS) -> Report:
    """Run the checks on what the next commit would hold."""
    wanted = set(wanted)
    report = Report()
    paths = staged_paths(repo)
    attrs = filters(repo, paths)
    allowed = _nonfinite_allowed(repo, wanted)
    store = ChunkStore(repo)
    try:
        for path in paths:
            if "tracked" in wanted and path.endswith(SUFFIX) and attrs[path] in _NO_FILTER:
                report.add(path, _untracked(path))
            if attrs[path] != "mgit":
                continue
            m = _manifest(store, ":" + path)
            if m is None:
                continue  # staged before tracking began, or a merge in progress: git's own business
            prior = _manifest(store, "HEAD:" + path)
            _check_manifest(store, path, m, prior, wanted, allowed, report)
    finally:
        store.close()
    return report


def _check_manifest(
    store: ChunkStore,
    path: str,
    m: mf.Manifest,
    prior: mf.Manifest | None,
    wanted: set[str],
    allowed: list[str],
    report: Report,
) -> None:
    if "header" in wanted and m.kind == "opaque" and path.endswith(SUFFIX):
        report.add(
            path,
            f"not a valid safetensors file ({_opaque_reason(store, m)}); it is stored as opaque bytes",
        )
    old = {c.content_hash for c in prior.chunks()} if prior else set()
    new = [c for c in m.chunks() if c.content_hash not in old]
    if not new or not wanted & {"finite", "objects"}:
        return
    missing = store.missing([c.content_hash for c in new])
    if missing:
        report.add(
            path,
            f"{len(missing)} staged tensor object(s) are missing; re-add the file with `git add {path}`",
        )
        return
    finite = _finite_checked(path, wanted, allowed)
    progress = Progress(f"git-mgit: checking {path}", sum(c.length for c in new))
    try:
        for seg in m.segments:
            chunks = [c for c in new if c.segment is seg]
            if not chunks:
                continue
            pieces = _decoded(store, chunks, progress)
            if finite and seg.kind == "tensor" and _is_float(seg.dtype):
                assert seg.dtype is not None
                _say_nonfinite(report, path, seg.name, *_nonfinite(seg.dtype, pieces))
            else:
                for _ in pieces:  # decoding verifies every object's BLAKE3
                    pass
    except MgitError as exc:
        report.add(
            path, f"a staged object does not decode ({exc}); re-add the file with `git add {path}`"
        )
    finally:
        progress.finish()


def _decoded(store: ChunkStore, chunks: list[mf.Chunk], progress: Progress) -> Iterator[bytearray]:
    for c in chunks:
        raw = store.get_raw(c.content_hash)
        progress.update(len(raw))
        yield raw


def _opaque_reason(store: ChunkStore, m: mf.Manifest) -> str:
    first = next(iter(m.chunks()), None)
    if first is None:
        return "the file is empty"
    head = bytes(store.get_raw(first.content_hash))
    try:
        parse_header(head[: 8 + header_length(head[:8])] if len(head) >= 8 else head)
    except NotSafetensors as exc:
        return why_not(head, exc)
    return "its data does not match its header"


# -- files named on the command line (the pre-commit framework) ------------------------------


def check_files(repo: Repo, files: list[str], wanted: Iterable[str] = CHECKS) -> Report:
    wanted = set(wanted)
    report = Report()
    root = repo.worktree or Path.cwd()
    rel = {f: Path(f).resolve().relative_to(root.resolve()).as_posix() for f in files}
    attrs = filters(repo, list(rel.values()))
    allowed = _nonfinite_allowed(repo, wanted)
    store = ChunkStore(repo) if "objects" in wanted else None
    try:
        for f, path in rel.items():
            if not path.endswith(SUFFIX):
                continue
            filt = attrs[path]
            if "tracked" in wanted and filt in _NO_FILTER:
                report.add(path, _untracked(path))
            if wanted & {"header", "finite"}:
                _check_file(Path(f), path, wanted, allowed, report)
            if store is not None and filt == "mgit":
                m, prior = _manifest(store, ":" + path), _manifest(store, "HEAD:" + path)
                if m is not None:
                    _check_manifest(store, path, m, prior, {"objects"}, allowed, report)
    finally:
        if store is not None:
            store.close()
    return report


def _check_file(
    file: Path, path: str, wanted: set[str], allowed: list[str], report: Report
) -> None:
    with file.open("rb") as f:
        prefix = f.read(8)
        try:
            header = parse_header(prefix + f.read(header_length(prefix)))
            if header.file_size != file.stat().st_size:
                raise NotSafetensors(
                    f"the header describes {header.file_size} bytes, the file has {file.stat().st_size}"
                )
        except NotSafetensors as exc:
            if "header" in wanted:
                report.add(path, f"not a valid safetensors file ({exc})")
            return
        if not _finite_checked(path, wanted, allowed):
            return
        from git_mgit.tensors.stats import file_pieces

        for t in header.tensors:
            if _is_float(t.dtype):
                pieces = file_pieces(f, t.begin, t.end - t.begin, t.dtype)
                _say_nonfinite(report, path, t.name, *_nonfinite(t.dtype, pieces))
