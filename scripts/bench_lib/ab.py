"""A/B timing of two revisions: one command, run by each in turn, medians at the end.

    scripts/ab [--rounds N] REV_A REV_B -- COMMAND [ARG...]

Each revision gets a tree of its own (`git archive`), with its C kernels
built in place: a tree without them silently runs the numpy kernels, and
every encode and decode in it is slower (docs/benchmarks.md, "A
correction"). The script checks that each tree loads its kernels before it
times anything. COMMAND then runs 2 x N times, the two trees taking turns
(A B, B A, ...) so that a slow minute of a shared machine slows both; it
runs with PYTHONPATH set to the tree (git's hooks and filter processes
inherit it) and AB_SIDE set to `a` or `b`, in the directory scripts/ab
was started from, which must not hold a `git_mgit/` folder (Python would
import that one, not the tree). Set a fresh repository or remote up inside
COMMAND: nothing is reset between runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tree(rev: str, dest: Path) -> Path:
    """`rev`'s sources at dest, kernels built, byte-compiled; fails if the kernels do not load."""
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=dest,
        check=True,
        capture_output=True,
    )
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "git_mgit")], check=True)
    probe = "from git_mgit.codecs import planes; import git_mgit; print(planes.native(), git_mgit.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(dest)},
        cwd=tempfile.gettempdir(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if out != ["True", str(dest / "git_mgit" / "__init__.py")]:
        raise SystemExit(f"ab: the tree of {rev} does not load its own kernels: {out}")
    return dest


def report(times: dict[str, list[float]], rev_a: str, rev_b: str, sort: bool = False) -> None:
    """Each side's median and its times (sorted, or in the order they ran)."""
    for side, rev in (("a", rev_a), ("b", rev_b)):
        ts = sorted(times[side]) if sort else times[side]
        runs = " ".join(f"{t:.3f}" for t in ts)
        print(f"{side} ({rev}): median {statistics.median(ts):.3f} s of {runs}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs per revision (default 5)")
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to time after --")
    cwd = Path(os.environ.get("AB_CWD", os.getcwd()))
    if (cwd / "git_mgit").is_dir():
        parser.error(f"run it outside a source tree: {cwd / 'git_mgit'} would be imported")
    scratch = Path(tempfile.mkdtemp(prefix="mgit-ab-"))
    try:
        sides = {"a": tree(args.a, scratch / "a"), "b": tree(args.b, scratch / "b")}
        times: dict[str, list[float]] = {"a": [], "b": []}
        for i in range(args.rounds):
            for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                env = {**os.environ, "PYTHONPATH": str(sides[side]), "AB_SIDE": side}
                began = time.perf_counter()
                subprocess.run(command, env=env, cwd=cwd, check=True)
                times[side].append(time.perf_counter() - began)
            print(f"round {i + 1}: a {times['a'][-1]:.3f} s, b {times['b'][-1]:.3f} s", flush=True)
        report(times, args.a, args.b, sort=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
