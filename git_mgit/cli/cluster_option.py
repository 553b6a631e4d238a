"""`--cluster [ADDRESS]` and `--jobs`: where the runtime commands run their jobs.

Not a subcommand: the options shared by test, bisect, cascade, query and select
(docs/runtime.md, "Running on a cluster").
"""

from __future__ import annotations

import argparse


def add(parser: argparse.ArgumentParser, jobs: str | None = "jobs that run at once") -> None:
    """--cluster, and --jobs described as `jobs` (None: no --jobs)."""
    parser.add_argument(
        "--cluster",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on the Dask cluster whose scheduler is at ADDRESS (tcp://HOST:PORT or a "
        "scheduler file; without ADDRESS, $DASK_SCHEDULER_ADDRESS)",
    )
    if jobs is None:
        return
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        help=f"{jobs} (default: 1 here; every worker thread of a cluster)",
    )
