"""`--cluster [ADDRESS]` and `--jobs`: where the runtime commands run their jobs.

Not a subcommand: the option shared by test, bisect and cascade
(docs/runtime.md, "Running on a cluster").
"""

from __future__ import annotations

import argparse


def add(parser: argparse.ArgumentParser, jobs: str = "jobs that run at once") -> None:
    parser.add_argument(
        "--cluster",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on the Dask cluster whose scheduler is at ADDRESS (tcp://HOST:PORT or a "
        "scheduler file; without ADDRESS, $DASK_SCHEDULER_ADDRESS)",
    )
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        help=f"{jobs} (default: 1 here; every worker thread of a cluster)",
    )
