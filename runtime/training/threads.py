"""Intra-op threads: one count per run, recorded with its checkpoints, used again to resume or replay.

torch's CPU kernels split a reduction among the intra-op threads: MKL's
sgemm on two threads sums each half of a 256-row batch and adds the two
sums, so a Linear layer's weight gradient differs in its last bits from the
one a single thread computes. Runs are bit-identical only where every
process had the same count, whatever cores the machine has. So a run picks
its count once (`OMP_NUM_THREADS` if set, else the node's cores shared by
its processes), every checkpoint records it (`Info.threads`), and resuming
or replaying a checkpoint sets the recorded count whatever the environment
says (`git mgit train --resume --threads N` may change it, with a warning).
The environment variable alone is not enough: torch takes `MKL_NUM_THREADS`
first, so processes also call `torch.set_num_threads`. No torch at import:
the launchers, which never import it, use this too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

ENV = "OMP_NUM_THREADS"


def requested(environ: Mapping[str, str] = os.environ) -> int | None:
    """OMP_NUM_THREADS as a count (None: unset, or not a positive whole number)."""
    text = environ.get(ENV, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def for_new_run(processes: int, environ: Mapping[str, str] = os.environ) -> int:
    """A new run's count per process: OMP_NUM_THREADS, else this node's cores shared by
    its `processes` (torchrun's own default, 1, leaves cores idle)."""
    return requested(environ) or max(1, (os.cpu_count() or 1) // max(1, processes))


def for_recorded(
    recorded: int | None, processes: int, environ: Mapping[str, str] = os.environ
) -> int:
    """The count to resume or replay a checkpoint with: the recorded one, whatever
    OMP_NUM_THREADS says (a new run's for checkpoints from before threads were recorded)."""
    return recorded if recorded is not None else for_new_run(processes, environ)


def override(recorded: int | None, chosen: int) -> str | None:
    """The warning when a resume is told to compute on another count (None: it is not)."""
    if recorded is None or chosen == recorded:
        return None
    return (
        f"training on {chosen} thread(s) per process, not the {recorded} the checkpoint was "
        "trained with: results will differ from an uninterrupted run's in the last bits"
    )


def warn(recorded: int | None, chosen: int) -> None:
    """Print override()'s warning, if any, on stderr."""
    said = override(recorded, chosen)
    if said:
        print(f"git-mgit: warning: {said}", file=sys.stderr, flush=True)


def use(count: int) -> int:
    """Set this process's intra-op threads (OpenMP's and MKL's); returns the count."""
    import torch

    torch.set_num_threads(count)
    return count


def current() -> int:
    """The intra-op threads this process computes with now: what a checkpoint records."""
    import torch

    return torch.get_num_threads()


def spare(device: str) -> int:
    """The cores a training process leaves to its checkpoints' encoders: beside an
    accelerator, its share of the node's cores less the one its Python loop runs on; on the
    CPU, those torch does not compute on. At least one."""
    count = os.cpu_count() or 1
    if device != "cpu":
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        return max(1, count // max(1, local) - 1)
    return max(1, count - current())
