"""A cluster node's side of a runtime job: what the Dask task that carries it does.

Everything lives in the node's own folder, git-mgit/ beside the Dask
workers' local directories (so every worker a node runs shares it, and it
outlives a worker's restart):

    code/<digest>/   the head's code (shipping.code), unpacked once per version of it
    objects.git/     a bare repository holding the tensor objects of the versions
                     this node was given: fetched from the remote (and from the
                     blob store its version refs name: Git LFS, S3), or indexed
                     from the head's packs, and kept for the next job
    jobs/<id>/       one job's input and output files, removed when it ends

The job itself runs as on the head: in a worker process
(`python -m git_mgit.runtime.worker`, one per Dask thread and code version,
kept for the next job), which loads each model from its manifests and the
object cache. The answer goes back to the head with what the node did:
where it is, the bytes of objects it fetched from the remote and from the
head, and the seconds spent preparing and running. Nodes never write to the
repository; the head commits.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, find_repo, git
from git_mgit.modelfile import manifest as mf
from git_mgit.runtime.execution.local import Pool
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer import versions
from git_mgit.transfer.stores import pointers

_pools: dict[tuple[int, str], Pool] = {}
_pools_lock = threading.Lock()


def run(
    job: dict,
    digest: str,
    code: bytes,
    remote: dict | None,
    packs: list[dict],
    files: dict[str, bytes],
) -> dict:
    """Run one job here; its answer, with "node", "fetched" and "seconds" added.

    `remote` is {"url": URL, "versions": {manifest version: text}, "refs": {version
    ref: commit}}: what to fetch from the remote, and for which versions; `packs` are
    the head's packs; `files` the bytes of models that are files on the head (a model
    no commit holds yet).
    """
    from distributed import get_worker

    began = time.monotonic()
    worker = get_worker()
    home = node_home()
    root = unpack_code(home, digest, code)
    cache = home / "objects.git"
    with _locked(home):
        if not cache.exists():
            git("init", "-q", "--bare", str(cache))
        repo = find_repo(cache)
        fetched = {"head": sum(_index(repo, p) for p in packs), "remote": 0}
        missing: list[str] = []
        if remote:
            fetched["remote"], missing = _fetch(repo, remote)
    facts = {"node": worker.address, "fetched": fetched}
    if missing:  # the remote lacks them after all: the head sends them instead
        return {"ok": False, "missing": missing, **facts}
    scratch = home / "jobs" / uuid.uuid4().hex
    scratch.mkdir(parents=True)
    try:
        here = _localize(job, str(cache), scratch, files)
        ready = time.monotonic()
        pool = _pool(root)
        pool.submit(None, here)
        _, answer = pool.next_done()
        ran = time.monotonic() - ready
        if answer["ok"] and here["kind"] == "create":
            answer["outputs"] = {n: Path(p).read_bytes() for n, p in here["outputs"].items()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {**answer, **facts, "seconds": {"prepare": ready - began, "run": ran}}


def node_home() -> Path:
    """This node's git-mgit folder (beside the Dask workers' local directories)."""
    from distributed import get_worker

    home = Path(get_worker().local_directory).parent / "git-mgit"
    home.mkdir(exist_ok=True)
    return home


@contextmanager
def _locked(home: Path) -> Iterator[None]:
    """One job at a time changes the node's cache (threads of this worker, other workers)."""
    with open(home / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def unpack_code(home: Path, digest: str, code: bytes) -> Path:
    """The head's code, unpacked here once (into a new folder, then renamed into place)."""
    root = home / "code" / digest
    if root.is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.with_name(f".{digest}.{os.getpid()}.{threading.get_ident()}")
    with zipfile.ZipFile(io.BytesIO(code)) as zf:
        zf.extractall(tmp)
    try:
        tmp.rename(root)
    except OSError:  # another job unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _size(repo: Repo) -> int:
    return sum((Path(d) / f).stat().st_size for d, _, fs in os.walk(repo.objects_dir) for f in fs)


def _index(repo: Repo, pack: dict) -> int:
    """Index a head-made pack into the cache, anchored; its size, or 0 if it was here already."""
    objects = [(bytes.fromhex(h), bytes.fromhex(oid)) for h, oid in pack["objects"]]
    if len(repo.existing(oid.hex() for _, oid in objects)) == len(objects):
        return 0
    repo.git_bytes("index-pack", "--stdin", input=pack["pack"])
    anchors.set_ref(repo, anchors.commit_objects(repo, objects))
    return len(pack["pack"])


def _fetch(repo: Repo, remote: dict) -> tuple[int, list[str]]:
    """One `git fetch` of the version refs the head named (those not here yet) from the
    remote: (bytes that came, versions still incomplete)."""
    have = repo.existing(remote["refs"].values())
    specs = [f"+{commit}:{name}" for name, commit in remote["refs"].items() if commit not in have]
    came = 0
    if specs:  # a failed fetch shows as versions still missing: the head then sends them
        before = _size(repo)
        repo.git_bytes(
            "fetch", "--no-tags", "--no-write-fetch-head", "-q", remote["url"], *specs,
            check=False,
        )  # fmt: skip
        came = _size(repo) - before
    store = ChunkStore(repo)
    try:
        refs = [r for n, c in remote["refs"].items() if (r := versions.parse(n, c)) is not None]
        # A pointer store's refs (Git LFS, S3): their objects come from the blob store; a
        # failure shows as versions still missing, which the head then sends.
        with contextlib.suppress(MgitError):
            came += pointers.resolve(store, remote["url"], refs)
        missing = [
            v
            for v, text in remote["versions"].items()
            if store.missing([c.content_hash for c in mf.parse(text.encode()).chunks()])
        ]
    finally:
        store.close()
    return came, missing


def _localize(job: dict, cache: str, scratch: Path, files: dict[str, bytes]) -> dict:
    """The job with this node's paths: models read from the cache or from written files,
    outputs written under the job's folder."""

    def spec(model: dict) -> dict:
        if "manifests" in model:
            return {**model, "objects": cache}
        if "shipped" in model:
            path = scratch / f"in-{len(list(scratch.iterdir()))}.safetensors"
            path.write_bytes(files[model["shipped"]])
            return {"file": str(path), "architecture": model.get("architecture")}
        return model

    here = dict(job)
    if "model" in job:
        here["model"] = spec(job["model"])
    if "parents" in job:
        here["parents"] = [spec(p) for p in job["parents"]]
    if "outputs" in job:
        here["outputs"] = {
            n: str(scratch / f"out-{i}.safetensors") for i, n in enumerate(job["outputs"])
        }
    return here


def _pool(root: Path) -> Pool:
    """This thread's worker process for this code (started on first use, then kept)."""
    key = (threading.get_ident(), str(root))
    with _pools_lock:
        if key not in _pools:
            _pools[key] = Pool(root, 1)
        return _pools[key]
