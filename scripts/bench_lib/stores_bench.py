"""Stores: git-mgit's Git LFS and S3 stores against git-lfs on the same servers (issue 27).

Real servers on loopback, started here and stopped after (tests/servers/):
giftless behind HTTP Basic beside `git http-backend` on one port (the LFS
server runs in this process, on threads), and SeaweedFS with its S3 gateway.
For each of the history section's three series (history_models.py), four
remotes, every one a git repository on that server, reached over smart HTTP
with its basic auth (git's own exchanges cost every tool the same):

- `git-mgit refs`: version refs holding the objects (the reference the
  pointer stores are held to: at most 1.05x);
- `git-mgit lfs`: `mgit.store lfs`, the objects in giftless;
- `git-lfs`: a repository of its own;
- `git-mgit s3`: a fresh bucket for the objects,
  `mgit.store s3://bucket/models?endpoint=...`.

git-mgit commits the checkpoints once and each of its stores pushes a copy of
that repository. Per remote: the push (timed); the bytes the server stores
(its git repository after `git gc --prune=now`, plus giftless's storage folder
for the repository or the bucket's objects as listed); fresh clones (median of
5, the remotes taking turns); then three more checkpoints, each pushed (timed,
the remotes taking turns) and pulled (time, bytes its clone gained) before the
next: medians of three, and the server's bytes after the first.

Then a model of 1 GiB (`--quick`: 128 MiB) is pushed and cloned through each
pointer store, and by git-lfs, and the objects git-mgit pushed are moved again
by a plain client speaking the store's own protocol at the same concurrency
(store_clients.py, a process of its own): GB/s of model bytes for all. Each
round also times a copy of the model into a new file (not synced, as a
checkout leaves it): what writing the model's bytes alone costs on this disk,
which every clone pays and the plain client, keeping bytes in memory, does not.
Beside each time, the CPU it took (metered.py): the tool's processes, and the
servers' (giftless, git http-backend, SeaweedFS), so that (tool + servers) /
cores shows how close a step is to what this machine's cores allow. The plain
client reports its own CPU; the servers' share of its steps is not split out.

Server data, clones and sources live under the scratch folder (disk). Sizes
are apparent sizes of every file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import metered
import models
import store_clients
from history_bench import (
    CLONES,
    FILE,
    _check,
    _commit,
    _git,
    _source,
    history_env,
    size_of,
    trained,
)
from phases import log, settle
from scaleout_bench import _environ

from git_mgit.transfer.stores.s3 import DEFAULT_CONCURRENCY

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MIB = 1 << 20
REFS, LFS, GIT_LFS, S3 = "git-mgit refs", "git-mgit lfs", "git-lfs", "git-mgit s3"
TOOLS = (REFS, LFS, GIT_LFS, S3)
# The plain client against each pointer store's server (store_clients.py).
RAW = {LFS: "plain client, LFS basic", S3: "plain client, S3"}
# git-mgit's default for both stores (mgit.s3Concurrency, lfs.concurrenttransfers), and
# git-lfs's: every client moves this many objects at once.
CONCURRENCY = DEFAULT_CONCURRENCY
PREFIX = "models"
ONE_MORE = 3  # checkpoints pushed and pulled one at a time after the history
USER = "bench"
_OID = re.compile(r"[0-9a-f]{64}")


@dataclass
class Servers:
    """The section's servers, where they keep data, and the environment git runs in."""

    lfs: Any  # tests.servers.lfs.LfsServer
    s3: Any  # tests.servers.seaweed.SeaweedServer
    root: Path
    env: dict[str, str]


@dataclass
class Remote:
    """Where one tool pushes: a git URL, the server's repository, and its blob store."""

    url: str
    git_dir: Path
    store: str | None  # `git config mgit.store` of git-mgit's sources; None for git-lfs
    objects: Callable[[], int]  # bytes of this remote's objects in its blob store (0: none)
    place: str = ""  # the LFS repository (`bench/name`) or the bucket

    def stored(self, env: dict[str, str]) -> dict[str, int]:
        """What the server holds for this remote: its git repository after `git gc`, and
        the objects its blob store keeps."""
        _git(self.git_dir, env, "gc", "-q", "--prune=now")
        git, objects = size_of(self.git_dir), self.objects()
        return {"git": git, "objects": objects, "total": git + objects}


@contextlib.contextmanager
def servers(root: Path, env: dict[str, str]) -> Iterator[Servers]:
    """giftless and SeaweedFS on loopback; git's credential helper holds the LFS password
    and the environment the S3 keys, as a user would have them."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.servers.lfs import LfsServer  # giftless, flask: only when this section runs
    from tests.servers.seaweed import SeaweedServer

    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    env.update(no_proxy="127.0.0.1", NO_PROXY="127.0.0.1")
    root.mkdir(parents=True)
    # The servers read os.environ: git http-backend's environment, and `git config
    # --global` for the credential helper (the bench's own global config).
    with (
        _environ(env),
        SeaweedServer(root / "seaweed") as s3,
        LfsServer(root / "lfs", USER, secrets.token_urlsafe(16)) as lfs,
    ):
        lfs.store_credentials(root / "git-credentials")
        keys = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}
        yield Servers(lfs, s3, root, {**env, **keys})


def _slug(tool: str) -> str:
    return tool.replace("git-mgit ", "mgit-")


def new_remote(srv: Servers, tool: str, name: str) -> Remote:
    """An empty remote for `tool`, named `name` on its server. Every tool's git is served by
    the same smart-HTTP server (giftless's, behind its basic auth), so git's own exchanges
    cost every tool the same; the S3 store's bytes go to SeaweedFS."""
    repo = f"bench/{name}"
    url, git_dir = srv.lfs.repo_url(repo), srv.lfs.git_root / f"{repo}.git"
    if tool in (LFS, GIT_LFS):
        folder = srv.lfs.storage / repo
        store = "lfs" if tool == LFS else None
        return Remote(url, git_dir, store, lambda: size_of(folder), repo)
    if tool == REFS:
        return Remote(url, git_dir, "refs", lambda: 0)
    bucket = srv.s3.new_bucket(ready=True)  # as an S3 service's: no volume to grow yet
    client = store_clients.s3_client(
        srv.s3.endpoint, bucket.name, srv.s3.access_key, srv.s3.secret_key
    )

    def listed() -> int:
        return sum(store_clients.bucket_bytes(client, PREFIX).values())

    return Remote(url, git_dir, bucket.url(PREFIX), listed, bucket.name)


def _drop(srv: Servers, remote: Remote) -> None:
    """Free the disk a remote took (buckets stay: SeaweedFS goes at the end)."""
    shutil.rmtree(remote.git_dir)
    if remote.place.startswith("bench/"):
        shutil.rmtree(srv.lfs.storage / remote.place, ignore_errors=True)


def _committed(path: Path, env: dict[str, str], tool: str, files: list[Path]) -> Path:
    """A repository of `tool` (git-mgit or git-lfs) with one commit per file."""
    repo = _source(path, env, tool)
    for i, file in enumerate(files):
        _commit(repo, env, file, f"epoch {i}")
    return repo


def _copy(src: Path, dest: Path, env: dict[str, str], store: str) -> Path:
    """A copy of a committed git-mgit repository (without its working file: a push does
    not read it) that pushes to `store`."""
    shutil.copytree(src, dest, symlinks=True, ignore=lambda d, _: [FILE] if d == str(src) else [])
    _git(dest, env, "config", "mgit.store", store)
    return dest


def _metered(srv: Servers, cwd: Path, *args: str) -> metered.Metered:
    """A git command's seconds and CPU (its own, the servers'), measured once the steps
    before it are on disk: a gigabyte pushed leaves dirty pages whose writeback took ~7 CPU
    s of this 2-core VM's kernel from the next push (the S3 store's, always the last, was
    billed for three)."""
    settle()
    return metered.run(["git", *args], cwd, srv.env, [srv.s3.pid])


def _timed(srv: Servers, cwd: Path, *args: str) -> float:
    return _metered(srv, cwd, *args).wall_s


def _push(srv: Servers, src: Path, remote: Remote, name: str = "origin") -> metered.Metered:
    _git(src, srv.env, "remote", "add", name, remote.url)
    return _metered(srv, src, "push", "-q", "-u", name, "main")


def _rotations(tools: tuple[str, ...], rounds: int) -> Iterator[str]:
    """The tools `rounds` times, each round starting one further on: a noisy minute on a
    shared machine slows every tool, and none always runs right after another."""
    for r in range(rounds):
        yield from _turn(tools, r)


def _turn(tools: tuple[str, ...], r: int) -> tuple[str, ...]:
    """The tools in round `r`'s order."""
    k = r % len(tools)
    return tools[k:] + tools[:k]


def _clones(
    srv: Servers, remotes: dict[str, Remote], work: Path, expected: str
) -> tuple[dict[str, Path], dict[str, list[float]]]:
    """CLONES fresh clones of each remote, taking turns; each is checked, the last kept."""
    paths = {tool: work / f"{_slug(tool)}-clone" for tool in remotes}
    times: dict[str, list[float]] = {tool: [] for tool in remotes}
    for tool in _rotations(tuple(remotes), CLONES):
        shutil.rmtree(paths[tool], ignore_errors=True)
        url = remotes[tool].url
        times[tool].append(_timed(srv, work, "clone", "-q", url, str(paths[tool])))
        _check(paths[tool], expected, f"{tool} clone")
    return paths, times


def bench_series(
    srv: Servers, index: int, label: str, ckpts: list[Path], newer: list[Path]
) -> dict[str, Any]:
    """Push, server bytes, clone, then each of `newer` pushed and pulled, per store. The
    history pushes go in turn: series `index` starts with the index-th tool (no tool always
    pushes first, on a cold server, or last, after three gigabytes)."""
    tag = f"s{index}"
    env, work = srv.env, srv.root / "work"
    log(f"stores {label}: committing {len(ckpts)} checkpoints (git-mgit, git-lfs)")
    mgit = _committed(work / "mgit", env, "git-mgit", ckpts)
    sources = {GIT_LFS: _committed(work / "lfs", env, "git-lfs", ckpts)}
    remotes = {tool: new_remote(srv, tool, f"{tag}-{_slug(tool)}") for tool in TOOLS}
    for tool in (REFS, LFS, S3):
        sources[tool] = _copy(mgit, work / _slug(tool), env, remotes[tool].store or "")
    shutil.rmtree(mgit)
    rows: dict[str, dict[str, Any]] = {tool: {} for tool in TOOLS}
    for tool in _turn(TOOLS, index):
        log(f"stores {label}: {tool}: pushing")
        rows[tool]["push_s"] = _push(srv, sources[tool], remotes[tool]).wall_s
        rows[tool]["server"] = remotes[tool].stored(env)
        if tool != REFS and not rows[tool]["server"]["objects"]:
            raise RuntimeError(f"{tool}: no objects found in its blob store after the push")
    log(f"stores {label}: {CLONES} fresh clones per remote, taking turns")
    clones, times = _clones(srv, remotes, work, models.file_hash(ckpts[-1]))
    for tool in TOOLS:
        rows[tool]["clone_s"] = statistics.median(times[tool])
        rows[tool]["clone_times_s"] = times[tool]
        rows[tool]["clone_bytes"] = size_of(clones[tool] / ".git")
    one_more = _one_more(srv, remotes, sources, clones, newer)
    for tool in TOOLS:
        rows[tool].update(one_more[tool])
        _drop(srv, remotes[tool])
    shutil.rmtree(work)
    return {"checkpoints": len(ckpts), "bytes_each": ckpts[0].stat().st_size, **rows}


def _one_more(
    srv: Servers,
    remotes: dict[str, Remote],
    sources: dict[str, Path],
    clones: dict[str, Path],
    newer: list[Path],
) -> dict[str, dict[str, Any]]:
    """Each of `newer` committed and pushed by every tool (taking turns), then pulled by each
    tool's clone: a sub-second step timed once is mostly this machine's noise, so each is
    timed len(newer) times (medians, and every time). The server's bytes after the first."""
    env = srv.env
    taken: dict[str, dict[str, list[float]]] = {
        tool: {"push_one_times_s": [], "pull_times_s": [], "pull_bytes_each": []} for tool in TOOLS
    }
    out: dict[str, dict[str, Any]] = {tool: {} for tool in TOOLS}
    for r, ckpt in enumerate(newer):
        log(f"one more checkpoint ({r + 1} of {len(newer)}), pushed and pulled")
        for tool in _turn(TOOLS, r):
            _commit(sources[tool], env, ckpt, f"one more epoch ({r + 1})")
            taken[tool]["push_one_times_s"].append(
                _timed(srv, sources[tool], "push", "-q", "origin", "main")
            )
        expected = models.file_hash(ckpt)
        for tool in TOOLS:
            before = size_of(clones[tool] / ".git")
            taken[tool]["pull_times_s"].append(_timed(srv, clones[tool], "pull", "-q", "--ff-only"))
            _check(clones[tool], expected, f"{tool} pull")
            taken[tool]["pull_bytes_each"].append(size_of(clones[tool] / ".git") - before)
            if r == 0:
                out[tool]["server_after_one_more"] = remotes[tool].stored(env)
    for tool, lists in taken.items():
        out[tool].update(lists)
        out[tool]["push_one_s"] = statistics.median(lists["push_one_times_s"])
        out[tool]["pull_s"] = statistics.median(lists["pull_times_s"])
        out[tool]["pull_bytes"] = statistics.median(lists["pull_bytes_each"])
    return out


def _raw(srv: Servers, tool: str, remote: Remote, name: str) -> dict[str, Any]:
    """The objects `remote` holds, downloaded and uploaded elsewhere by the plain client."""
    spec: dict[str, Any] = {"concurrency": CONCURRENCY}
    if tool == LFS:
        folder = srv.lfs.storage / remote.place
        objects = [[p.name, p.stat().st_size] for p in folder.iterdir() if _OID.fullmatch(p.name)]
        spec.update(
            store="lfs",
            source=srv.lfs.lfs_url(remote.place),
            target=srv.lfs.lfs_url(f"bench/{name}"),
            username=srv.lfs.username,
            password=srv.lfs.password,
            objects=objects,
        )
    else:
        spec.update(
            store="s3",
            endpoint=srv.s3.endpoint,
            bucket=remote.place,
            source=PREFIX,
            target=f"raw-{name}",
            access_key=srv.s3.access_key,
            secret_key=srv.s3.secret_key,
        )
    settle()  # as before git-mgit's own steps (_metered)
    proc = subprocess.run(
        [sys.executable, str(HERE / "store_clients.py")],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=srv.env,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"{RAW[tool]} failed:\n{proc.stderr}")
    if tool == LFS:
        shutil.rmtree(srv.lfs.storage / "bench" / name, ignore_errors=True)
    return json.loads(proc.stdout)


def bench_transfer(srv: Servers, size_mib: int, rounds: int) -> dict[str, Any]:
    """A model of `size_mib` MiB pushed and cloned through each pointer store and by
    git-lfs, and moved by the plain client; `rounds` times, taking turns."""
    env, work = srv.env, srv.root / "big"
    work.mkdir()
    model = work / FILE
    log(f"stores: writing a {size_mib} MiB fp32 model")
    models.write_model(model, size_mib * MIB, "F32")
    digest, size = models.file_hash(model), model.stat().st_size
    log("stores: committing it (git-mgit, git-lfs)")
    mgit = _committed(work / "mgit-src", env, "git-mgit", [model])
    lfs_src = _committed(work / "lfs-src", env, "git-lfs", [model])
    keys = ("push", "clone")
    samples: dict[str, dict[str, list[float]]] = {
        t: {f"{k}{m}": [] for k in keys for m in _MEASURES} for t in (LFS, S3, GIT_LFS)
    }
    for raw in RAW.values():  # its CPU is its own process's; the servers' are not split
        samples[raw] = {f"{k}{m}": [] for k in keys for m in _MEASURES[:2]}
    objects: dict[str, int] = {}
    writes: list[float] = []
    for i, tool in enumerate(_rotations((LFS, S3, GIT_LFS), rounds)):
        if i % 3 == 0:
            writes.append(_new_file(model, work / "written"))
        name = f"big{i}-{_slug(tool)}"
        remote = new_remote(srv, tool, name)
        src = lfs_src if tool == GIT_LFS else _copy(mgit, work / name, env, remote.store or "")
        log(f"stores: {size_mib} MiB model: {tool}: push and clone")
        _record(samples[tool], "push", _push(srv, src, remote, f"r{i}"))
        clone = work / "clone"
        _record(samples[tool], "clone", _metered(srv, work, "clone", "-q", remote.url, str(clone)))
        _check(clone, digest, f"{tool} clone of the {size_mib} MiB model")
        shutil.rmtree(clone)
        objects[tool] = remote.objects()
        if tool in RAW:
            raw = _raw(srv, tool, remote, f"{name}-raw")
            for step, op in (("push", "put"), ("clone", "get")):
                samples[RAW[tool]][f"{step}_s"].append(raw[f"{op}_s"])
                samples[RAW[tool]][f"{step}_cpu_s"].append(raw[f"{op}_cpu_s"])
            objects[RAW[tool]] = raw["bytes"]
            shutil.rmtree(src)
        _drop(srv, remote)
    shutil.rmtree(work)
    return {
        "size_mib": size_mib,
        "bytes": size,
        "rounds": rounds,
        "concurrency": CONCURRENCY,
        "object_bytes": objects,
        "tools": samples,
        "new_file_s": writes,
        "cores": os.cpu_count(),
    }


# What each step of the big model records: seconds, the tool's CPU, the servers' CPU.
_MEASURES = ("_s", "_cpu_s", "_server_cpu_s")


def _record(samples: dict[str, list[float]], step: str, m: metered.Metered) -> None:
    for suffix, value in zip(_MEASURES, (m.wall_s, m.cpu_s, m.server_cpu_s), strict=True):
        samples[step + suffix].append(value)


def _new_file(model: Path, dest: Path) -> float:
    """Seconds to copy `model` (cached) into a new file `dest`, deleted after."""
    settle()
    start = time.perf_counter()
    shutil.copyfile(model, dest)
    seconds = time.perf_counter() - start
    dest.unlink()
    return seconds


def bench(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, Any]:
    """Every series, then the big model; `quick`: 4 checkpoints and 128 MiB."""
    env = history_env(scratch, env, "stores")
    n, size_mib, rounds = (4, 128, 1) if quick else (20, 1024, 3)
    results: dict[str, Any] = {"series": {}}
    with servers(scratch / "stores", env) as srv:
        for i, (label, paths, train_s) in enumerate(trained(scratch, n, "stores", ONE_MORE)):
            result = bench_series(srv, i, label, paths[:n], paths[n:])
            results["series"][label] = {**result, "train_s": train_s}
        results["transfer"] = bench_transfer(srv, size_mib, rounds)
    return results
