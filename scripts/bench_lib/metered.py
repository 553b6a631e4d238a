"""A command's wall time and the CPU it and the servers it talked to spent.

On a machine of few cores a transfer's wall time is bounded below by the CPU
it needs: (client CPU + server CPU) / cores. The stores section prints both
beside each time, so a reader can tell a slow step from a step that is at
that bound, without a profiler.

- The command's CPU: its own and every process it waited for (git, its
  filters and hooks, their helpers), from `wait4`'s resource usage.
- The servers' CPU: this process's (giftless serves on threads here), the
  processes those threads ran and waited for (`git http-backend`), and any
  server process named by pid (SeaweedFS).
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Metered:
    wall_s: float
    cpu_s: float  # the command's processes, user + system
    server_cpu_s: float  # the servers', user + system


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """User + system seconds of process `pid` (its threads included) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)


def _servers(pids: Iterable[int]) -> float:
    return time.process_time() + sum(_process_cpu(p) for p in pids)


def run(argv: list[str], cwd: Path, env: dict[str, str], server_pids: Iterable[int]) -> Metered:
    """Run `argv`; raise RuntimeError with its stderr if it fails."""
    pids = list(server_pids)
    with tempfile.TemporaryFile() as err:
        servers, children = _servers(pids), _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        mine = _cpu(usage)
        # Every child this process reaped meanwhile, less the command: the servers' helpers.
        helpers = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - children - mine
        server = _servers(pids) - servers + max(helpers, 0.0)
        if proc.returncode:
            err.seek(0)
            detail = err.read().decode(errors="replace")
            raise RuntimeError(f"`{' '.join(argv)}` in {cwd} failed:\n{detail}")
    return Metered(wall, mine, server)
