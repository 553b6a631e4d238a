"""Large checkout: a model of several GiB cloned and checked out, git-mgit against git-lfs.

git holds every smudge output whole in memory before it writes the file, so
with git-lfs a 4 GiB model costs git 4 GiB of RSS and a copy through a pipe.
git-mgit writes files of at least mgit.directSize itself, straight from its
object store, around git's buffer. This section measures what that buys on
two versions of one fp32 model (v2 = v1 after a training step):

a. `git clone` (checks out v2; git-mgit fetches its objects on demand);
b. `git checkout HEAD~1` in that clone (v1, fetched on demand by both tools);
c. warm: `git checkout -` four times, everything local and in the page cache;
   for git-mgit also with `-c mgit.directSize=0`, git's filter path, taking
   turns with the direct path, so the two compare on the same files.

Each command runs under a wrapper whose RUSAGE_CHILDREN ru_maxrss is the
largest peak RSS of any process below it (git, the filter, git-lfs, git
cat-file: the kernel folds in every descendant that was waited for); /proc
is sampled meanwhile only to say which process that was. Every checkout is
hashed against its version and, for git-mgit, `git status` must be clean and
the file's mtime must say whether the direct path wrote it (0 nanoseconds).
The tools run one after the other, each on its own disk and /dev/shm space
(the remote, as in history_bench.py), deleted before the next one starts.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import models
import numpy as np
from history_bench import FILE, _bare, _check, _commit, _git, _source, history_env, size_of
from phases import log
from rss_wrap import _descendants, _hwm_kib
from safetensors.numpy import save_file

TOOLS = ("git-mgit", "git-lfs")
TENSORS, COLS = 32, 4096
MIB = 1 << 20
WARM_ROUNDS = 2  # per round and mode: `git checkout -` twice, so each version is written
SAMPLE_S = 0.02
# Largest peak RSS (KiB) of every descendant the wrapper waited for, transitively.
WRAP = (
    "import resource,subprocess,sys; r=subprocess.run(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"
)


def _versions(folder: Path, size_mib: int) -> list[Path]:
    """v1 of N(0, 0.02) weights and v2 = v1 + N(0, 1e-4) everywhere: one version in memory."""
    rows = size_mib * MIB // (TENSORS * COLS * 4)
    if rows < 1:
        raise SystemExit(f"bench: --large-size-mib {size_mib} is too small")
    rng = np.random.default_rng(0)
    tensors = {}
    for i in range(TENSORS):
        t = rng.standard_normal((rows, COLS), dtype=np.float32)
        t *= 0.02
        tensors[f"layers.{i}.weight"] = t
    paths = [folder / "v1.safetensors", folder / "v2.safetensors"]
    save_file(tensors, paths[0])
    step = np.random.default_rng(1)
    for t in tensors.values():
        t += step.standard_normal(t.shape, dtype=np.float32) * 1e-4
    save_file(tensors, paths[1])
    return paths


def _name(pid: int) -> str:
    """A process as `comm subcommand` (git clone, git cat-file, git-mgit filter-process)."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    words = [a for a in argv[1:] if a and a[0] != "-" and "/" not in a and "=" not in a]
    return " ".join([comm, *words[:1]])


def _run(cwd: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    """Wall time of `git ARGS`, the largest peak RSS below it, and which process it was."""
    hwm: dict[int, int] = {}
    names: dict[int, str] = {}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAP, "git", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while True:
        try:
            out, err = proc.communicate(timeout=SAMPLE_S)
            break
        except subprocess.TimeoutExpired:
            for pid in _descendants(proc.pid):
                # Named when its peak grows: a child read before its exec is still python.
                if (kib := _hwm_kib(pid)) > hwm.get(pid, 0):
                    hwm[pid], names[pid] = kib, _name(pid)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"`git {' '.join(args)}` in {cwd} failed:\n{err}")
    top = max(hwm, key=hwm.__getitem__, default=None)
    return {
        "seconds": seconds,
        "peak_rss": int(out.split()[-1]) * 1024,
        "peak_process": names[top] if top is not None else "?",
    }


def _step(samples: list[dict[str, Any]], nbytes: int) -> dict[str, Any]:
    """One step's numbers: median time and its throughput, the largest peak RSS of any run."""
    times = [s["seconds"] for s in samples]
    seconds = statistics.median(times)
    peak = max(samples, key=lambda s: s["peak_rss"])
    return {
        "seconds": seconds,
        "times_s": times,
        "gbps": nbytes / 1e9 / seconds,
        "peak_rss": peak["peak_rss"],
        "peak_process": peak["peak_process"],
    }


def _verify(
    repo: Path, env: dict[str, str], tool: str, expected: str, what: str, direct: bool
) -> None:
    """The checkout is the version, byte for byte; git-mgit's index is clean and its file was
    written by the path asked for (a direct write leaves an mtime of 0 nanoseconds)."""
    if tool == "git-mgit":
        if ((repo / FILE).stat().st_mtime_ns % 10**9 == 0) != direct:
            raise RuntimeError(
                f"{what}: {FILE} was {'not ' if direct else ''}written by the direct path"
            )
        if status := _git(repo, env, "status", "--porcelain"):
            raise RuntimeError(f"{what}: `git status` is not clean:\n{status}")
    _check(repo, expected, what)


def bench_tool(
    scratch: Path, env: dict[str, str], tool: str, paths: list[Path], hashes: list[str]
) -> dict[str, Any]:
    """One tool's clone, checkout of v1 and warm checkouts; removes everything it made."""
    slug = tool.removeprefix("git-")
    nbytes = paths[0].stat().st_size
    direct = tool == "git-mgit"
    log(f"large: {tool}: committing v1, v2 and pushing")
    src = _source(scratch / f"large-{slug}", env, tool)
    for i, path in enumerate(paths):
        _commit(src, env, path, f"v{i + 1}")
    shm = Path("/dev/shm") / f"mgit-bench-{os.getpid()}"
    remote = _bare(shm / f"{slug}.git", env)
    _git(src, env, "remote", "add", "origin", remote.as_uri())
    _git(src, env, "push", "-q", "-u", "origin", "main")
    shutil.rmtree(src)
    row: dict[str, Any] = {"remote_bytes": size_of(remote)}

    log(f"large: {tool}: clone, checkout of v1")
    clone = scratch / f"large-{slug}-clone"
    sample = _run(scratch, env, "clone", "-q", remote.as_uri(), str(clone))
    _verify(clone, env, tool, hashes[1], f"{tool} clone", direct)
    row["clone"] = _step([sample], nbytes)
    sample = _run(clone, env, "checkout", "-q", "HEAD~1")
    _verify(clone, env, tool, hashes[0], f"{tool} checkout HEAD~1", direct)
    row["checkout"] = _step([sample], nbytes)

    log(f"large: {tool}: warm checkouts")
    modes = {"warm": ()} | ({"warm_filter": ("-c", "mgit.directSize=0")} if direct else {})
    samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    at = 0
    for _ in range(WARM_ROUNDS):
        for mode, opts in modes.items():
            for _ in range(2):
                at = 1 - at
                samples[mode].append(_run(clone, env, *opts, "checkout", "-q", "-"))
                what = f"{tool} {mode} checkout of v{at + 1}"
                _verify(clone, env, tool, hashes[at], what, direct and mode == "warm")
    for mode, runs in samples.items():
        row[mode] = _step(runs, nbytes)
    shutil.rmtree(clone)
    shutil.rmtree(shm)
    return row


def bench(scratch: Path, env: dict[str, str], size_mib: int) -> dict[str, Any]:
    """Both tools on two versions of a `size_mib` MiB model."""
    env = history_env(scratch, env)
    folder = scratch / "large-data"
    folder.mkdir()
    log(f"large: writing two versions of a {size_mib} MiB fp32 model")
    paths = _versions(folder, size_mib)
    hashes = [models.file_hash(p) for p in paths]
    out: dict[str, Any] = {
        "size_mib": size_mib,
        "bytes": paths[0].stat().st_size,
        "tensors": TENSORS,
    }
    for tool in TOOLS:
        out[tool] = bench_tool(scratch, env, tool, paths, hashes)
    shutil.rmtree(folder)
    return out
