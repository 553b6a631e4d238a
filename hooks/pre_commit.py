"""pre-commit: refuse a commit whose model files would be stored wrong or are broken.

Runs every check of git_mgit.checks on what is staged: untracked
safetensors files, invalid headers, non-finite values, missing or corrupt
objects. `git commit --no-verify` skips it, as for any hook.
"""

from __future__ import annotations

import sys

from git_mgit.checks import check_staged
from git_mgit.gitcmd import find_repo


def run(args: list[str], stdin: bytes) -> int:
    report = check_staged(find_repo())
    for problem in report.problems:
        print(f"git-mgit: {problem}", file=sys.stderr)
    if report.problems:
        print(
            "git-mgit: commit refused (`git commit --no-verify` skips these checks)",
            file=sys.stderr,
        )
    return 1 if report.problems else 0
