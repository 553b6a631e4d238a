"""Section 7 of `scripts/demo`: the runtime on a zoo of real PyTorch models.

The zoo (scripts/demo_zoo: user code and mgit.toml, copied into the demo's
repository) is a base model, three fine-tunes (one with its body frozen), a
grandchild and a pruned variant. The base keeps training; one checkpoint
plants a float16 overflow; `cascade` re-derives every descendant from the
latest base, `test` shows the failures, and `bisect` finds the checkpoint
that introduced them, in far fewer test runs than trying each in turn.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from demo_shell import DemoFailure, Shell, heading, note

ZOO = Path(__file__).parent / "demo_zoo"
CHECKPOINTS, PLANTED = 12, 5


def runtime(sh: Shell) -> None:
    heading("7. Runtime: a zoo of models, tests over the graph, an update cascade, bisection")
    work = sh.root / "work"
    for name in ("nets.py", "train.py", "checks.py", "build.py", "continue_base.py"):
        shutil.copyfile(ZOO / name, work / name)
    shutil.copyfile(ZOO / "mgit.toml", work / "mgit.toml")
    sh.run("git", "add", "nets.py", "train.py", "checks.py", "build.py", "continue_base.py",
           "mgit.toml", cwd="work")  # fmt: skip
    sh.run("git", "commit", "--quiet", "-m", "Model zoo: code and mgit.toml", cwd="work")
    note("mgit.toml declares each model, its parents, creation function and the tests:")
    sh.run("sed", "-n", "/models.ft-b/,/^$/p;/tests.fp16/,$p", "mgit.toml", cwd="work")
    note("build.py trains the base and derives the others with their creation functions")
    sh.run(sys.executable, "build.py", cwd="work")
    sh.run("git", "mgit", "graph", "--no-sizes", cwd="work")
    note("every registered test on every model; results are recorded in the lineage notes")
    sh.run("git", "mgit", "test", "--jobs", "2", cwd="work")
    note("a second run reuses the recorded results (same test code, same model version)")
    sh.run("git", "mgit", "test", "--models", "ft-", cwd="work")

    note("shared-weight loading: ft-b froze the body, so it shares the base's body tensors")
    sh.run(sys.executable, "-c", "from git_mgit.runtime import load_models; "
           "print(load_models(['base', 'ft-a', 'ft-b', 'ft-c']).summary())", cwd="work")  # fmt: skip

    note(f"the base trains on: {CHECKPOINTS} checkpoints, and checkpoint {PLANTED} plants a bug")
    out = sh.run(sys.executable, "continue_base.py", str(CHECKPOINTS), str(PLANTED), cwd="work")
    planted = re.search(r"planted at checkpoint \d+: (\w+)", out).group(1)
    note("re-derive every descendant of the base from its latest checkpoint, two at a time")
    out = sh.run("git", "mgit", "cascade", "base", "--from", f"HEAD~{CHECKPOINTS}:zoo/base.safetensors",
                 "--jobs", "2", cwd="work")  # fmt: skip
    branch = re.search(r"on (mgit/cascade/\S+);", out).group(1)
    note("the new versions are on a branch; the working tree was not touched")
    sh.run("git", "log", "--oneline", "-6", branch, cwd="work")
    note("test the cascade's models: fp16 fails everywhere (exit status 1)")
    sh.run("git", "mgit", "test", "--rev", branch, "--tests", "fp16", cwd="work", ok=(0, 1))
    note("which model version introduced it? bisect along provenance and version edges")
    grand = f"{branch}:zoo/grand.safetensors"
    fast = sh.run("git", "mgit", "bisect", "--test", "fp16", grand, cwd="work")
    note("the baseline: test every candidate in turn, oldest first")
    slow = json.loads(sh.run("git", "mgit", "bisect", "--test", "fp16", grand, "--linear",
                             "--json", cwd="work", show=False))  # fmt: skip
    runs = int(re.search(r"bisection: (\d+) test runs", fast).group(1))
    print(f"    linear search: {slow['runs']} test runs among {slow['candidates']} candidates")
    if planted[:7] not in fast or slow["first_bad"] != planted:
        raise DemoFailure(f"bisect did not find the planted checkpoint {planted[:10]}")
    if runs >= slow["runs"]:
        raise DemoFailure(f"bisect took {runs} runs, linear search {slow['runs']}")
    note(
        f"found checkpoint {PLANTED} ({planted[:10]}) in {runs} runs, linear search {slow['runs']}"
    )
