"""The systems under test, each in its own throw-away repository.

Every repository runs with an isolated git configuration (no system or user
config), so a developer's own settings cannot change the numbers. Filter
processes are started through rss_wrap.py, which logs each one's peak RSS;
git-mgit, git-lfs and the passthrough filter pay the same few milliseconds
for it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rss_wrap import LOG_ENV

from git_mgit.config import DEFAULT_CHUNK_SIZE

HERE = Path(__file__).resolve().parent
MGIT = "git-mgit"
LFS = "git-lfs"
PLAIN = "plain git"
PASSTHROUGH = "passthrough"
FILE = "model.safetensors"


def isolated_env(scratch: Path) -> dict[str, str]:
    """Environment for every git call: a private global config, no system config."""
    config = scratch / "gitconfig"
    config.write_text(
        "[user]\n\tname = bench\n\temail = bench@example.invalid\n"
        "[init]\n\tdefaultBranch = main\n"
        "[advice]\n\tdetachedHead = false\n"
    )
    env = dict(os.environ)
    env.update(
        GIT_CONFIG_GLOBAL=str(config),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_MGIT_NO_PROGRESS="1",
        LC_ALL="C",
    )
    return env


def _wrapped(*argv: str) -> str:
    """A filter.<driver>.process command line that runs argv under rss_wrap.py."""
    cmd = [sys.executable, "-I", "-S", str(HERE / "rss_wrap.py"), *argv]
    return " ".join(shlex.quote(a) for a in cmd)


def _which(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"bench: {name} is not on PATH")
    return path


RSS_FIELDS = ("peak", "process", "children")


@dataclass
class Timed:
    seconds: float
    # Of the filter process(es) git started, as rss_wrap.py logs them; None if
    # no filter ran: peak RSS (keys RSS_FIELDS) and CPU seconds.
    rss_kib: dict[str, int] | None
    filter_cpu_s: float | None


class BenchRepo:
    """One tool's repository: runs git in it, timed or not, and measures what it stores."""

    def __init__(self, tool: str, path: Path, env: dict[str, str], chunk_size: str | None) -> None:
        self.tool, self.path, self.env = tool, path, env
        self.file = path / FILE
        self._rss_log = path.parent / f".{path.name}.rss"
        path.mkdir(parents=True)
        self.git("init", "-q")
        if tool == MGIT:
            self.git("mgit", "install", "--local")
            self.git("mgit", "track", "*.safetensors")
            self.git("config", "filter.mgit.process", _wrapped(_which(MGIT), "filter-process"))
            if chunk_size is not None:
                self.git("config", "mgit.chunkSize", chunk_size)
        elif tool == LFS:
            self.git("lfs", "install", "--local")
            self.git("lfs", "track", "*.safetensors")
            self.git("config", "filter.lfs.process", _wrapped(_which(LFS), "filter-process"))
        elif tool == PASSTHROUGH:
            script = HERE / "passthrough_filter.py"
            self.git("config", "filter.passthrough.process", _wrapped(sys.executable, str(script)))
            self.git("config", "filter.passthrough.required", "true")
            # Store blobs uncompressed: the ceiling then holds only what every
            # filter process costs git, not zlib inflating a 512 MiB blob.
            self.git("config", "core.compression", "0")
            (path / ".gitattributes").write_text("*.safetensors filter=passthrough -text\n")
        if (path / ".gitattributes").exists():
            self.git("add", ".gitattributes")
            self.git("commit", "-q", "-m", "track")

    def git(self, *args: str) -> str:
        """Run git here; a failure stops the benchmark with git's own message."""
        proc = subprocess.run(
            ["git", *args], cwd=self.path, env=self.env, capture_output=True, text=True
        )
        if proc.returncode:
            raise RuntimeError(
                f"{self.tool}: `git {' '.join(args)}` failed ({proc.returncode}):\n{proc.stderr}"
            )
        return proc.stdout

    def timed(self, *args: str) -> Timed:
        """Wall time of one git command, and the peak RSS of any filter process it ran."""
        self._rss_log.unlink(missing_ok=True)
        env = {**self.env, LOG_ENV: str(self._rss_log)}
        start = time.perf_counter()
        proc = subprocess.run(["git", *args], cwd=self.path, env=env, capture_output=True)
        seconds = time.perf_counter() - start
        if proc.returncode:
            raise RuntimeError(
                f"{self.tool}: `git {' '.join(args)}` failed ({proc.returncode}):\n"
                + proc.stderr.decode(errors="replace")
            )
        if not self._rss_log.exists():
            return Timed(seconds, None, None)
        rows = [line.split() for line in self._rss_log.read_text().splitlines()]
        rss = {key: max(int(row[i]) for row in rows) for i, key in enumerate(RSS_FIELDS)}
        return Timed(seconds, rss, sum(float(row[len(RSS_FIELDS)]) for row in rows))

    def commit(self, message: str) -> str:
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()

    def chunk_size(self) -> int:
        """The chunk size git-mgit uses in this repository (git config mgit.chunkSize)."""
        out = self.git(
            "config", "--type=int", "--default", str(DEFAULT_CHUNK_SIZE), "mgit.chunkSize"
        )
        return int(out)

    def stored_bytes(self) -> int:
        """Bytes the repository holds: git's object database, plus git-lfs's own store."""
        counts = dict(line.split(": ", 1) for line in self.git("count-objects", "-v").splitlines())
        total = (int(counts["size"]) + int(counts["size-pack"])) * 1024
        lfs = self.path / ".git" / "lfs" / "objects"
        if lfs.is_dir():
            total += sum(p.stat().st_size for p in lfs.rglob("*") if p.is_file())
        return total

    def remove(self) -> None:
        shutil.rmtree(self.path)
        self._rss_log.unlink(missing_ok=True)


def run_alone(
    doc: str,
    bench: Callable[[Path, dict[str, str], bool], dict],
    table: Callable[[dict], str],
    targets: Callable[[dict], list[tuple[str, bool, str]]],
) -> int:
    """A bench section run on its own (`python scripts/bench_lib/X.py [--quick] [--json]`):
    its table and targets, or its raw results."""
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run each, not the median")
    parser.add_argument("--json", action="store_true", help="the raw results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        scratch = Path(tmp)
        result = bench(scratch, isolated_env(scratch), args.quick)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return 0
    print(table(result))
    for name, passed, measured in targets(result):
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {measured}")
    return 0
