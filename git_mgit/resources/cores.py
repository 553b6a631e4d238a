"""How many cores git-mgit's own threads (encoding, hashing) may use in this process.

All of them by default: a `git add` should finish as fast as it can. A
training loop that commits checkpoints in the background gives those
commits only the cores torch does not compute on, so that a commit beside
the loop slows it as little as it can (runtime/training/checkpointer.py).
"""

from __future__ import annotations

import os

_limit: int | None = None


def available() -> int:
    """Threads git-mgit's parallel work may run on now."""
    return _limit or os.cpu_count() or 1


def limit(cores: int | None) -> int | None:
    """Cap the threads (None: no cap); returns the cap before, to put back."""
    global _limit
    before, _limit = _limit, None if cores is None else max(1, cores)
    return before
