"""Stat data patched into git's index in place, read back by the real git.

Each case leaves a tracked file with its committed content but new stat
data (rewritten, so git must compare content), patches the index, and asks
git (`diff-files`, which compares stat data only, and `ls-files --debug`)
what it now believes; `git status` must still read the index (checksum).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from git_mgit.worktree.gitindex import IndexBusy, record_stats
from tests.gitsandbox import run_git


def repo_with_files(root: Path, version: int) -> Path:
    run_git("init", "-q", str(root), cwd=root.parent)
    for i in range(5):
        sub = root / f"d{i}"
        sub.mkdir()
        (sub / "file.bin").write_bytes(os.urandom(100 + i))
        old = time.time_ns() - 10_000_000_000  # older than the index: not racy
        os.utime(sub / "file.bin", ns=(old, old))
    run_git("add", ".", cwd=root)
    run_git("commit", "-q", "-m", "files", cwd=root)
    run_git("update-index", "--index-version", str(version), cwd=root)
    return root


def rewrite(path: Path) -> os.stat_result:
    """The same bytes in a new file: stat data the index does not have."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    second = time.time_ns() // 1_000_000_000 - 1
    os.utime(path, ns=(second * 1_000_000_000, second * 1_000_000_000))
    return path.stat()


@pytest.mark.parametrize("version", [2, 3, 4])
def test_patched_entries_match_and_the_index_stays_valid(tmp_path: Path, version: int) -> None:
    root = repo_with_files(tmp_path / "r", version)
    if version == 3:  # an extended-flags entry (intent to add) before the patched one
        (root / "a-new.txt").write_text("x")
        run_git("add", "-N", "a-new.txt", cwd=root)
    names = ["d1/file.bin", "d3/file.bin"]
    stats = {n: rewrite(root / n) for n in names}
    assert run_git("diff-files", "--name-only", "--", "d*", cwd=root).stdout.split() == names
    blobs = {n: run_git("rev-parse", f":{n}", cwd=root).stdout.strip() for n in names}
    wrong = {"d1/file.bin": ("0" * 40, stats["d1/file.bin"])}
    assert record_stats(root / ".git" / "index", wrong) == set()  # not the blob it holds

    done = record_stats(root / ".git" / "index", {n: (blobs[n], stats[n]) for n in names})

    assert done == set(names)
    assert run_git("diff-files", "--name-only", "--", "d*", cwd=root).stdout == ""
    debug = run_git("ls-files", "--debug", "d3/file.bin", cwd=root).stdout
    assert f"ino: {stats['d3/file.bin'].st_ino}" in debug
    assert f"size: {stats['d3/file.bin'].st_size}" in debug
    assert run_git("status", "--porcelain", cwd=root).stdout == (
        " A a-new.txt\n" if version == 3 else ""
    )
    assert not (root / ".git" / "index.lock").exists()


def test_racy_entries_are_smudged_so_git_compares_their_content(tmp_path: Path) -> None:
    """An entry not older than the index could have changed unseen; rewriting the index
    makes it look older, so its size goes to 0, as git's own index writes do."""
    root = repo_with_files(tmp_path / "r", 2)
    stat = rewrite(root / "d0/file.bin")
    blob = run_git("rev-parse", ":d0/file.bin", cwd=root).stdout.strip()
    racy = root / "d2" / "file.bin"
    future = (int(time.time()) + 5) * 1_000_000_000
    os.utime(racy, ns=(future, future))
    run_git("update-index", "--refresh", cwd=root)  # records the racy mtime
    index = root / ".git" / "index"
    os.utime(index, ns=(future, future))  # the index as old as the entry: racy

    assert record_stats(index, {"d0/file.bin": (blob, stat)}) == {"d0/file.bin"}

    assert "size: 0" in run_git("ls-files", "--debug", "d2/file.bin", cwd=root).stdout
    assert run_git("status", "--porcelain", cwd=root).stdout == ""


def test_split_index_and_busy_lock_are_left_to_git(tmp_path: Path) -> None:
    root = repo_with_files(tmp_path / "r", 2)
    stat = rewrite(root / "d0/file.bin")
    blob = run_git("rev-parse", ":d0/file.bin", cwd=root).stdout.strip()
    lock = root / ".git" / "index.lock"
    lock.write_text("")
    with pytest.raises(IndexBusy):
        record_stats(root / ".git" / "index", {"d0/file.bin": (blob, stat)})
    lock.unlink()
    run_git("update-index", "--split-index", cwd=root)
    assert record_stats(root / ".git" / "index", {"d0/file.bin": (blob, stat)}) == set()
    assert run_git("status", "--porcelain", cwd=root).stdout == ""
