"""History: what a repository's clone, pull, checkout of an old version and push cost.

For each checkpoint series (history_models.py), git-mgit and git-lfs each
commit every checkpoint in a repository of their own and push it to a bare
repository; then, per tool, in the same run: the remote's size after
`git gc`, a fresh clone (bytes in its .git, time), a `git pull` of one more
checkpoint pushed meanwhile (bytes it added, time), and the checkout of the
oldest version in that clone (bytes it added, time). For git-mgit, the same
history pushed the way git-mgit did before version refs (every anchor, the
forward delta chains `git add` writes) gives "today's design" remote size.

Both remotes live on /dev/shm: git-lfs's file:// transfer hard-links objects
when the remote is on the same file system, which no real remote allows, and
tmpfs takes that away from both tools alike. Sizes are apparent file sizes,
hard links counted in full. A clone's time is the median of 5 fresh clones.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import history_models
import models
from phases import log

from git_mgit.modelfile import manifest as mf

TOOLS = ("git-mgit", "git-lfs")
CLONES = 5
FILE = "model.safetensors"


def _git(cwd: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"`git {' '.join(args)}` in {cwd} failed:\n{proc.stderr}")
    return proc.stdout


def _timed(cwd: Path, env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    _git(cwd, env, *args)
    return time.perf_counter() - start


def size_of(path: Path) -> int:
    """Apparent bytes of every file under path (hard links counted in full)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            p = Path(folder, name)
            if not p.is_symlink():
                total += p.stat().st_size
    return total


def history_env(scratch: Path, env: dict[str, str], name: str = "history") -> dict[str, str]:
    """The bench's isolated environment with both tools installed globally (clones need it),
    in a global config of its own (`<name>-gitconfig`) that the section may add to."""
    config = scratch / f"{name}-gitconfig"
    shutil.copy(env["GIT_CONFIG_GLOBAL"], config)
    out = {**env, "GIT_CONFIG_GLOBAL": str(config)}
    _git(scratch, out, "mgit", "install")
    _git(scratch, out, "lfs", "install", "--skip-repo")
    return out


def _source(root: Path, env: dict[str, str], tool: str) -> Path:
    root.mkdir(parents=True)
    _git(root, env, "init", "-q")
    if tool == "git-mgit":
        _git(root, env, "mgit", "track", "*.safetensors")
    else:
        _git(root, env, "lfs", "track", "*.safetensors")
    _git(root, env, "add", ".gitattributes")
    _git(root, env, "commit", "-q", "-m", "track")
    return root


def _commit(repo: Path, env: dict[str, str], ckpt: Path, message: str) -> str:
    shutil.copyfile(ckpt, repo / FILE)
    _git(repo, env, "add", FILE)
    _git(repo, env, "commit", "-q", "-m", message)
    return _git(repo, env, "rev-parse", "HEAD").strip()


def _bare(path: Path, env: dict[str, str]) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    _git(path, env, "init", "-q", "--bare")
    return path


def _frozen_objects(remote: Path, env: dict[str, str], repo: Path, label: str) -> dict[str, int]:
    """Objects on the remote that hold the chunks of frozen tensors, per chunk (1 = stored once)."""
    names = history_models.frozen_names(label)
    if not names:
        return {}
    blob = _git(repo, env, "cat-file", "blob", f"HEAD:{FILE}").encode()
    chunks = {c.content_hash.hex() for c in mf.parse(blob).chunks() if c.segment.name in names}
    held: dict[str, set[str]] = {h: set() for h in chunks}
    for ref in _git(remote, env, "for-each-ref", "--format=%(objectname)", "refs/mgit/").split():
        for line in _git(remote, env, "ls-tree", "-r", ref).splitlines():
            meta, _, path = line.partition("\t")
            name = path.rsplit("/", 1)[-1]
            if name in held:
                held[name].add(meta.split()[2])
    return {h: len(oids) for h, oids in held.items()}


def bench_series(
    scratch: Path, env: dict[str, str], label: str, ckpts: list[Path], newest: Path
) -> dict[str, object]:
    hashes = [models.file_hash(p) for p in ckpts]
    shm = Path("/dev/shm") / f"mgit-bench-{os.getpid()}"
    out: dict[str, object] = {"checkpoints": len(ckpts), "bytes_each": ckpts[0].stat().st_size}
    for tool in TOOLS:
        slug = tool.replace("git-", "")
        log(f"history {label}: {tool}: committing {len(ckpts)} checkpoints")
        src = _source(scratch / f"history-{slug}", env, tool)
        commits = [_commit(src, env, p, f"epoch {i}") for i, p in enumerate(ckpts)]
        row: dict[str, object] = {}
        if tool == "git-mgit":
            # Before version refs: every object the forward chains hold, anchors pushed as is.
            today = _bare(scratch / "history-today.git", env)
            _git(
                src,
                env,
                "push",
                "-q",
                "--no-verify",
                str(today),
                "main",
                "refs/mgit/objects/*:refs/mgit/objects/*",
            )
            _git(today, env, "gc", "-q", "--prune=now")
            row["today_remote_bytes"] = size_of(today)
            shutil.rmtree(today)
        remote = _bare(shm / f"{slug}.git", env)
        _git(src, env, "remote", "add", "origin", remote.as_uri())
        log(f"history {label}: {tool}: pushing")
        row["push_s"] = _timed(src, env, "push", "-q", "-u", "origin", "main")
        _git(remote, env, "gc", "-q", "--prune=now")
        row["remote_bytes"] = size_of(remote)
        if tool == "git-mgit":
            row["frozen_objects"] = _frozen_objects(remote, env, src, label)
        clone = scratch / f"history-{slug}-clone"
        log(f"history {label}: {tool}: clone, pull, checkout of the oldest version")
        # A clone is under a second: the median of CLONES fresh ones, the last one kept.
        times = []
        for _ in range(CLONES):
            shutil.rmtree(clone, ignore_errors=True)
            times.append(_timed(scratch, env, "clone", "-q", remote.as_uri(), str(clone)))
        row["clone_s"] = statistics.median(times)
        row["clone_times_s"] = times
        _check(clone, hashes[-1], f"{tool} clone")
        row["clone_bytes"] = before = size_of(clone / ".git")
        _commit(src, env, newest, "one more epoch")
        row["push_one_s"] = _timed(src, env, "push", "-q", "origin", "main")
        row["pull_s"] = _timed(clone, env, "pull", "-q", "--ff-only")
        _check(clone, models.file_hash(newest), f"{tool} pull")
        row["pull_bytes"] = size_of(clone / ".git") - before
        before = size_of(clone / ".git")
        row["oldest_s"] = _timed(clone, env, "checkout", "-q", commits[0])
        _check(clone, hashes[0], f"{tool} checkout of the oldest version")
        row["oldest_bytes"] = size_of(clone / ".git") - before
        for path in (src, clone, remote):
            shutil.rmtree(path)
        out[tool] = row
    shutil.rmtree(shm, ignore_errors=True)
    return out


def _check(repo: Path, expected: str, what: str) -> None:
    if models.file_hash(repo / FILE) != expected:
        raise RuntimeError(f"{what}: {FILE} is not the checkpoint it should be")


def trained(
    scratch: Path, n: int, section: str = "history", more: int = 1
) -> Iterator[tuple[str, list[Path], float]]:
    """(label, checkpoint files, seconds it took) for each series, trained for n + `more`
    epochs (the last `more` files are the ones pulls bring); the files go when the caller
    moves on."""
    for label in history_models.SERIES:
        folder = scratch / f"{section}-data"
        folder.mkdir()
        log(f"{section} {label}: training {n + more} epochs")
        start = time.perf_counter()
        paths = list(history_models.series(label, folder, n + more))
        yield label, paths, time.perf_counter() - start
        shutil.rmtree(folder)


def bench(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """Every series; `quick` takes 4 checkpoints instead of 20."""
    env = history_env(scratch, env)
    return {
        label: {**bench_series(scratch, env, label, paths[:-1], paths[-1]), "train_s": train_s}
        for label, paths, train_s in trained(scratch, 4 if quick else 20)
    }
