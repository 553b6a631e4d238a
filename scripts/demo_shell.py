"""The demo's shell: commands run in an isolated environment, echoed like a terminal session."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path


class DemoFailure(Exception):
    """A command or a check failed; the message says which and why."""


class Shell:
    """Runs commands in the demo's isolated environment, echoed like a terminal session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        home = root / "home"
        home.mkdir()
        # Inherited GIT_* variables (GIT_DIR when run from a hook, say) would
        # point commands at the user's repository: drop them all.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        self.env |= {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
        }

    def run(self, *args: str, cwd: str = "", show: bool = True, ok: tuple[int, ...] = (0,)) -> str:
        """Run one command in root/cwd and return its stdout; DemoFailure on another exit status."""
        if show:
            print(f"{cwd}$ {shlex.join(args)}")
        proc = subprocess.run(
            args, cwd=self.root / cwd, env=self.env, capture_output=True, text=True, check=False
        )
        if show:
            for line in (proc.stdout + proc.stderr).splitlines():
                print(f"    {line}")
        if proc.returncode not in ok:
            output = "" if show else f":\n{proc.stdout}{proc.stderr}"
            raise DemoFailure(
                f"`{shlex.join(args)}` in {cwd or '.'} exited {proc.returncode}{output}"
            )
        return proc.stdout


def heading(text: str) -> None:
    print(f"\n=== {text} ===")


def note(text: str) -> None:
    print(f"# {text}")
