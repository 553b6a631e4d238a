"""What is timed, in what order: one function per benchmark section.

Tools take turns inside every repetition (git-mgit, git-lfs, plain git,
passthrough, then again), so a noisy neighbour on a shared machine slows
all of them rather than one. Every checkout is hashed against the file that
was added: a benchmark that timed a broken checkout would be worthless.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import models
from tools import FILE, LFS, MGIT, PASSTHROUGH, PLAIN, BenchRepo, Timed

_START = time.monotonic()


def log(message: str) -> None:
    """A progress line on stderr, stamped with the time since the run began."""
    print(f"[{time.monotonic() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass
class Context:
    scratch: Path
    env: dict[str, str]
    repeat: int
    checkout_repeat: int
    chunk_size: str | None


@dataclass
class Samples:
    """Every timing of every step for one tool, the filter's CPU time per step and
    its peak RSS per kind of step."""

    times: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    rss_kib: dict[str, dict[str, int]] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    def record(self, step: str, timed: Timed, rss_kind: str) -> None:
        self.times.setdefault(step, []).append(timed.seconds)
        if timed.filter_cpu_s is not None:
            self.cpu.setdefault(step, []).append(timed.filter_cpu_s)
        if timed.rss_kib is not None:
            seen = self.rss_kib.setdefault(rss_kind, dict.fromkeys(timed.rss_kib, 0))
            for key, value in timed.rss_kib.items():
                seen[key] = max(seen[key], value)

    def as_json(self) -> dict[str, object]:
        return {
            "times_s": self.times,
            "filter_cpu_s": self.cpu,
            "filter_peak_rss_kib": self.rss_kib,
            **self.extra,
        }


def settle() -> None:
    """Write dirty pages back first, so one step's writeback is not billed to the next."""
    os.sync()


def _place(src: Path, repo: BenchRepo) -> None:
    """Put a version of the model into the work tree, as a training script would write it."""
    shutil.copyfile(src, repo.file)
    settle()


def _refresh(repo: BenchRepo) -> None:
    """Bring the index up to date, untimed, as any `git status` would before a user switches.

    A file git has just written usually shares its coarse file-system
    timestamp with the index written right after it, so git treats it as
    racily clean and re-checks its content (running the clean filter, or
    re-hashing 512 MiB for plain git) at the next command. That one-off cost
    is a re-add of an unchanged file, measured above; here it would swamp
    the switch itself. `git status` re-checks and rewrites the index.
    """
    time.sleep(0.05)  # past the file-system clock tick of the last write
    if repo.git("status", "--porcelain", "--untracked-files=no"):
        raise RuntimeError(f"{repo.tool}: the work tree differs from HEAD after a checkout")


def _verify(repo: BenchRepo, expected: str, what: str) -> None:
    got = models.file_hash(repo.file)
    if got != expected:
        raise RuntimeError(f"{repo.tool}: {what} produced a different file ({got} != {expected})")


def _turn(tools: list[str], r: int, everyone: bool = False) -> list[str]:
    """Who runs a step in repetition r, and in which order.

    Plain git and the passthrough run only in the first repetition (their
    512 MiB adds take 20-40 s and ~10 s, and no target depends on them)
    unless `everyone`. The order rotates from one repetition to the next: on
    a VM the memory a tool frees goes back to the hypervisor, and whoever
    runs next pays host faults to get it back, so a fixed order would bill
    one tool for another's footprint.
    """
    turn = tools if everyone or r == 0 else [t for t in tools if t in (MGIT, LFS)]
    k = r % len(turn)
    return turn[k:] + turn[:k]


def _slug(tool: str) -> str:
    return tool.replace(" ", "-")


def bench_file(ctx: Context, label: str, src: Path, tools: list[str]) -> dict[str, object]:
    """First add, re-adds, checkouts and storage of one big file, for every tool."""
    original = models.file_hash(src)
    samples = {tool: Samples() for tool in tools}
    adders = [t for t in tools if t != PASSTHROUGH]
    repos: dict[str, BenchRepo] = {}

    # Filter tools get a fresh repository per repetition.
    for r in range(ctx.repeat):
        for tool in _turn(tools, r):
            log(f"{label}: {tool}: first add ({r + 1}/{ctx.repeat})")
            if tool in repos:
                repos[tool].remove()
            repo = BenchRepo(tool, ctx.scratch / f"{label}-{_slug(tool)}", ctx.env, ctx.chunk_size)
            _place(src, repo)
            samples[tool].record("first_add", repo.timed("add", FILE), "add")
            repos[tool] = repo
    stored: dict[str, int] = {}
    for tool, repo in repos.items():
        repo.commit("v1")
        if tool != PASSTHROUGH:  # stores blobs uncompressed on purpose: not a contender
            stored[tool] = repo.stored_bytes()
            samples[tool].extra["stored_bytes"] = stored[tool]
    if MGIT in repos:
        samples[MGIT].extra["chunk_size"] = repos[MGIT].chunk_size()

    for r in range(ctx.repeat):
        for tool in _turn(adders, r):
            log(f"{label}: {tool}: re-add unchanged ({r + 1}/{ctx.repeat})")
            repo = repos[tool]
            os.utime(repo.file)  # touch: git must run the clean filter again
            samples[tool].record("readd_unchanged", repo.timed("add", FILE), "add")
            if repo.git("diff", "--cached", "--name-only"):
                raise RuntimeError(f"{tool}: re-adding the unchanged file changed the index")

    for r in range(ctx.checkout_repeat):
        for tool in _turn(tools, r, everyone=True):
            log(f"{label}: {tool}: checkout ({r + 1}/{ctx.checkout_repeat})")
            repo = repos[tool]
            repo.file.unlink()
            settle()
            samples[tool].record("checkout", repo.timed("checkout", "--", FILE), "checkout")
            _verify(repo, original, "checkout")

    # Successive versions, each with one more tensor update.
    current = ctx.scratch / f"{label}-changed.safetensors"
    shutil.copyfile(src, current)
    versions = [original]
    for r in range(ctx.repeat):
        changed = models.perturb_tensor(current, seed=r + 1)
        versions.append(models.file_hash(current))
        for tool in _turn(adders, r):
            log(f"{label}: {tool}: re-add with {changed} changed ({r + 1}/{ctx.repeat})")
            repo = repos[tool]
            _place(current, repo)
            samples[tool].record("readd_changed", repo.timed("add", FILE), "add")
            repo.commit(f"v{r + 2}")
    current.unlink()
    for tool in adders:
        n = len(samples[tool].times["readd_changed"])
        after = repos[tool].stored_bytes()
        samples[tool].extra["stored_bytes_per_changed_version"] = (after - stored[tool]) // n
        samples[tool].extra["changed_tensor"] = changed

    for r in range(ctx.repeat):
        for tool in _turn(adders, r):
            log(f"{label}: {tool}: checkout previous commit and back ({r + 1}/{ctx.repeat})")
            repo = repos[tool]
            n = len(samples[tool].times["readd_changed"])
            for rev, expected in (("HEAD~1", versions[n - 1]), ("main", versions[n])):
                _refresh(repo)
                settle()
                samples[tool].record(
                    "checkout_commit", repo.timed("checkout", "-q", rev), "checkout"
                )
                _verify(repo, expected, f"checkout {rev}")

    for repo in repos.values():
        repo.remove()
    return {
        "bytes": src.stat().st_size,
        "tensors": len(models.read_header(src)),
        "tools": {tool: s.as_json() for tool, s in samples.items()},
    }


def bench_rss(ctx: Context, label: str, src: Path, tools: Iterable[str]) -> dict[str, object]:
    """Add and check out one large file: the filter's peak RSS must not grow with it."""
    original = models.file_hash(src)
    result: dict[str, object] = {
        "bytes": src.stat().st_size,
        "tensors": len(models.read_header(src)),
    }
    per_tool = {}
    for tool in tools:
        log(f"{label}: {tool}: add and checkout")
        repo = BenchRepo(tool, ctx.scratch / f"{label}-{_slug(tool)}", ctx.env, ctx.chunk_size)
        s = Samples()
        _place(src, repo)
        s.record("first_add", repo.timed("add", FILE), "add")
        repo.commit("v1")
        repo.file.unlink()
        settle()
        s.record("checkout", repo.timed("checkout", "--", FILE), "checkout")
        _verify(repo, original, "checkout")
        s.extra["stored_bytes"] = repo.stored_bytes()
        if tool == MGIT:
            s.extra["chunk_size"] = repo.chunk_size()
        repo.remove()
        per_tool[tool] = s.as_json()
    result["tools"] = per_tool
    return result


def bench_series(ctx: Context, label: str, checkpoints: list[Path]) -> dict[str, object]:
    """Commit a training run's checkpoints one by one; storage and per-checkpoint add time."""
    hashes = [models.file_hash(p) for p in checkpoints]
    tools = [MGIT, LFS, PLAIN]
    repos = {
        tool: BenchRepo(tool, ctx.scratch / f"series-{_slug(tool)}", ctx.env, ctx.chunk_size)
        for tool in tools
    }
    samples = {tool: Samples() for tool in tools}
    commits: dict[str, list[str]] = {tool: [] for tool in tools}
    for i, ckpt in enumerate(checkpoints):
        log(f"series {label}: checkpoint {i + 1}/{len(checkpoints)}")
        for tool in tools:
            repo = repos[tool]
            _place(ckpt, repo)
            samples[tool].record("add", repo.timed("add", FILE), "add")
            commits[tool].append(repo.commit(f"epoch {i}"))
    for tool in tools:
        log(f"series {label}: {tool}: checking out every checkpoint")
        repo = repos[tool]
        samples[tool].extra["stored_bytes"] = repo.stored_bytes()
        for commit, expected in zip(commits[tool], hashes, strict=True):
            samples[tool].record("checkout", repo.timed("checkout", commit, "--", FILE), "checkout")
            _verify(repo, expected, f"checkout of {commit[:12]}")
        repo.remove()
    return {
        "checkpoints": len(checkpoints),
        "bytes_each": checkpoints[0].stat().st_size,
        "tools": {tool: s.as_json() for tool, s in samples.items()},
    }
