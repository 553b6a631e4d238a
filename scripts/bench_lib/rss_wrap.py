"""Run a filter process and log its peak RSS: `python -I -S rss_wrap.py CMD ARGS...`.

git holds whole smudge outputs in its own memory, so git's RSS says nothing
about the filter's; this wrapper sits between git and the filter (stdin and
stdout inherited) and, when the filter exits, appends one line to the file
named by MGIT_BENCH_RSS_LOG: three peaks in KiB, then CPU seconds.

1. ru_maxrss from wait4: exact, and what the memory target is checked on.
   The kernel reports the larger of the filter's own peak and that of any
   child it waited for (git-mgit's `git cat-file`), so on its own it cannot
   say which of them it was;
2. the filter process's own peak (VmHWM in /proc, read every 50 ms while it
   runs; the high-water mark only grows, so only a peak in the last 50 ms
   before exit could be missed);
3. the largest peak among its descendants, read the same way;
4. user + system CPU time of the filter and the children it waited for: on
   a 2-core machine the filter competes with git for the CPU, so this says
   where a slow step's time went.

Standard library only, so `-I -S` keeps start-up to a few milliseconds.
"""

from __future__ import annotations

import os
import sys
import time

LOG_ENV = "MGIT_BENCH_RSS_LOG"
INTERVAL = 0.05


def _hwm_kib(pid: int) -> int:
    """The process's peak RSS so far; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    """Every live process below pid (children are listed per thread that forked them)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def main(argv: list[str]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    own = children = 0
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        own = max(own, _hwm_kib(pid))
        for kid in _descendants(pid):
            children = max(children, _hwm_kib(kid))
        time.sleep(INTERVAL)
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a", encoding="ascii") as f:
            cpu = usage.ru_utime + usage.ru_stime
            f.write(f"{usage.ru_maxrss} {own} {children} {cpu:.3f}\n")
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
