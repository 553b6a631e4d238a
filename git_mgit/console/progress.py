"""Progress on stderr for work that takes more than a moment.

Silent when stderr is not a terminal (CI logs, git's captured output) and
for anything that finishes within the first second.
"""

from __future__ import annotations

import os
import sys
import time

_DELAY = 1.0
_INTERVAL = 0.1


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def format_size(n: float) -> str:
    """Human-readable binary size: 512 B, 1.5 KiB, 12.3 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class Progress:
    def __init__(
        self, label: str, total: int | None = None, stream=None, counting: bool = False
    ) -> None:
        """`counting`: the amounts are items (tests, models), not bytes."""
        self.label, self.total, self.done = label, total, 0
        self.counting = counting
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() and not os.environ.get("GIT_MGIT_NO_PROGRESS")
        self.start = time.monotonic()
        self._last = 0.0
        self._shown = False

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < _DELAY or now - self._last < _INTERVAL:
            return
        self._last = now
        self._shown = True
        rate = self.done / max(now - self.start, 1e-9)
        if self.counting:
            msg = f"{self.label}: {self.done}/{self.total or '?'}"
        elif self.total:
            pct = 100 * self.done / self.total
            msg = f"{self.label}: {pct:3.0f}% ({_mib(self.done)} / {_mib(self.total)}), {_mib(int(rate))}/s"
        else:
            msg = f"{self.label}: {_mib(self.done)}, {_mib(int(rate))}/s"
        self.stream.write("\r" + msg + "\x1b[K")
        self.stream.flush()

    def finish(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
