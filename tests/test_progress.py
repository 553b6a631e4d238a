"""Progress: shown only on a terminal, only for work that takes a while."""

from __future__ import annotations

import io

import pytest

from git_mgit.console import progress
from git_mgit.console.progress import Progress, format_size


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    clock = iter([0.0, 5.0, 10.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    p = Progress("work", 100, stream=out)
    p.update(50)
    p.finish()
    assert out.getvalue() == ""


def test_shows_rate_and_percent_after_a_second_then_clears(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_MGIT_NO_PROGRESS", raising=False)
    out = Tty()
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    p = Progress("git-mgit: storing m", 4 << 20, stream=out)
    p.update(1 << 20)  # within the first second: nothing
    assert out.getvalue() == ""
    now[0] = 2.0
    p.update(1 << 20)
    assert " 50% (2 MiB / 4 MiB), 1 MiB/s" in out.getvalue()
    p.finish()
    assert out.getvalue().endswith("\r\x1b[K")


def test_format_size() -> None:
    assert [format_size(n) for n in (512, 1536, 5 << 20, 3 << 30)] == [
        "512 B",
        "1.5 KiB",
        "5.0 MiB",
        "3.0 GiB",
    ]
