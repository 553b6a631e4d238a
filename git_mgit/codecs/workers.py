"""Threads shared by encoding and decoding.

zstd, BLAKE3, the C kernels and numpy release the GIL, so threads scale on
the work that matters. Jobs on the pool never submit to it again, so two
workers cannot deadlock waiting for each other.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from git_mgit.resources import cores

T = TypeVar("T")
U = TypeVar("U")

POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="mgit-codec")


def stop() -> None:
    """End the pool's threads once the jobs under way are done (queued ones are dropped):
    a process about to exit then has no thread of the pool's left running."""
    POOL.shutdown(wait=True, cancel_futures=True)


def parallel_map(fn: Callable[[U], T], items: Iterable[U]) -> list[T]:
    """fn over items on the pool, on no more threads at once than git-mgit's cores."""
    return list(ordered((functools.partial(fn, x) for x in items), cores.available()))


def ordered(jobs: Iterable[Callable[[], T]], ahead: int) -> Iterator[T]:
    """Run jobs on the pool with at most `ahead` in flight; results in job order.

    Jobs are taken from the iterable only as room frees up, so a lazy
    iterable (one chunk's blocks after another's) costs memory for `ahead`
    results at a time. A failing job raises when its turn comes; the jobs
    still in flight are cancelled or left to finish.
    """
    if ahead <= 1:  # on one core the pool only adds a thread hand-off (~0.1 ms) per job
        for job in jobs:
            yield job()
        return
    pending: deque[Future[T]] = deque()
    source = iter(jobs)
    try:
        for job in source:
            pending.append(POOL.submit(job))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
