"""Replay a recorded training run with the code as edited since, in parallel, and compare metrics.

git mgit replay demo                         # the recorded module:fn, one worker per core
git mgit replay demo --jobs 4 -- python train.py
git mgit replay runs/demo~2 --epochs 3..5 -- torchrun --nproc-per-node 2 train.py

Each worker restores the checkpoint committed before its segment of epochs,
so no epoch is trained twice; their output is printed in epoch order, then
every epoch's metrics against the recording (a difference is a warning).
See docs/training.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from git_mgit.console.columns import aligned
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo

if TYPE_CHECKING:  # the runtime is imported when the command runs, not when git mgit starts
    from git_mgit.runtime.training.replay import Recording, Report, Worker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run name (branch runs/NAME) or a checkpoint commit")
    parser.add_argument(
        "argv",
        metavar="-- command",
        nargs=argparse.REMAINDER,
        help="the command that trains (default: the run's recorded module:fn)",
    )
    _options(parser)


def _options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        help="workers in parallel (default: cores / the run's processes x their threads)",
    )
    parser.add_argument(
        "--epochs", metavar="A..B", help="replay only these epochs (inclusive; A.., ..B, or A)"
    )
    parser.add_argument("--logs", metavar="DIR", help="keep each worker's output in DIR")
    parser.add_argument("--check", action="store_true", help="exit 1 if any epoch's metrics differ")
    parser.add_argument("--json", action="store_true", help="a JSON report instead of the output")
    return parser


def _command(args: argparse.Namespace) -> list[str]:
    """The command after `--`; options between RUN and `--` (which argparse's remainder
    swallows) are parsed here. A `--` right after RUN argparse has already dropped."""
    rest = list(args.argv)
    if "--" in rest:
        cut = rest.index("--")
    elif rest[:1] and rest[0].startswith("-"):
        cut = len(rest)  # options, no command
    else:
        return rest
    if cut:
        _options(argparse.ArgumentParser(prog="git mgit replay RUN")).parse_args(
            rest[:cut], namespace=args
        )
    return rest[cut + 1 :]


def epochs(text: str | None) -> tuple[int | None, int | None]:
    """`A..B`, `A..`, `..B` or `A` as (first, last), inclusive."""
    if text is None:
        return None, None
    first, sep, last = text.partition("..")
    try:
        a = int(first) if first else None
        b = int(last) if last else None
    except ValueError:
        raise MgitError(
            f"--epochs {text!r}: expected A..B, A.., ..B or A (epoch numbers)"
        ) from None
    return (a, b) if sep else (a, a)


def run(args: argparse.Namespace) -> int:
    from git_mgit.console.progress import Progress
    from git_mgit.gitcmd import find_repo
    from git_mgit.runtime.training import replay

    command = _command(args)
    first, last = epochs(args.epochs)
    req = replay.Request(args.run, command, args.jobs, first, last)
    repo = find_repo()
    workdir = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="mgit-replay-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        progress = Progress("replaying epochs", counting=True)

        def started(rec: Recording, workers: list[Worker]) -> None:
            progress.total = sum(w.segment.last - w.segment.first + 1 for w in workers)
            _announce(repo, rec, workers)

        report = replay.replay(
            repo, req, workdir, started, lambda n: progress.update(n - progress.done)
        )
        progress.finish()
        if args.json:
            print(json.dumps(_as_json(report), indent=2))
        else:
            _show(report)
    finally:
        if not args.logs:
            shutil.rmtree(workdir, ignore_errors=True)
    for e in report.diverged:
        why = (
            "; ".join(e.differences)
            or "its worker recorded no metrics at its end (no ckpt.save()?)"
        )
        print(
            f"git-mgit: warning: epoch {e.epoch} differs from the recording: {why}", file=sys.stderr
        )
    for w in report.failed:
        seg = w.segment
        print(
            f"git-mgit: the worker replaying epochs {seg.first}..{seg.last} failed "
            f"(exit {w.returncode}); its output is above",
            file=sys.stderr,
        )
    return 1 if report.failed or (args.check and report.diverged) else 0


def _announce(repo: Repo, rec: Recording, workers: list[Worker]) -> None:
    first, last = workers[0].segment.first, workers[-1].segment.last
    say = [f"replaying {rec.info.run}: epochs {first}..{last} in {len(workers)} worker(s)"]
    for w in workers:
        seg = w.segment
        where = "the run's start"
        if seg.resume is not None:
            where = f"{seg.resume[:10]} (epoch {seg.first - 1} end)"
        say.append(f"  epochs {seg.first}..{seg.last} from {where}")
    code = rec.info.code
    if code:
        changed = repo.git("diff", "--shortstat", code, check=False).strip()
        say.append(
            f"code: the working tree; since the recorded {code[:10]}: {changed or 'no change'}"
        )
    print("\n".join(say), file=sys.stderr)


def _show(report: Report) -> None:
    out = sys.stdout
    for w in report.workers:
        seg = w.segment
        out.write(f"== epochs {seg.first}..{seg.last} ==\n")
        out.flush()
        with open(w.log, "rb") as log:
            shutil.copyfileobj(log, out.buffer)
        out.buffer.flush()
    rows = [("epoch", "step", "recorded", "replayed")]
    for e in report.epochs:
        recorded = _metrics(e.recorded.metrics) if e.recorded else "(no checkpoint)"
        if e.replayed is None:
            replayed = "(not replayed)"
        else:
            replayed = "identical" if not e.differences else "DIFFERS: " + _metrics(e.replayed[1])
        step = e.replayed[0].global_step if e.replayed else ""
        rows.append((str(e.epoch), str(step), recorded, replayed))
    out.write("".join(line + "\n" for line in aligned(rows)))
    times = [w.seconds for w in report.workers]
    same = (
        "every epoch identical to the recording"
        if not report.diverged
        else (f"{len(report.diverged)} epoch(s) differ")
    )
    out.write(
        f"replayed {len(report.epochs)} epoch(s) in {report.seconds:.1f} s with "
        f"{len(times)} worker(s) (each {min(times):.1f}-{max(times):.1f} s, "
        f"{sum(times):.1f} s in all); {same}\n"
    )


def _metrics(metrics: dict) -> str:
    return " ".join(
        f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(metrics.items())
    )


def _as_json(report: Report) -> dict:
    return {
        "run": report.recording.info.run,
        "seconds": report.seconds,
        "workers": [
            {
                "first": w.segment.first,
                "last": w.segment.last,
                "resume": w.segment.resume,
                "seconds": w.seconds,
                "exit": w.returncode,
            }
            for w in report.workers
        ],
        "epochs": [
            {
                "epoch": e.epoch,
                "recorded": e.recorded.metrics if e.recorded else None,
                "replayed": e.replayed[1] if e.replayed else None,
                "global_step": e.replayed[0].global_step if e.replayed else None,
                "identical": not e.differences and e.replayed is not None,
                "differences": e.differences,
            }
            for e in report.epochs
        ],
    }
