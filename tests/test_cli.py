"""The command line: each subcommand's parser is built only when it runs."""

from __future__ import annotations

import os
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


def test_what_git_waits_on_exits_early_with_all_its_output(tmp_path, capsys, monkeypatch) -> None:
    """textconv ends through the early exit (no interpreter teardown): its listing, short
    enough to sit in stdout's buffer until then, arrives whole, as main() prints it."""
    import numpy as np
    from safetensors.numpy import save

    from git_mgit.cli import main
    from tests.gitsandbox import run_git
    from tests.mgitrepo import init_mgit_repo

    repo = init_mgit_repo(tmp_path / "work")
    tensors = {"layer.0.weight": np.arange(16, dtype=np.float32)}
    (repo / "model.safetensors").write_bytes(save(tensors))
    run_git("add", "model.safetensors", cwd=repo)
    manifest = tmp_path / "manifest"
    manifest.write_text(run_git("cat-file", "-p", ":model.safetensors", cwd=repo).stdout)
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run(
        [sys.executable, "-m", "git_mgit", "textconv", str(manifest)],
        cwd=repo,
        env=buffered,
        capture_output=True,
        text=True,
        check=True,
    )
    monkeypatch.chdir(repo)
    assert main(["textconv", str(manifest)]) == 0
    assert proc.stdout == capsys.readouterr().out
    assert "layer.0.weight  F32[16]" in proc.stdout
