"""`git mgit tune` against training with the setting it finds from the start.

The workload is docs/tuning.md's example, verbatim: a classifier trained by
SGD with momentum, one mini-batch a clock, a learning-rate grid in which one
rate is clearly best and 1000 overflows. Three runs of the real command,
each timed end to end (process start included), each committing a
checkpoint per epoch:

- `tune`: the documented TUNABLES.toml (re-tuning on a plateau);
- `tune, no re-tuning`: the same with `retune = false`: the first tuning's
  overhead alone;
- `from the start`: the rate tune kept, alone (`lr = [best]`, no
  re-tuning): training with that setting from the start.

In this process, each rate of the grid is also trained alone for the whole
budget: the sweep that says which rate is best, so that the bench checks
tune found it. (The documented budget: over four times as many clocks 0.01
overtakes 0.1, and the re-tuning at the plateau does not switch to it.)
`git mgit gc --prune now` after the tune runs reports what the pruned
trials held. Runs use one torch thread (the model is tiny).

    python scripts/bench_lib/tune_bench.py [--quick] [--json]
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from phases import log
from tools import MGIT, BenchRepo, run_alone

from git_mgit.console.columns import aligned

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tuning.md"
RUNS = {
    "tune": "tune",
    "once": "tune, no re-tuning",
    "start": "from the start",
}


def _documented(lang: str, caption: str) -> str:
    text = DOCS.read_text()
    found = re.search(rf"```{lang}\n(.*?)```", text[text.index(caption) :], re.S)
    if found is None:
        raise SystemExit(f"bench: docs/tuning.md has no {lang} block after {caption}")
    return found.group(1)


def _tune(repo: BenchRepo, env: dict[str, str], toml: str, name: str) -> tuple[float, dict]:
    (repo.path / f"{name}.toml").write_text(toml)
    cmd = ["git", "mgit", "tune", "--tunables", f"{name}.toml", "--name", name, "--json"]
    began = time.monotonic()
    done = subprocess.run(
        [*cmd, "tune_demo:workload"], cwd=repo.path, env=env, capture_output=True, text=True
    )
    seconds = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"git mgit tune ({name}) failed: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def _sweep(repo: Path, toml: str) -> dict[str, dict[str, float]]:
    """Each rate of the grid trained alone for the budget, in this process: final metrics."""
    import torch

    torch.set_num_threads(1)
    clocks = int(re.search(r"clocks = (\d+)", toml)[1])  # type: ignore[index]
    rates = json.loads(re.search(r"lr = (\[.*\])", toml)[1])  # type: ignore[index]
    sys.path.insert(0, str(repo))
    try:
        import tune_demo  # type: ignore[import-not-found]

        out = {}
        for lr in rates:
            torch.manual_seed(0)  # as `git mgit tune --seed 0` does before workload()
            w = tune_demo.workload()
            opt = w.optimizer(w.model, {"lr": lr})
            for clock in range(clocks):
                w.step(w.model, opt, clock, {"lr": lr})
            out[repr(lr)] = w.evaluate(w.model)
        return out
    finally:
        sys.path.remove(str(repo))


def bench(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """Time tune, tune without re-tuning and the kept rate from the start; sweep the grid."""
    env = {**env, "OMP_NUM_THREADS": "1"}
    repeats = 1 if quick else 3
    repo = BenchRepo(MGIT, scratch / "tune", env, None)
    (repo.path / "tune_demo.py").write_text(_documented("python", "`tune_demo.py`"))
    repo.git("add", "tune_demo.py")
    repo.git("commit", "-q", "-m", "tuning workload")
    toml = _documented("toml", "`TUNABLES.toml`")
    once = toml.replace("[tune]\n", "[tune]\nretune = false\n")
    runs: dict[str, dict] = {}
    for turn in range(repeats):  # the three take turns, so a noisy neighbour slows them all
        for key, text in (("tune", toml), ("once", once), ("start", None)):
            if text is None:
                best = runs["tune"]["summary"]["rounds"][0]["kept"]
                lr = runs["tune"]["summary"]["rounds"][0]["trials"][best]["tunables"]["lr"]
                text = re.sub(r"lr = \[.*\]", f"lr = [{lr!r}]", once)
            log(f"tune: {RUNS[key]} ({turn + 1}/{repeats})")
            seconds, summary = _tune(repo, env, text, f"{key}-{turn}")
            entry = runs.setdefault(key, {"wall_s": [], "tuning_s": [], "summary": summary})
            entry["wall_s"].append(seconds)
            entry["tuning_s"].append(summary["tuning_seconds"])
    gc = repo.git("mgit", "gc", "--prune", "now").strip().splitlines()[-1]
    log("tune: the grid's rates trained alone for the budget")
    sweep = _sweep(repo.path, toml)
    return {"runs": runs, "sweep": sweep, "gc": gc, "repeats": repeats}


def _row(label: str, run: dict, start: float) -> list[str]:
    s, wall = run["summary"], statistics.median(run["wall_s"])
    first = s["rounds"][0]
    metrics = s["metrics"]
    return [
        label,
        repr(s["tunables"]["lr"]),
        str(len(s["rounds"])),
        str(s["clocks"]),
        str(s["trial_clocks"]),
        str(s["pruned_clocks"]),
        f"{statistics.median(run['tuning_s']):.1f}",
        f"{wall:.1f}",
        f"{100 * (wall - start) / start:+.0f}%",
        f"{metrics['test_loss']:.4f}",
        f"{metrics['accuracy']:.4f}",
        ", ".join(map(str, first["trial_times"])),
    ]


def table(result: dict) -> str:
    runs = result["runs"]
    head = ["run", "lr", "rounds", "clocks", "trial clocks", "pruned", "tuning s", "wall s"]
    rows = [[*head, "overhead", "test_loss", "accuracy", "round 1 trial times"]]
    start = statistics.median(runs["start"]["wall_s"])
    rows += [_row(RUNS[k], runs[k], start) for k in RUNS]
    lines = aligned(rows)
    sweep = result["sweep"]
    best = min(sweep, key=lambda lr: _finite(sweep[lr]["test_loss"]))
    lines.append(
        "each rate alone for the budget: "
        + ", ".join(f"lr={lr} test_loss={m['test_loss']:.4g}" for lr, m in sweep.items())
        + f"; best lr={best}"
    )
    lines.append(f"seconds: median of {result['repeats']} run(s); gc after them: {result['gc']}")
    return "\n".join(lines)


def _finite(value: float) -> float:
    return value if value == value else float("inf")


def targets(result: dict) -> list[tuple[str, bool, str]]:
    """tune keeps the rate the whole-budget sweep finds best; without re-tuning, its model
    is the one that rate trains from the start (same final metrics). (name, passed, measured)"""
    runs, sweep = result["runs"], result["sweep"]
    best = min(sweep, key=lambda lr: _finite(sweep[lr]["test_loss"]))
    kept = runs["tune"]["summary"]["rounds"][0]
    chosen = kept["trials"][kept["kept"]]["tunables"]["lr"]
    once, start = runs["once"]["summary"]["metrics"], runs["start"]["summary"]["metrics"]
    walls = {k: statistics.median(runs[k]["wall_s"]) for k in RUNS}
    overhead = ", ".join(
        f"{RUNS[k]} {walls[k]:.1f} s ({100 * (walls[k] / walls['start'] - 1):+.0f}%)"
        for k in ("tune", "once")
    )
    return [
        (
            "tune keeps the best learning rate",
            repr(chosen) == best,
            f"kept lr={chosen!r}; each rate trained alone for the budget finds lr={best} best; "
            f"wall time against lr={chosen!r} from the start ({walls['start']:.1f} s): {overhead}",
        ),
        (
            "tune without re-tuning ends where the kept rate from the start ends",
            once == start,
            f"test_loss {once['test_loss']:.4f} and {start['test_loss']:.4f}",
        ),
    ]


if __name__ == "__main__":
    os.environ.setdefault("GIT_MGIT_NO_PROGRESS", "1")
    sys.exit(run_alone(__doc__, bench, table, targets))
