"""scripts/bench: git-mgit against git-lfs and plain git on the same files, same run.

Prints a report (tables, then each target with PASS/FAIL) and writes it as
JSON to bench-out/results.json. Exits 0 whatever the targets say: timings on
a shared machine are noisy, so this is a report, not a test. See
docs/benchmarks.md for what each number means.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import checkpointing
import ckpt_bench
import deltabits
import history_bench
import large_bench
import lineage_graph
import models
import phases
import planning
import query_bench
import replay_bench
import report
import scaleout_bench
import selection_bench
import stores_bench
import training
import tune_bench
from phases import Context, log
from tools import LFS, MGIT, PASSTHROUGH, PLAIN, isolated_env

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: 64 MiB files, 256 MiB memory check, 4 checkpoints, "
        "a 512 MiB large checkout, no plain git on big files, one repetition",
    )
    p.add_argument("--size-mib", type=int, help="size of the fp32 and bf16 files (default 512)")
    p.add_argument("--rss-size-mib", type=int, help="size of the memory-check file (default 2048)")
    p.add_argument("--checkpoints", type=int, help="training checkpoints to commit (default 10)")
    p.add_argument("--repeat", type=int, help="repetitions per timed step (default 3)")
    p.add_argument(
        "--checkout-repeat",
        type=int,
        help="repetitions of the checkout of a deleted file (default 7: a few seconds each, "
        "and on a VM the cost of git's page faults varies by 2x from one run to the next)",
    )
    p.add_argument(
        "--chunk-size",
        help="git config mgit.chunkSize for the bench repositories (default: git-mgit's, 64 MiB)",
    )
    p.add_argument(
        "--core-only",
        action="store_true",
        help="only the storage core sections: the fp32 and bf16 files, the memory check "
        "and the checkpoint series (about 15 minutes)",
    )
    p.add_argument(
        "--lineage-only",
        action="store_true",
        help="only the lineage graph and model query sections (10,000 versions each; "
        "about a minute)",
    )
    p.add_argument(
        "--planning-only",
        action="store_true",
        help="only the storage planning section (repack, lossy compression, planner curves)",
    )
    p.add_argument(
        "--training-only",
        action="store_true",
        help="only the checkpointing-while-training section (throughput per checkpointing "
        "mode, storage per checkpoint, hindsight replay; about 5.5 minutes, --quick under one)",
    )
    p.add_argument(
        "--selection-only",
        action="store_true",
        help="only the model selection and tuning section (MOP against task and data "
        "parallelism, tune against its kept setting from the start; about 3.5 minutes, "
        "--quick under 2)",
    )
    p.add_argument(
        "--training-checkpoints-only",
        action="store_true",
        help="only the training checkpoints section: a GPT-style decoder checkpointed by "
        "git-mgit (sync, background, adaptive) against DCP's async_save and torch.save, on a GPU "
        "when there is one (about 4 minutes), else on 2 CPU ranks (about 5, --quick 3)",
    )
    p.add_argument(
        "--scaleout-only",
        action="store_true",
        help="only the runtime scale-out section: test and cascade over a 33-model zoo on "
        "local worker processes against a 2-node Dask cluster on this machine (about 3 "
        "minutes, --quick 1)",
    )
    p.add_argument(
        "--history-only",
        action="store_true",
        help="only the history section: clone, pull, old checkout and push over 20-checkpoint "
        "series against git-lfs (about 10 minutes, --quick 4 checkpoints)",
    )
    p.add_argument(
        "--stores-only",
        action="store_true",
        help="only the stores section: git-mgit's Git LFS and S3 stores against git-lfs on "
        "giftless and SeaweedFS, on the history series, and a 1 GiB model against the stores' "
        "plain clients (--quick: 4 checkpoints, 128 MiB)",
    )
    p.add_argument(
        "--large-only",
        action="store_true",
        help="only the large checkout section: clone, checkout and warm checkouts of two "
        "versions of one big model against git-lfs, time and peak RSS of the largest process "
        "(about 15 minutes at 4096 MiB, 2 at 512)",
    )
    p.add_argument(
        "--large-size-mib",
        type=int,
        help="size of the large checkout section's model (default 4096)",
    )
    p.add_argument("--keep", action="store_true", help="keep the scratch folder, for debugging")
    p.add_argument(
        "--out", type=Path, default=ROOT / "bench-out" / "results.json", help="JSON output file"
    )
    args = p.parse_args(argv)
    defaults = (64, 256, 4, 1, 1, 512) if args.quick else (512, 2048, 10, 3, 7, 4096)
    names = (
        "size_mib",
        "rss_size_mib",
        "checkpoints",
        "repeat",
        "checkout_repeat",
        "large_size_mib",
    )
    for name, value in zip(names, defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def _family_size(args: argparse.Namespace) -> tuple[int, int]:
    """(fine-tunes, epochs each) of the planning section's family."""
    return (2, 2) if args.quick else (3, 3)


def _section_only(
    args: argparse.Namespace, name: str, data: dict, table: str, checks: list[report.Target]
) -> int:
    """A section run alone: its raw results beside results.json, its table and targets."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    (args.out.parent / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    print(table)
    for check in checks:
        print(check.line())
    return 0


def _planning_only(args: argparse.Namespace, scratch: Path) -> int:
    ctx = Context(scratch, isolated_env(scratch), 1, 1, args.chunk_size)
    data = planning.bench(
        ctx, scratch / "planning", args.out.parent, args.checkpoints, *_family_size(args)
    )
    checks = report.planning_targets(data)
    return _section_only(args, "planning", data, report.planning_table(data), checks)


def _training(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """Issue 7's section: checkpointing throughput and storage, then hindsight replay."""
    return {
        **checkpointing.bench(scratch, env, quick),
        "replay": replay_bench.bench(scratch, env, quick),
    }


def _training_only(args: argparse.Namespace, scratch: Path) -> int:
    data = _training(scratch, isolated_env(scratch), args.quick)
    checks = report.checkpointing_targets(data)
    return _section_only(args, "checkpointing", data, report.checkpointing_table(data), checks)


def _selection(scratch: Path, env: dict[str, str], quick: bool) -> dict[str, object]:
    """Model selection's section: MOP against task and data parallelism, then tune."""
    return {
        "parallelism": selection_bench.bench(scratch, env, quick),
        "tune": tune_bench.bench(scratch, env, quick),
    }


def _selection_only(args: argparse.Namespace, scratch: Path) -> int:
    data = _selection(scratch, isolated_env(scratch), args.quick)
    checks = report.selection_targets(data)
    return _section_only(args, "selection", data, report.selection_table(data), checks)


def _training_checkpoints_only(args: argparse.Namespace, scratch: Path) -> int:
    data = ckpt_bench.bench(scratch, isolated_env(scratch), args.quick)
    checks = [report.Target(*t) for t in ckpt_bench.targets(data)]
    return _section_only(args, "training_checkpoints", data, ckpt_bench.table(data), checks)


def _scaleout_only(args: argparse.Namespace, scratch: Path) -> int:
    data = scaleout_bench.bench(scratch, isolated_env(scratch), args.quick)
    checks = report.scaleout_targets(data)
    return _section_only(args, "scaleout", data, report.scaleout_table(data), checks)


def _history_only(args: argparse.Namespace, scratch: Path) -> int:
    data = history_bench.bench(scratch, isolated_env(scratch), args.quick)
    checks = report.history_targets(data)
    return _section_only(args, "history", data, report.history_table(data), checks)


def _stores_only(args: argparse.Namespace, scratch: Path) -> int:
    data = stores_bench.bench(scratch, isolated_env(scratch), args.quick)
    checks = report.stores_targets(data)
    return _section_only(args, "stores", data, report.stores_table(data), checks)


def _large_only(args: argparse.Namespace, scratch: Path) -> int:
    data = large_bench.bench(scratch, isolated_env(scratch), args.large_size_mib)
    checks = report.large_targets(data)
    return _section_only(args, "large", data, report.large_table(data), checks)


def run(args: argparse.Namespace, scratch: Path) -> dict[str, object]:
    """Every section of the benchmark; returns the raw results."""
    ctx = Context(
        scratch, isolated_env(scratch), args.repeat, args.checkout_repeat, args.chunk_size
    )
    data = scratch / "data"
    data.mkdir()
    results: dict[str, object] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": report.machine(),
    }

    files: dict[str, object] = {}
    big_tools = [MGIT, LFS] + ([] if args.quick else [PLAIN]) + [PASSTHROUGH]
    for dtype, kind in (("F32", "fp32"), ("BF16", "bf16")):
        label = f"{kind} {args.size_mib} MiB"
        src = data / f"{kind}.safetensors"
        log(f"{label}: writing the model file")
        models.write_model(src, args.size_mib * MIB, dtype)
        files[label] = phases.bench_file(ctx, label.replace(" ", "-"), src, big_tools)
        src.unlink()
    results["files"] = files

    label = f"fp32 {args.rss_size_mib} MiB"
    src = data / "big.safetensors"
    log(f"{label}: writing the model file")
    models.write_model(src, args.rss_size_mib * MIB, "F32")
    rss = phases.bench_rss(ctx, label.replace(" ", "-"), src, [MGIT, LFS])
    rss["label"] = label
    results["rss_check"] = rss
    src.unlink()

    ckpt_dir = data / "checkpoints"
    ckpt_dir.mkdir()
    log(f"series: pretraining from scratch, {args.checkpoints} epochs")
    start = time.monotonic()
    scratch_run, scratch_losses = training.train_series(ckpt_dir, args.checkpoints)
    scratch_s = time.monotonic() - start
    log(f"series: fine-tuning, {args.checkpoints} epochs")
    start = time.monotonic()
    finetune_runs, finetune_losses = training.finetune_series(ckpt_dir, args.checkpoints)
    finetune_s = time.monotonic() - start
    runs = [
        ("pretraining from scratch, fp32 (AdamW lr 1e-3)", scratch_run, scratch_losses, scratch_s),
        ("fine-tuning, fp32 (AdamW lr 5e-5)", finetune_runs["F32"], finetune_losses, finetune_s),
        ("fine-tuning, saved as bf16", finetune_runs["BF16"], finetune_losses, finetune_s),
    ]
    series: dict[str, object] = {}
    for label, checkpoints, losses, train_s in runs:
        bits, width = deltabits.change_bits(checkpoints)
        result = phases.bench_series(ctx, label, checkpoints)
        result.update(
            params=training.param_count(),
            train_s=train_s,
            losses=losses,
            change_bits=bits,
            element_bits=width,
        )
        series[label] = result
    results["series"] = series
    if not args.core_only:
        results["history"] = history_bench.bench(ctx.scratch, ctx.env, args.quick)
        results["stores"] = stores_bench.bench(ctx.scratch, ctx.env, args.quick)
        results["large"] = large_bench.bench(ctx.scratch, ctx.env, args.large_size_mib)
        _later_sections(args, ctx, data, results)

    chunk = rss["tools"][MGIT]["chunk_size"]  # type: ignore[index]
    results["settings"] = {
        "quick": args.quick,
        "repeat": args.repeat,
        "checkout_repeat": args.checkout_repeat,
        "chunk_size": chunk,
        "size_mib": args.size_mib,
        "rss_size_mib": args.rss_size_mib,
        "checkpoints": args.checkpoints,
        "large_size_mib": args.large_size_mib,
    }
    return results


def _later_sections(
    args: argparse.Namespace, ctx: Context, data: Path, results: dict[str, object]
) -> None:
    """Every section after the storage core: lineage, queries, planning, training, selection,
    the runtime's scale-out."""
    scratch = ctx.scratch
    results["lineage"] = lineage_graph.bench(scratch, ctx.env)
    results["query"] = query_bench.bench(scratch, ctx.env)
    results["planning"] = planning.bench(
        ctx, data / "planning", args.out.parent, args.checkpoints, *_family_size(args)
    )
    results["checkpointing"] = _training(scratch, ctx.env, args.quick)
    results["selection"] = _selection(scratch, ctx.env, args.quick)
    results["scaleout"] = scaleout_bench.bench(scratch, ctx.env, args.quick)
    results["training_checkpoints"] = ckpt_bench.bench(scratch, ctx.env, args.quick)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="mgit-bench-", dir="/tmp"))
    log(f"scratch folder {scratch}")
    try:
        if args.lineage_only:
            data = lineage_graph.bench(scratch, isolated_env(scratch))
            queries = query_bench.bench(scratch, isolated_env(scratch))
            checks = report.lineage_targets(data) + report.query_targets(queries)
            print(report.lineage_table(data) + "\n")
            print(report.query_table(queries))
            for check in checks:
                print(check.line())
            return 0
        if args.planning_only:
            return _planning_only(args, scratch)
        if args.training_only:
            return _training_only(args, scratch)
        if args.selection_only:
            return _selection_only(args, scratch)
        if args.scaleout_only:
            return _scaleout_only(args, scratch)
        if args.training_checkpoints_only:
            return _training_checkpoints_only(args, scratch)
        if args.history_only:
            return _history_only(args, scratch)
        if args.stores_only:
            return _stores_only(args, scratch)
        if args.large_only:
            return _large_only(args, scratch)
        results = run(args, scratch)
    finally:
        if args.keep:
            log(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    # Raw results first, so a bug in the report cannot lose a 20-minute run.
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    checks = report.targets(results)
    results["targets"] = report.as_json(checks)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(report.render(results, checks))
    log(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
