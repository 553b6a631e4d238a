"""Every test runs against an isolated git configuration.

HOME and the global git config point into a temporary folder, so tests never
read or change the developer's own git setup, and `git mgit install`
(global by default) is safe to exercise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gitsandbox import (
    GitHttpServer,
    Remote,
    init_bare_remote,
    init_http_remote,
    init_repo,
)

VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(autouse=True)
def isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.invalid")
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    # git runs `git-mgit` from PATH: make sure it is this interpreter's one.
    monkeypatch.setenv("PATH", VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    return home


@pytest.fixture
def workrepo(tmp_path: Path) -> Path:
    """A fresh non-bare repository on branch ``main``."""
    return init_repo(tmp_path / "work")


@pytest.fixture
def bare_remote(tmp_path: Path) -> Remote:
    """A bare repository reached through a ``file://`` URL."""
    return init_bare_remote(tmp_path / "remote.git")


@pytest.fixture
def git_http_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHttpServer]:
    """A smart-HTTP server (real ``git http-backend``) on a free loopback port."""
    # A developer's proxy settings must not swallow requests meant for loopback.
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    root = tmp_path / "http-root"
    root.mkdir()
    with GitHttpServer(root) as server:
        yield server


@pytest.fixture(params=["file", "http"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> Remote:
    """An empty bare repository over ``file://``, then over smart HTTP: a test runs on both."""
    if request.param == "file":
        return init_bare_remote(tmp_path / "remote.git")
    server: GitHttpServer = request.getfixturevalue("git_http_server")
    return init_http_remote(server)


@pytest.fixture
def http_remote(git_http_server: GitHttpServer) -> Remote:
    """A bare repository served over smart HTTP that accepts anonymous pushes."""
    return init_http_remote(git_http_server)
