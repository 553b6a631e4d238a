"""The command line: each subcommand's parser is built only when it runs."""

from __future__ import annotations

import subprocess
import sys

from git_mgit.cli import COMMANDS


def git_mgit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "git_mgit", *args], capture_output=True, text=True, check=False
    )


def test_help_lists_every_command_and_a_command_its_own_arguments() -> None:
    top = git_mgit("--help")
    assert top.returncode == 0
    assert all(name in top.stdout for name in COMMANDS)
    push = git_mgit("push", "--help")
    assert push.returncode == 0
    assert "usage: git mgit push" in push.stdout and "--all" in push.stdout


def test_an_unknown_command_or_option_is_refused_with_the_choices() -> None:
    unknown = git_mgit("pusj")
    assert unknown.returncode == 2
    assert "invalid choice: 'pusj'" in unknown.stderr and "'push'" in unknown.stderr
    option = git_mgit("push", "--bogus")
    assert option.returncode == 2 and "unrecognized arguments: --bogus" in option.stderr
