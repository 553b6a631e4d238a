"""The git wrappers: a process reads git's configuration once, as git would answer it."""

from __future__ import annotations

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
