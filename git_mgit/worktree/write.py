"""Stream one model file from the object store straight into the working tree.

The file is pre-sized (posix_fallocate, so a full disk fails before a byte
is written) and filled in order from the parallel decoder; memory stays at
the decoder's few blocks whatever the file size. Its mtime is set a second
back so that the index written afterwards is strictly newer than it: git then
trusts the recorded stat data instead of treating the entry as racily clean
and re-reading the whole file. On any failure the file is removed: a missing
file is what git reports honestly, a partial one it might not.

A file staged while its objects downloaded (staging.py) is completed from the
store and renamed over git's placeholder instead: the same bytes, verified
the same way, most of them written already.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from git_mgit.errors import MgitError
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.smudge import fill, smudge
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer.trace import tracer

if TYPE_CHECKING:
    from .staging import Staged

_SECOND = 1_000_000_000
_trace = tracer("checkout")


def write_model(
    target: Path,
    name: str,
    m: mf.Manifest,
    store: ChunkStore,
    *,
    placeholder: bool = False,
    executable: bool = False,
    staged: Staged | None = None,
) -> os.stat_result:
    """Write the file `m` describes at `target`; its stat data afterwards.

    With `placeholder`, the file must be the empty file git just wrote, and
    is filled in place, or replaced by `staged` completed; otherwise whatever
    is at `target` is replaced by a new file, as git's own checkout does.
    """
    if staged is not None and (st := _from_staged(target, name, m, store, staged)) is not None:
        return st
    fd = _open(target, name, placeholder, executable)
    try:
        stall = _test_stall()
        if stall is not None and stall[0] == 0:
            _stall_here(stall[1])
        presize(fd, m.size)
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
        _backdate(fd)
        return os.fstat(fd)
    except BaseException:
        os.close(fd)
        fd = -1
        target.unlink(missing_ok=True)
        raise
    finally:
        if fd >= 0:
            os.close(fd)


def _from_staged(
    target: Path, name: str, m: mf.Manifest, store: ChunkStore, staged: Staged
) -> os.stat_result | None:
    """The staged copy, completed from the store, in the place of git's placeholder (whose
    mode it takes); None where the rename cannot reach it (another file system): then the
    placeholder is filled in place. Any other failure removes the placeholder, as there."""
    try:
        fd = _open(target, name, True, False)  # git's untouched empty file, or raise
        mode = os.fstat(fd).st_mode
        os.close(fd)
        rest = staged.missing()
        count = len(staged.done) + len(rest)
        _trace(f"{name}: {len(staged.done)} of {count} chunks decoded while their objects came")
        try:
            fill(m, rest, name, store, lambda block, at: write_at(staged.fd, block, at))
            os.fchmod(staged.fd, stat.S_IMODE(mode))
            _backdate(staged.fd)
            stall = _test_stall()
            if stall is not None:  # a kill now leaves git's empty file
                _stall_here(stall[1])
            os.rename(staged.file, target)
        except BaseException as exc:
            if isinstance(exc, OSError) and exc.errno == errno.EXDEV:
                return None
            target.unlink(missing_ok=True)
            raise
        return os.fstat(staged.fd)  # after the rename, which changes its ctime
    finally:
        staged.discard()  # renamed, or given up: its name is free either way


def _backdate(fd: int) -> None:
    """The mtime a second back (see above)."""
    now = time.time_ns()
    os.utime(fd, ns=(now, (now // _SECOND - 1) * _SECOND))


def write_at(fd: int, block: memoryview | bytes, offset: int) -> None:
    """All of `block` at `offset` in the file."""
    view = memoryview(block)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


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
        linked = _linked_folder(target, name)
        if linked is not None:
            raise MgitError(
                f"{name}: {linked} is a symbolic link; git-mgit writes no file through one, "
                "as git does not (it could point outside the working tree): remove it, or "
                "check the file out elsewhere"
            )
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


def _linked_folder(target: Path, name: str) -> Path | None:
    """The first folder on the way to `target` (the file `name`, relative to its working
    tree) that is a symbolic link, if one is."""
    parts = Path(name).parts
    top = target.parents[len(parts) - 1]
    for i in range(1, len(parts)):
        folder = top.joinpath(*parts[:i])
        if folder.is_symlink():
            return folder
    return None


def presize(fd: int, size: int) -> None:
    """Allocate the file's blocks (a full disk fails now), or at least its size."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        os.ftruncate(fd, size)  # a file system without fallocate: sparse, filled in order
