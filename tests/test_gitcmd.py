"""The git wrappers: a process reads git's configuration once, as git would answer it, and
asks about objects through one kept `git cat-file` of each kind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from git_mgit import config
from git_mgit.gitcmd import find_repo
from git_mgit.transfer.stores.choice import choose
from tests.gitsandbox import init_repo, run_git


def _config_runs(trace: Path) -> int:
    return trace.read_text().count("built-in: git config") if trace.exists() else 0


def test_a_process_reads_git_config_once_and_again_after_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = init_repo(tmp_path / "repo")
    run_git("remote", "add", "origin", "https://git.example.invalid/org/model.git", cwd=root)
    run_git("config", "--add", "mgit.maxChainDepth", "3", cwd=root)
    run_git("config", "--add", "mgit.maxChainDepth", "5", cwd=root)  # the last one counts
    run_git("config", "remote.origin.mgitStore", "lfs", cwd=root)
    trace = tmp_path / "trace"
    monkeypatch.setenv("GIT_TRACE", str(trace))
    repo = find_repo(root)

    assert config.load(repo).max_chain_depth == 5
    assert choose(repo, "origin").reason == "git config remote.origin.mgitStore"
    # keys as git matches them: section and name in any case, the subsection as written
    assert repo.config("REMOTE.origin.MgitStore") == "lfs"
    assert repo.config("remote.ORIGIN.mgitStore") is None
    assert repo.config("mgit.store") is None
    assert _config_runs(trace) == 1

    repo.git("config", "--replace-all", "mgit.maxChainDepth", "7")  # a write: seen
    assert config.load(repo).max_chain_depth == 7
    repo.git("remote", "rename", "origin", "hub")
    assert repo.config("remote.hub.mgitStore") == "lfs"
    assert repo.config("remote.origin.mgitStore") is None
    assert _config_runs(trace) == 4  # the write, a read, and the read after the rename


def _cat_file_runs(trace: Path) -> int:
    return trace.read_text().count("built-in: git cat-file") if trace.exists() else 0


def test_object_questions_go_to_one_kept_cat_file_of_each_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many questions, two processes: answers in order, missing names as such (a name with
    spaces or a newline too), rounds of answers larger than a pipe without a deadlock,
    objects written after the process started, and a process that died is replaced."""
    root = init_repo(tmp_path / "repo")
    big = os.urandom(300_000)  # more than a pipe holds, many times over in one question
    blobs = [big + bytes([i]) for i in range(200)] + [b"small"]
    for i, data in enumerate(blobs):
        (root / f"f {i}").write_bytes(data)
    (root / "odd\rname é").write_bytes(b"odd")
    run_git("add", ".", cwd=root)
    run_git("commit", "-q", "-m", "blobs", cwd=root)
    oids = [run_git("rev-parse", f"HEAD:f {i}", cwd=root).stdout.strip() for i in range(201)]
    trace = tmp_path / "trace"
    monkeypatch.setenv("GIT_TRACE", str(trace))
    repo = find_repo(root)
    absent = "0123456789" * 4

    assert repo.cat_blobs([*oids, absent, "bad\nname"]) == [*blobs, None, None]
    assert repo.batch_check(["HEAD:f 200", absent, oids[0]], "%(objectsize) %(objectname)") == [
        ["5", oids[200]],
        [str(len(blobs[0])), oids[0]],
    ]
    assert repo.existing([absent, *oids[:3]]) == set(oids[:3])
    odd = run_git("rev-parse", "HEAD:odd\rname é", cwd=root).stdout.strip()
    assert repo.batch_check(["HEAD:odd\rname é"], "%(objectname)") == [[odd]]
    late = run_git("hash-object", "-w", "--stdin", cwd=root, input="late").stdout.strip()
    assert repo.existing([late]) == {late} and repo.cat_blobs([late]) == [b"late"]
    assert _cat_file_runs(trace) == 2

    repo._contents._proc.kill()  # a cat-file that died
    repo._contents._proc.wait()
    assert repo.cat_blobs([oids[200]]) == [b"small"]
    assert _cat_file_runs(trace) == 3
    # an atom the kept process does not print: asked of a process of its own
    assert repo.batch_check([oids[200]], "%(objectsize:disk)")[0][0].isdigit()
