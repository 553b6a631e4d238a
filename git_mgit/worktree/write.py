"""Stream one model file from the object store straight into the working tree.

The file is pre-sized (posix_fallocate, so a full disk fails before a byte
is written) and filled in order from the parallel decoder; memory stays at
the decoder's few blocks whatever the file size. Its mtime is set a second
back so that the index written afterwards is strictly newer than it: git then
trusts the recorded stat data instead of treating the entry as racily clean
and re-reading the whole file. On any failure the file is removed: a missing
file is what git reports honestly, a partial one it might not.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from git_mgit import manifest as mf
from git_mgit.errors import MgitError
from git_mgit.smudge import smudge
from git_mgit.store.chunkstore import ChunkStore

_SECOND = 1_000_000_000


def write_model(
    target: Path,
    name: str,
    m: mf.Manifest,
    store: ChunkStore,
    *,
    placeholder: bool = False,
    executable: bool = False,
) -> os.stat_result:
    """Write the file `m` describes at `target`; its stat data afterwards.

    With `placeholder`, the file must be the empty file git just wrote, and
    is filled in place; otherwise whatever is at `target` is replaced by a
    new file, as git's own checkout does.
    """
    fd = _open(target, name, placeholder, executable)
    try:
        stall = _test_stall()
        if stall is not None and stall[0] == 0:
            _stall_here(stall[1])
        _presize(fd, m.size)
        written = 0

        def write(block: memoryview | bytes) -> None:
            nonlocal written
            view = memoryview(block)
            while view:
                view = view[os.write(fd, view) :]
            written += len(block)
            if stall is not None and written >= stall[0]:
                _stall_here(stall[1])

        smudge(m, name, store, write)
        now = time.time_ns()
        os.utime(fd, ns=(now, (now // _SECOND - 1) * _SECOND))
        return os.fstat(fd)
    except BaseException:
        os.close(fd)
        fd = -1
        target.unlink(missing_ok=True)
        raise
    finally:
        if fd >= 0:
            os.close(fd)


def failure(path: str, exc: Exception) -> str:
    """The one line a failed write_model() gets: what went wrong, and what finishes it."""
    if isinstance(exc, MgitError):
        return str(exc)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
    return (
        f"{path}: writing it failed ({reason}); fix the cause (free space?), "
        f"then run `git mgit checkout -- {path}`"
    )


def _test_stall() -> tuple[int, Path] | None:
    """GIT_MGIT_TEST_DIRECT_STALL=<bytes>:<marker>: the tests' way to kill a write midway.

    After that many bytes (0: before the file is touched) the writer creates the
    marker file and waits to be killed.
    """
    spec = os.environ.get("GIT_MGIT_TEST_DIRECT_STALL")
    if not spec:
        return None
    size, _, marker = spec.partition(":")
    return int(size), Path(marker)


def _stall_here(marker: Path) -> None:
    marker.write_text(str(os.getpid()))
    while True:
        time.sleep(60)


def _open(target: Path, name: str, placeholder: bool, executable: bool) -> int:
    if not placeholder:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        mode = 0o777 if executable else 0o666  # less the umask, as git creates files
        return os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        fd = os.open(target, os.O_RDWR | os.O_NOFOLLOW)
    except OSError as exc:
        raise MgitError(
            f"{name}: the file git checked out is gone ({exc.strerror}); "
            f"run `git mgit checkout -- {name}` to write it"
        ) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size:
        os.close(fd)
        raise MgitError(
            f"{name}: changed since git checked it out; left as it is "
            f"(`git mgit checkout -- {name}` writes the model over it)"
        )
    return fd


def _presize(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        os.ftruncate(fd, size)  # a file system without fallocate: sparse, filled in order
