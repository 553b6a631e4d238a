"""Who commits a staged checkpoint, and when: in the loop (sync) or in a background thread.

Flor's background materialisation, with Python threads: encoding (BLAKE3,
zstd) and git's object writes spend their time in C code that releases the
GIL, so a thread overlaps them with training without forking.

Back-pressure: a checkpoint reserves a slot *before* it stages its copies,
and the slot is freed only when its commit is done, so at most
`max_pending` staged copies exist at any time (default 1: memory is the
training state plus one copy), and a loop that checkpoints faster than git
can commit waits in reserve() instead of piling up copies.

Errors: the first failure in the background is kept and raised (as a
CheckpointError naming the checkpoint, the original as its cause) by the
next reserve(), wait() or close(); after it no later checkpoint is
committed, since a run branch with a hole in it would resume wrongly.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from git_mgit.runtime.training.layout import CheckpointError
from git_mgit.runtime.training.staging import Staged

Taken = Any  # one checkpoint as a rank took it (committing.Taken): has `.info`
Commit = Callable[[Taken], object]
Release = Callable[[Staged], None]
Abort = Callable[[Taken], None]  # what a checkpoint after a failure still does (collectives)


class Writer(Protocol):
    def reserve(self) -> None:
        """Wait for room for one more staged checkpoint; raise an earlier failure."""

    def submit(self, taken: Taken, staged: Staged) -> None:
        """Commit `taken` (whose tensors `staged` holds) now or later."""

    def wait(self) -> None:
        """Return once everything submitted is committed; raise an earlier failure."""

    def busy(self) -> bool:
        """Whether a commit is running beside the loop now."""

    def ran_since(self, moment: float) -> bool:
        """Whether a commit ran beside the loop at any time after `moment` (perf_counter)."""

    def close(self) -> None:
        """wait(), then stop."""


def _failed(taken: Taken, exc: BaseException) -> CheckpointError:
    where = taken.info.position.label()
    err = CheckpointError(f"checkpoint at {where} failed: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


class SyncWriter:
    """Commits in the caller's thread: the loop waits for the whole checkpoint."""

    def __init__(self, commit: Commit, release: Release) -> None:
        self._commit, self._release = commit, release

    def reserve(self) -> None:
        pass

    def submit(self, taken: Taken, staged: Staged) -> None:
        try:
            staged.ready()
            self._commit(taken)
        except Exception as exc:
            raise _failed(taken, exc) from exc
        finally:
            self._release(staged)

    def wait(self) -> None:
        pass

    def busy(self) -> bool:
        return False  # the loop waits for its commits: nothing runs beside it

    def ran_since(self, moment: float) -> bool:
        return False

    def close(self) -> None:
        pass


class BackgroundWriter:
    """Commits in one background thread, at most `max_pending` checkpoints behind the loop."""

    def __init__(
        self, commit: Commit, release: Release, max_pending: int = 1, abort: Abort | None = None
    ) -> None:
        if max_pending < 1:
            raise CheckpointError(f"max_pending must be at least 1, not {max_pending}")
        self._commit, self._release, self._abort = commit, release, abort
        self._slots = threading.BoundedSemaphore(max_pending)
        self._jobs: queue.Queue[tuple[Taken, Staged] | None] = queue.Queue()
        self._error: CheckpointError | None = None
        self._closed = False
        self._pending = 0  # submitted, not yet committed
        self._finished_at = float("-inf")  # perf_counter when the last commit ended
        self._thread = threading.Thread(target=self._run, name="git-mgit-checkpoint", daemon=True)
        self._thread.start()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def reserve(self) -> None:
        self._raise()
        if self._closed:
            raise CheckpointError("the checkpointer is closed")
        self._slots.acquire()
        if self._error is not None:  # failed while we waited
            self._slots.release()
            self._raise()

    def submit(self, taken: Taken, staged: Staged) -> None:
        """After reserve(): hand the staged checkpoint to the thread and return at once."""
        self._pending += 1
        self._jobs.put((taken, staged))

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            taken, staged = job
            try:
                if self._error is None:
                    staged.ready()
                    self._commit(taken)
                elif self._abort is not None:
                    self._abort(taken)
            except BaseException as exc:  # kept for the loop: a thread cannot raise into it
                if self._error is None:
                    self._error = _failed(taken, exc)
            finally:
                self._release(staged)
                self._finished_at = time.perf_counter()
                self._pending -= 1
                self._slots.release()
                self._jobs.task_done()
        self._jobs.task_done()

    def wait(self) -> None:
        self._jobs.join()
        self._raise()

    def busy(self) -> bool:
        return self._pending > 0

    def ran_since(self, moment: float) -> bool:
        return self._pending > 0 or self._finished_at > moment

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            self._thread.join()
        self._raise()
