"""The local backend: worker processes on this machine, `python -m git_mgit.runtime.worker`.

A worker stays up and takes jobs one at a time (torch and the user's modules
are imported once per worker, not per job). submit() hands a job to an idle
worker; next_done() waits for any answer. A worker that dies (a crash, a
kill) answers its job with an error and is replaced for the next one.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_mgit.runtime.execution.base import Executor


@dataclass
class _Worker:
    proc: subprocess.Popen
    job: Any = None  # the caller's handle of the job it is on


@dataclass
class Pool(Executor):
    root: Path
    size: int = 1
    _workers: list[_Worker] = field(default_factory=list)
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)

    def _spawn(self) -> _Worker:
        proc = subprocess.Popen(
            [sys.executable, "-m", "git_mgit.runtime.worker", str(self.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=self.root,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            text=True,
        )
        w = _Worker(proc)
        assert proc.stdout is not None
        self._selector.register(proc.stdout, selectors.EVENT_READ, w)
        self._workers.append(w)
        return w

    @property
    def busy(self) -> int:
        return sum(w.job is not None for w in self._workers)

    def idle(self) -> bool:
        return self.busy < self.size

    def submit(self, handle: Any, job: dict) -> None:
        """Start `job` on an idle worker; `handle` comes back with its answer."""
        w = next((w for w in self._workers if w.job is None), None) or self._spawn()
        w.job = handle
        assert w.proc.stdin is not None
        try:
            w.proc.stdin.write(json.dumps(job) + "\n")
            w.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died: next_done() reports it

    def next_done(self) -> tuple[Any, dict]:
        """(handle, answer) of the next job that finishes."""
        while True:
            for key, _ in self._selector.select():
                got = self._take(key)
                if got is not None:
                    return got

    def ready(self) -> list[tuple[Any, dict]]:
        got = [self._take(key) for key, _ in self._selector.select(timeout=0)]
        return [g for g in got if g is not None]

    def _take(self, key: selectors.SelectorKey) -> tuple[Any, dict] | None:
        """The answer a worker's output has for its job (None: an idle worker exited)."""
        w: _Worker = key.data
        line = w.proc.stdout.readline()  # type: ignore[union-attr]
        handle, w.job = w.job, None
        if line:
            return handle, json.loads(line)
        self._selector.unregister(key.fileobj)
        self._workers.remove(w)
        code = w.proc.wait()
        why = f"signal {-code}" if code < 0 else f"exit status {code}"
        if handle is None:
            return None
        return handle, {"ok": False, "error": f"the worker process died ({why})"}

    def close(self) -> None:
        for w in self._workers:
            if w.proc.stdin is not None:
                w.proc.stdin.close()
        for w in self._workers:
            w.proc.wait()
        self._workers.clear()
        self._selector.close()
