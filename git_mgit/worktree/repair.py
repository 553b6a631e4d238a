"""`git mgit checkout`: (re)write model files straight from the object store.

Without paths it finishes what direct checkouts left unfinished (the
journal's open records: a killed git, a full disk, a missing object); with
paths it rewrites those files from the index, or from REV (and then stages
REV's version, as `git checkout REV -- PATH` does). Every file goes the
direct way whatever its size, and the index gets its stat data, so `git
status` is clean afterwards without hashing anything again.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.modelfile.tracked import TrackedFile, tracked_files
from git_mgit.store.chunkstore import ChunkStore

from .journal import Journal, Record
from .session import record_written, write_recorded
from .staging import remove_stale
from .write import failure


@dataclass
class Outcome:
    written: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def checkout(
    repo: Repo,
    store: ChunkStore,
    rev: str | None,
    paths: Sequence[str],
    say: Callable[[str], None],
) -> Outcome:
    """Write the model files `rev` and `paths` name (see the module docstring)."""
    if repo.worktree is None:
        raise MgitError("git mgit checkout needs a working tree")
    journal = Journal(repo.git_dir)
    remove_stale(repo)  # what a killed checkout staged: this writes the files again
    # Finished writes the index still lacks (the no-argument form settles them too).
    written: dict[str, tuple[str, os.stat_result]] = {}
    if not paths and rev is None:
        files = _unfinished(repo, store, journal, written)
    else:
        files = _named(repo, store, rev, paths)
    out = Outcome()
    from git_mgit.transfer.fetch import ensure_local  # one batch for every file

    ensure_local(store, [(f.path, f.manifest) for f in files if f.manifest is not None])
    if rev is not None:  # stage REV's versions first: a kill mid-write then leaves them unclean
        info = "".join(f"{f.mode} {f.blob}\t{f.path}\n" for f in files)
        repo.git("update-index", "--index-info", input=info.encode())
    for f in files:
        assert f.manifest is not None
        journal.put(Record(f.path, f.blob, None))
        try:
            written[f.path] = write_recorded(
                repo, journal, f.path, f.blob, f.manifest, store, executable=f.mode == "100755"
            )
        except (MgitError, OSError) as exc:
            say(failure(f.path, exc))
            out.failed.append(f.path)
            continue
        out.written.append(f.path)
    record_written(repo, journal, written)
    return out


def _named(
    repo: Repo, store: ChunkStore, rev: str | None, paths: Sequence[str]
) -> list[TrackedFile]:
    assert repo.worktree is not None
    top = repo.worktree
    specs = [os.path.relpath(os.path.abspath(p), top) for p in paths]
    if any(s == ".." or s.startswith("../") for s in specs):
        raise MgitError(f"{paths[0]}: outside the working tree {top}")
    if rev is not None and not repo.git(
        "rev-parse", "-q", "--verify", f"{rev}^{{tree}}", check=False
    ):
        raise MgitError(f"{rev}: not a commit or tree here; see `git log --oneline`")
    files = tracked_files(repo, store.reader, rev, specs)
    conflicted = [p for p, n in Counter(f.path for f in files).items() if n > 1]
    if conflicted:
        raise MgitError(
            f"{conflicted[0]}: has a merge conflict; resolve it (`git mgit resolve`) first"
        )
    files = [f for f in files if f.manifest is not None]
    if not files:
        where = rev or "the index"
        raise MgitError(
            f"{' '.join(paths) or where}: no model files tracked by git-mgit in {where}"
        )
    return files


def _unfinished(
    repo: Repo, store: ChunkStore, journal: Journal, settle: dict[str, tuple[str, os.stat_result]]
) -> list[TrackedFile]:
    """The index's versions of files whose direct write did not finish.

    Finished writes the index still lacks go into `settle`; records of files
    changed since are dropped: those files are the user's now.
    """
    assert repo.worktree is not None
    open_paths = []
    for record in journal:
        if not record.finished:
            open_paths.append(record.path)
        elif record.matches(repo.worktree):
            settle[record.path] = (record.blob, (repo.worktree / record.path).lstat())
        else:
            journal.drop(record.path)
    if not open_paths:
        return []
    files = [f for f in tracked_files(repo, store.reader, None, open_paths) if f.manifest]
    for path in set(open_paths) - {f.path for f in files}:
        journal.drop(path)  # no longer a model file in the index: nothing to finish
    return files
