"""Open files: the soft limit raised to what the hard limit allows, as Go programs
(git-lfs among them) start.

git-mgit's packs stay apart until `git mgit gc` (store/keep.py), and a process holds two
descriptors for each pack it reads from (the file and its mapping): a checkout of a
model whose tensors were last changed in 300 different commits reads from 300 packs.
The soft limit on open files is 1024 by default on Linux and 256 on macOS; the hard
limit, which any process may raise it to, is far higher (524288 under systemd, and
unlimited on macOS, whose kernel then caps it itself). git processes started afterwards
inherit the limit.
"""

from __future__ import annotations

import contextlib
import resource

WANTED = 1 << 16  # descriptors: packs read from by one process, twice over, and then some


def allow_open_files(wanted: int = WANTED) -> int:
    """Raise this process's soft limit on open files towards `wanted` (never lower it, and
    never past the hard limit); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):  # a kernel cap below the hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
