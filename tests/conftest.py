"""Every test runs against an isolated git configuration.

HOME and the global git config point into a temporary folder, so tests never
read or change the developer's own git setup, and `git mgit install`
(global by default) is safe to exercise.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

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
