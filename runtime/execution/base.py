"""What every backend of the execution layer offers: submit a job, wait for the next answer.

A job is a JSON object (runtime/worker.py describes them); its answer is one
too. The caller keeps its own handle for each job and gets it back with the
answer, so it never needs to know where the job ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class Executor:
    """A backend: `submit` and `next_done` are its own; `map` and closing are shared."""

    size: int  # jobs that run at once

    def idle(self) -> bool:
        """Whether a job submitted now starts at once."""
        raise NotImplementedError

    def submit(self, handle: Any, job: dict) -> None:
        """Start `job`; `handle` comes back with its answer."""
        raise NotImplementedError

    def next_done(self) -> tuple[Any, dict]:
        """(handle, answer) of the next job that finishes."""
        raise NotImplementedError

    def ready(self) -> list[tuple[Any, dict]]:
        """(handle, answer) of every job that has finished by now, without waiting."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def map(self, jobs: list[tuple[Any, dict]]) -> Iterator[tuple[Any, dict]]:
        """Run every job, at most `size` at a time; answers in the order they finish."""
        queue = list(jobs)
        running = 0
        while queue or running:
            while queue and self.idle():
                self.submit(*queue.pop(0))
                running += 1
            yield self.next_done()
            running -= 1

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
