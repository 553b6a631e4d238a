"""Training checkpoints at the speed of the hardware (issue 28): git-mgit's checkpointer against
DCP's async_save and torch.save, in the same run, at the same steps.

A GPT-style decoder (GPT-2 medium's shape on a GPU: 354M parameters, bf16
autocast, AdamW with fp32 state, a 4.2 GB checkpoint; a 5M-parameter one on
two CPU ranks under DDP otherwise) trains on random tokens; every mode runs
in the same process(es), from the same seed, checkpointing every N steps,
each into a fresh repository or folder (a second run into the same
repository would find its objects stored). ckpt_worker.py is one rank.

Columns: the loop's stall per checkpoint (the first, then the median of the
rest; devices synchronised around it, so a GPU copy counts), the loop's
overhead against `off`, what one checkpoint costs the loop and so the
overhead at one checkpoint every 30 s of training, commit throughput (raw
state over the time from the call to the commit's end), bytes stored per
checkpoint against DCP's bytes on disk, and peak host memory per rank above
what the rank held before the mode began. On the CPU: also the object
writer's GB/s on 1 and 2 cores.

`python scripts/bench_lib/ckpt_bench.py [--quick] [--json]` runs it alone.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from phases import log
from tools import MGIT, BenchRepo, run_alone

HERE = Path(__file__).resolve().parent
MODES = ("off", "sync", "background", "adaptive", "dcp", "torch.save")
OURS = ("sync", "background", "adaptive")
INTERVAL = 30.0  # seconds of training between checkpoints, for the overhead target
GB = 1e9
TIMEOUT_ENV = "GIT_MGIT_BENCH_TIMEOUT"  # seconds the training job may take (default an hour)


def _spec(gpu: bool, quick: bool) -> dict[str, Any]:
    if gpu:  # GPT-2 medium: 354M parameters with the head tied to the embedding
        model = {"d": 1024, "layers": 24, "heads": 16, "vocab": 50304, "ctx": 1024}
        # every 80 steps: about 5 s of training, longer than a commit takes, as in real runs
        # (at a shorter interval the loop waits for the last commit: --max-pending)
        loop = {"batch": 8, "steps": 60 if quick else 240, "every": 20 if quick else 80}
        return {"model": model, **loop, "warmup": 3, "bf16": True, "threads": 8, "ranks": 1}
    model = {"d": 256, "layers": 4, "heads": 4, "vocab": 8192, "ctx": 128}
    loop = {"batch": 8, "steps": 12 if quick else 30, "every": 4 if quick else 10}
    return {"model": model, **loop, "warmup": 2, "bf16": False, "threads": 1, "ranks": 2}


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def bench(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, Any]:
    """Every mode in one job (one process per rank), each into its own repository or folder."""
    gpu = _gpu()
    spec = _spec(gpu, quick)
    root = scratch / "ckpt28"
    out = root / "out"
    out.mkdir(parents=True)
    folders = {}
    for mode in MODES:
        path = root / mode.replace(".", "-")
        if mode in OURS:
            BenchRepo(MGIT, path, env, None)
        else:
            path.mkdir()
        folders[mode] = str(path)
    spec.update(modes=list(MODES), folders=folders, out=str(out))
    if not gpu:
        spec["throughput_cores"] = [1, 2]
        size = 256 if quick else 512  # 0.1 or 0.4 GB of state
        spec["throughput_model"] = {"d": size, "layers": 8, "heads": 8, "vocab": 8192, "ctx": 64}
        repos = {str(n): BenchRepo(MGIT, root / f"writer-{n}", env, None) for n in (1, 2)}
        spec["throughput_repos"] = {n: str(r.path) for n, r in repos.items()}
    (root / "spec.json").write_text(json.dumps(spec))
    worker = [str(HERE / "ckpt_worker.py"), str(root / "spec.json")]
    if spec["ranks"] > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc-per-node", str(spec["ranks"]), *worker]
    else:
        cmd = [sys.executable, *worker]
    log(
        f"training checkpoints: {len(MODES)} modes on {spec['ranks']} rank(s), "
        f"{'GPU' if gpu else 'CPU'}"
    )
    proc = subprocess.Popen(
        cmd,
        env={**env, "OMP_NUM_THREADS": str(spec["threads"])},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped whole on a timeout
    )
    try:
        _, err = proc.communicate(timeout=float(os.environ.get(TIMEOUT_ENV, "3600")))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        raise RuntimeError(f"training checkpoints bench timed out:\n{err[-6000:]}") from None
    if proc.returncode:
        raise RuntimeError(f"training checkpoints bench failed:\n{err[-6000:]}")
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]
    return {"spec": spec, "gpu": gpu, "ranks": ranks, "summary": summarize(ranks)}


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: the numbers the table shows, over all ranks (the slowest rank's times)."""
    by_mode: dict[str, list[dict]] = {}
    for r in ranks:
        for m in r["modes"]:
            by_mode.setdefault(m["mode"], []).append(m)
    off = max(m["loop_s"] for m in by_mode["off"])
    raw = by_mode["off"][0]["raw_bytes"]  # one replica of the state (DDP) or the whole
    copy_s = by_mode["off"][0]["pinned_copy_s"]
    out: dict[str, Any] = {"raw_bytes": raw, "pinned_copy_s": copy_s, "off_loop_s": off}
    out["params"] = by_mode["off"][0]["params"]
    out["world"] = len(ranks)
    modes = {}
    for mode, per_rank in by_mode.items():
        n = max(m["checkpoints"] for m in per_rank)
        loop = max(m["loop_s"] for m in per_rank)
        first = max((m["stalls_s"][0] for m in per_rank if m["stalls_s"]), default=None)
        steady = [s for m in per_rank for s in m["stalls_s"][1:]]
        commit = _median(list(per_rank[0]["commit_s"]))
        stored = [
            sum(m["stored_bytes"][i] for m in per_rank if len(m["stored_bytes"]) > i)
            for i in range(max(len(m["stored_bytes"]) for m in per_rank))
        ]
        cost = (loop - off) / n if n else 0.0
        modes[mode] = {
            "checkpoints": n,
            "loop_s": loop,
            "drain_s": max(m["drain_s"] for m in per_rank),
            "stall_first_s": first,
            "stall_steady_s": max(steady) if len(steady) == 1 else _median(steady),
            "overhead": loop / off - 1,
            "cost_per_checkpoint_s": cost,
            "overhead_at_interval": max(cost, 0.0) / INTERVAL,
            "commit_s": commit,
            "commit_gb_s": raw / commit / GB if commit else None,
            "stored_per_checkpoint": _median(stored) if stored else None,
            "stored_first": stored[0] if stored else None,
            "peak_rss_rise": max(m["rss_peak"] - m["rss_base"] for m in per_rank),
            "peak_rss": max(m["rss_peak"] for m in per_rank),
            "commits": [_commit_line(w) for w in per_rank[0].get("writer_stats", [])],
        }
    out["modes"] = modes
    tp = next((r["throughput"] for r in ranks if "throughput" in r), None)
    if tp:
        out["throughput"] = [
            {**t, "gb_s": t["raw"] / t["wall_s"] / GB, "gb_per_cpu_s": t["raw"] / t["cpu_s"] / GB}
            for t in tp
        ]
    return out


def _commit_line(stats: dict[str, Any]) -> str:
    """Where one of rank 0's commits spent its time (seconds from its start), and its work."""
    p = stats["phases"]
    marks = ("encoded", "finished", "anchored", "gathered", "committed")
    return (
        ", ".join(f"{m} {p[m]:.2f}" for m in marks if m in p)
        + f" s; encoders {stats['encoder_cpu_s']:.1f} CPU s; {stats['objects']} objects, "
        f"{stats['deltas']} deltas, {stats['stored'] / GB:.3f} GB"
    )


def _cell(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def table(data: dict[str, Any]) -> str:
    s, spec = data["summary"], data["spec"]
    where = data["ranks"][0].get("gpu") or f"CPU, {s['world']} ranks (DDP)"
    model = spec["model"]
    lines = [
        f"## training checkpoints: GPT {model['layers']}x{model['d']} ({s['params'] / 1e6:.0f}M "
        f"parameters), AdamW, {s['raw_bytes'] / GB:.2f} GB of state; {where}; a checkpoint every "
        f"{spec['every']} of {spec['steps']} steps",
        "",
    ]
    if s["pinned_copy_s"]:
        lines += [
            f"pinned copy of the state: {s['pinned_copy_s']:.3f} s "
            f"({s['raw_bytes'] / s['pinned_copy_s'] / GB:.1f} GB/s)",
            "",
        ]
    lines += [
        "| mode | stall first (s) | stall steady (s) | loop (s) | overhead | per checkpoint (s) "
        f"| overhead, every {INTERVAL:.0f} s | commit (s) | commit GB/s | stored / checkpoint "
        "| peak RSS rise / rank |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        m = s["modes"].get(mode)
        if m is None:
            continue
        stored = m["stored_per_checkpoint"]
        lines.append(
            f"| {mode} | {_cell(m['stall_first_s'], '.3f')} | {_cell(m['stall_steady_s'], '.3f')} "
            f"| {m['loop_s']:.1f} | {m['overhead']:+.1%} | {m['cost_per_checkpoint_s']:.2f} "
            f"| {m['overhead_at_interval']:.1%} | {_cell(m['commit_s'], '.2f')} "
            f"| {_cell(m['commit_gb_s'], '.2f')} "
            f"| {'-' if stored is None else f'{stored / GB:.3f} GB'} "
            f"| {m['peak_rss_rise'] / GB:.2f} GB |"
        )
    for mode in OURS:
        commits = s["modes"].get(mode, {}).get("commits", [])
        if commits:
            lines += ["", f"{mode}, rank 0's commits (seconds from each one's start):"]
            lines += [f"- {i}: {c}" for i, c in enumerate(commits, 1)]
    for t in s.get("throughput", []):
        lines.append("")
        lines.append(
            f"object writer, {t['cores']} core(s): {t['raw'] / GB:.2f} GB in {t['wall_s']:.2f} s = "
            f"{t['gb_s']:.2f} GB/s ({t['gb_s'] / t['cores']:.2f} GB/s per core; "
            f"{t['gb_per_cpu_s']:.2f} GB per CPU second)"
        )
    return "\n".join(lines)


def targets(data: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Issue 28's targets (on a GPU machine; on the CPU the numbers are reported only)."""
    s = data["summary"]
    bg, dcp = s["modes"]["background"], s["modes"]["dcp"]
    if not data["gpu"]:
        tp = {t["cores"]: t for t in s.get("throughput", [])}
        scale = tp[2]["gb_s"] / tp[1]["gb_s"] if 1 in tp and 2 in tp else 0.0
        return [
            (
                "training checkpoints (CPU): object writer GB/s on 2 cores against 1",
                scale > 1.0,
                f"{scale:.2f}x ({tp.get(1, {}).get('gb_s', 0):.2f} -> "
                f"{tp.get(2, {}).get('gb_s', 0):.2f} GB/s)",
            )
        ]
    copy_s = s["pinned_copy_s"]
    worst = max(bg["stall_first_s"] or 0, bg["stall_steady_s"] or 0)
    stored, dcp_stored = bg["stored_per_checkpoint"] or 0, dcp["stored_per_checkpoint"] or 0
    return [
        (
            "stall per checkpoint <= 2x the pinned copy, the first included",
            worst <= 2 * copy_s,
            f"first {bg['stall_first_s']:.3f} s, steady {bg['stall_steady_s']:.3f} s vs copy "
            f"{copy_s:.3f} s",
        ),
        (
            "commit throughput >= 2 GB/s of raw state",
            (bg["commit_gb_s"] or 0) >= 2.0,
            f"{_cell(bg['commit_gb_s'], '.2f')} GB/s ({bg['commit_s']:.2f} s a checkpoint)",
        ),
        (
            f"background overhead <= 3% with a checkpoint every {INTERVAL:.0f} s, and <= DCP's",
            bg["overhead_at_interval"] <= 0.03
            and bg["overhead_at_interval"] <= dcp["overhead_at_interval"],
            f"{bg['overhead_at_interval']:.2%} vs DCP async_save {dcp['overhead_at_interval']:.2%}",
        ),
        (
            "bytes stored per checkpoint <= DCP's on disk",
            0 < stored <= dcp_stored,
            f"{stored / GB:.3f} GB vs {dcp_stored / GB:.3f} GB",
        ),
    ]


if __name__ == "__main__":
    sys.exit(run_alone(__doc__, bench, table, targets))
