"""Save a state dict as a tracked model file and commit it with its lineage, in one pass.

Training code calls `commit_model(state_dict, "models/ft.safetensors",
parents=["base"], function="train:finetune")`. The safetensors bytes are
produced once, from the tensors in memory: every byte goes to the file and
to the clean pipeline (hash, delta-encode, store) in the same pass, so the
file is never re-read, and the index entry is written with the file's stat
so `git status` is clean at once. The commit is made from a private index
(HEAD's tree plus this one file), so nothing else the user has staged is
swept into it; lineage records land on the new version's manifest.

commit_files() is the same pass for several files at once (a training
checkpoint: the model, or the shards of a model folder, beside the training
state), as one commit.

Tensors are numpy arrays or torch tensors; torch is used only if the caller
already imported it (the core never imports torch).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

import numpy as np
from dulwich.index import Index, IndexEntry

from git_mgit import config
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.lineage import contents, records
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.resolve import Version
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.clean import clean
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors import dtypes

_NUMPY = {np.dtype(code).name: name for name, code in dtypes.NUMPY.items()}  # "float32": "F32"
_TORCH = {f"torch.{attr}": name for name, attr in dtypes.TORCH.items()}  # "torch.float32": "F32"
_T = TypeVar("_T")


@dataclass(frozen=True)
class Saved:
    path: str
    version: str  # the manifest blob id: the model version
    commit: str


@dataclass(frozen=True)
class ModelFile:
    """One tracked safetensors file for commit_files()."""

    path: str  # relative to the working tree, '/'-separated
    tensors: Mapping[str, object]
    metadata: Mapping[str, str] | None = None
    base: mf.Manifest | None = None  # delta base while the path has no previous version


def _as_bytes(name: str, value: object) -> tuple[str, list[int], memoryview]:
    """(safetensors dtype, shape, contiguous little-endian bytes) without copying when possible."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        dtype = _TORCH.get(str(t.dtype))
        if dtype is None:
            raise MgitError(f"tensor {name!r}: dtype {t.dtype} has no safetensors equivalent")
        shape = list(t.shape)
        flat = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
        return dtype, shape, memoryview(flat.numpy())
    arr = np.asarray(value)
    dtype = _NUMPY.get(arr.dtype.name)
    if dtype is None:
        raise MgitError(f"tensor {name!r}: numpy dtype {arr.dtype} has no safetensors equivalent")
    arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return dtype, list(arr.shape), memoryview(arr.reshape(-1).view(np.uint8))


def serialize_header(
    tensors: Sequence[tuple[str, str, list[int], memoryview]], metadata: Mapping[str, str] | None
) -> bytes:
    """The 8-byte length and JSON header, padded with spaces to 8 bytes as safetensors writers do."""
    body: dict[str, object] = {}
    if metadata:
        body["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dtype, shape, data in tensors:
        body[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + data.nbytes],
        }
        offset += data.nbytes
    text = json.dumps(body, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


class _TeeStream:
    """A readable stream over header + tensors that writes every byte it serves to `sink`."""

    def __init__(self, pieces: Iterable[memoryview], sink) -> None:
        self._pieces = iter(pieces)
        self._current = memoryview(b"")
        self._sink = sink

    def readinto(self, view: memoryview) -> int:
        while not self._current:
            nxt = next(self._pieces, None)
            if nxt is None:
                return 0
            self._current = nxt
        n = min(len(view), len(self._current))
        view[:n] = self._current[:n]
        self._sink.write(self._current[:n])
        self._current = self._current[n:]
        return n


def _stage(repo: Repo, rel: str, blob: str, file: Path) -> None:
    """Index entry for `rel` -> `blob` with the file's stat, so git sees it clean without reading it."""
    st = file.stat()
    index = Index(repo.git_dir / "index")
    index[rel.encode()] = IndexEntry(
        ctime=(int(st.st_ctime), st.st_ctime_ns % 1_000_000_000),
        mtime=(int(st.st_mtime), st.st_mtime_ns % 1_000_000_000),
        dev=st.st_dev & 0xFFFFFFFF,
        ino=st.st_ino & 0xFFFFFFFF,
        mode=0o100644,
        uid=st.st_uid & 0xFFFFFFFF,
        gid=st.st_gid & 0xFFFFFFFF,
        size=st.st_size & 0xFFFFFFFF,
        sha=blob.encode(),
    )
    index.write()


def _commit(repo: Repo, blobs: Mapping[str, str], message: str, ref: str = "HEAD") -> str:
    """Commit `ref`'s tree with the paths in `blobs` replaced, through a private index."""
    head = repo.git("rev-parse", "--verify", "--quiet", ref, check=False) or None
    with tempfile.TemporaryDirectory(dir=repo.mgit_dir) as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if head:
            repo.git("read-tree", head, env=env)
        entries = "".join(f"100644 {blob}\t{rel}\n" for rel, blob in blobs.items())
        repo.git("update-index", "--add", "--index-info", input=entries.encode(), env=env)
        tree = repo.git("write-tree", env=env)
    commit = repo.git("commit-tree", tree, *(["-p", head] if head else []), "-m", message)
    repo.git("update-ref", "-m", f"commit (git-mgit): {message}", ref, commit, head or "0" * 40)
    return commit


def commit_model(
    state_dict: Mapping[str, object],
    path: str | os.PathLike[str],
    message: str | None = None,
    parents: Sequence[str] = (),
    function: str | None = None,
    name: str | None = None,
    type: str | None = None,
    metadata: Mapping[str, str] | None = None,
    lineage: Lineage | None = None,
    branch: str | None = None,
    previous: str | None = None,
) -> Saved:
    """Write `state_dict` to `path` (tracked by git-mgit), commit it, record its lineage.

    `parents` are versions it was derived from (anything `git mgit lineage`
    accepts); the first one is also the delta base when `path` is new.
    `previous` is the version it replaces (an explicit version edge).
    With `branch`, the commit goes onto that existing branch instead of HEAD
    and neither the working file nor the index is touched (how a cascade
    commits, leaving what the user has checked out alone).
    """
    lin = lineage or Lineage()
    repo = lin.repo
    if repo.worktree is None:
        raise MgitError("commit_model needs a working tree (this repository is bare)")
    rel = Path(path).absolute().relative_to(repo.worktree).as_posix()
    parent_versions = [lin.resolve(p) for p in parents]
    if name is not None and lin.graph.named(name):
        raise MgitError(f"the name {name!r} is taken; pick another or remove that node first")
    base = None
    if parent_versions and parent_versions[0].kind == "file":
        base = version_manifests(repo, parent_versions[0].id, "file")[""]
    commit, blobs = commit_files(
        repo, [ModelFile(rel, state_dict, metadata, base)], message or f"Save {rel}", branch
    )
    code = repo.git("rev-parse", "--verify", "--quiet", f"{commit}^", check=False) or None
    recs = lineage_records(rel, parent_versions, function, code, previous, name, type)
    record_many(lin, {blobs[rel]: recs}, f"save {rel}")
    return Saved(rel, blobs[rel], commit)


def version_manifests(repo: Repo, version: str, kind: str) -> dict[str, mf.Manifest]:
    """The manifests of a model version (one for a file, one per shard of a folder)."""
    store = ChunkStore(repo)
    try:
        return contents.manifests(repo, store.reader, version, kind)
    finally:
        store.close()


def commit_files(
    repo: Repo,
    files: Sequence[ModelFile],
    message: str,
    branch: str | None = None,
    plain: Mapping[str, bytes] | None = None,
) -> tuple[str, dict[str, str]]:
    """Write and clean each file in one pass, commit them (and `plain` small files) as one commit.

    Returns the commit and each path's blob (the manifest of a tracked file).
    Without `branch` the files are written to the working tree and staged,
    as commit_model does. With `branch` (an existing branch) nothing outside
    git's object database is touched, and each file's delta base is its
    version on that branch: a training run's checkpoints then chain their
    deltas along the run even though the user's checkout never holds them.
    """
    if repo.worktree is None:
        raise MgitError("committing model files needs a working tree (this repository is bare)")
    ref = f"refs/heads/{branch}" if branch is not None else "HEAD"
    for f in files:
        if not repo.git("check-attr", "filter", "--", f.path).endswith(": mgit"):
            raise MgitError(
                f"{f.path} is not tracked by git-mgit; run `git mgit track '*.safetensors'`"
            )
    blobs: dict[str, str] = {}
    store = ChunkStore(repo)
    try:
        settings = config.load(repo)
        for f in files:
            text = _clean_file(repo, store, settings, f, ref if branch is not None else None)
            blobs[f.path] = repo.git("hash-object", "-w", "--stdin", input=text)
    finally:
        store.close()
    for rel, data in (plain or {}).items():
        blobs[rel] = repo.git("hash-object", "-w", "--stdin", input=data)
        if branch is None:
            file = repo.worktree / rel
            _write_file(file, lambda sink, data=data: sink.write(data))
            _stage(repo, rel, blobs[rel], file)
    if branch is None:
        for f in files:
            _stage(repo, f.path, blobs[f.path], repo.worktree / f.path)
    return _commit(repo, blobs, message, ref), blobs


def _clean_file(
    repo: Repo, store: ChunkStore, settings: config.Settings, f: ModelFile, branch_ref: str | None
) -> bytes:
    """Serialize `f` once, cleaning every byte; into the working tree unless committing to a branch."""
    tensors = [(n, *_as_bytes(n, v)) for n, v in sorted(f.tensors.items())]
    pieces = [memoryview(serialize_header(tensors, f.metadata)), *(d for *_, d in tensors)]
    base = f.base
    if branch_ref is not None:
        on_branch = store.reader.read(f"{branch_ref}:{f.path}")
        if on_branch is not None and mf.looks_like_manifest(on_branch):
            base = mf.parse(bytes(on_branch))

    def clean_into(sink: BinaryIO) -> bytes:
        stream = _TeeStream(pieces, sink)
        return clean(stream, f.path, store, settings, base=base, from_index=branch_ref is None)

    if branch_ref is not None:
        with open(os.devnull, "wb") as sink:
            return clean_into(sink)
    return _write_file(repo.worktree / f.path, clean_into)


def _write_file(file: Path, clean_into: Callable[[BinaryIO], _T]) -> _T:
    """Write the model file and clean it in the same pass; the file appears whole or not at all."""
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".mgit-", dir=file.parent)
    try:
        with os.fdopen(fd, "wb") as sink:
            text = clean_into(sink)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return text


def lineage_records(
    rel: str,
    parents: Sequence[Version],
    function: str | None,
    code: str | None,
    previous: str | None = None,
    name: str | None = None,
    type: str | None = None,
    kind: str = "file",
    details: Mapping[str, object] | None = None,
) -> list[records.Record]:
    """The node, provenance and version records of a saved version at `rel`, for
    record_many.

    `kind` is "folder" when the version is the tree of a model folder; `details`
    (JSON values) say how it was made beyond its edges, such as the schedule
    of the selection or tuning run that trained it.
    """
    node = records.make(
        "node", name=name, path=rel, type=type, model_kind=kind, details=dict(details or {}) or None
    )
    recs = [node]
    for p in parents:
        recs.append(
            records.make(
                "provenance", parent=p.id, parent_path=p.path, function=function, code=code
            )
        )
    if previous is not None:
        recs.append(records.make("version", previous=previous))
    return recs


def record_many(lin: Lineage, changes: Mapping[str, list[records.Record]], message: str) -> None:
    """Versions' records (version -> lineage_records) in one notes commit: a saved version,
    or several saved at once."""
    lin._write(dict(changes), message)
    lin.reload()
