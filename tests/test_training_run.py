"""`git mgit train` end to end: real torchrun, real process groups, real git repositories.

The training script is the one docs/training.md shows, run verbatim. A run
is killed (one process SIGKILLs itself during the third epoch, after the
second epoch's checkpoint is committed), resumed from that commit, and
compared with an uninterrupted run in a copy of the same repository:
every tensor equal, and the final checkpoint's files byte-identical.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model
from git_mgit.lineage.graph import PROVENANCE, VERSION
from git_mgit.runtime import load_state_dict
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo, mgit
from tests.runtime_repo import isolated_home

DOCS = Path(__file__).parents[1] / "docs" / "training.md"

# Test scaffolding around a training function MODULE:main (the documented train:main here):
# kill one process at EPOCH:STEP, once the checkpoints taken so far are committed (the test
# resumes from the last one).
KILLER_OF = """
import os
import signal

import torch.distributed as dist

import {module}


def main(ctx):
    epoch, step = (int(v) for v in os.environ["KILL_AT"].split(":"))
    make = ctx.checkpointer

    def checkpointer(*args, **kwargs):
        ckpt = make(*args, **kwargs)
        take_step = ckpt.step

        def step_then_maybe_die(metrics=None):
            took = take_step(metrics)
            if (ckpt.position.epoch, ckpt.position.step) == (epoch, step):
                ckpt.wait()
                if dist.is_initialized():
                    dist.barrier()
                if ctx.rank == ctx.world_size - 1:
                    os.kill(os.getpid(), signal.SIGKILL)
            return took

        ckpt.step = step_then_maybe_die
        return ckpt

    ctx.checkpointer = checkpointer
    {module}.main(ctx)
"""
KILLER = KILLER_OF.format(module="train")


def documented_python(after: str) -> str:
    """The first Python block of docs/training.md after the text `after`: tests run it verbatim."""
    text = DOCS.read_text()
    match = re.search(r"```python\n(.*?)```", text[text.index(after) :], re.S)
    assert match, f"docs/training.md lost the code after {after!r}"
    return match.group(1)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository tracking *.safetensors, with train.py, killer.py and a base model."""
    with isolated_home(tmp_path_factory.mktemp("training-home")):
        repo = init_mgit_repo(tmp_path_factory.mktemp("training") / "repo")
        (repo / "train.py").write_text(documented_python("`train.py`, at the root"))
        (repo / "killer.py").write_text(KILLER)
        run_git("add", "train.py", "killer.py", cwd=repo)
        run_git("commit", "-q", "-m", "training code", cwd=repo)
        sys.path.insert(0, str(repo))
        try:
            import train  # type: ignore[import-not-found]

            torch.manual_seed(1)
            lin = Lineage(find_repo(repo))
            commit_model(
                train.Net().state_dict(),
                repo / "models/base.safetensors",
                "base",
                name="base",
                type="classifier",
                lineage=lin,
            )
        finally:
            sys.path.remove(str(repo))
            sys.modules.pop("train", None)
        return repo


def copy(template: Path, to: Path) -> Path:
    shutil.copytree(template, to, symlinks=True)
    mgit("install", cwd=to)  # this test's own global config
    return to


def train(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "mgit", "train", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def checkpoints(repo: Path, run: str) -> list[str]:
    return run_git(
        "log", "--format=%H", f"--grep=^Mgit-Run: {run}$", f"runs/{run}", cwd=repo
    ).stdout.split()


def smudged(repo: Path, rev: str, path: str) -> bytes:
    return run_git("cat-file", "--filters", f"{rev}:{path}", cwd=repo, text=False).stdout


def assert_same_tensors(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_killed_run_resumed_from_epoch_2_commit_is_bit_identical(
    template: Path, tmp_path: Path
) -> None:
    whole, killed = copy(template, tmp_path / "whole"), copy(template, tmp_path / "killed")
    common = ["--nproc-per-node", "2", "--name", "demo", "--from", "base"]
    done = train(whole, *common, "train:main")
    assert done.returncode == 0, done.stderr
    assert "runs/demo: 3 checkpoint(s)" in done.stdout

    crash = train(killed, *common, "killer:main", env={"KILL_AT": "2:1"})
    assert crash.returncode != 0
    assert "resume it: git mgit train --resume runs/demo" in crash.stderr
    before = checkpoints(killed, "demo")
    assert len(before) == 2  # epochs 0 and 1 (the first two)
    head = run_git("rev-parse", "HEAD", cwd=killed).stdout

    resumed = train(killed, "--resume", "runs/demo", "--nproc-per-node", "2", "train:main")
    assert resumed.returncode == 0, resumed.stderr
    after = checkpoints(killed, "demo")
    assert after[1:] == before and len(after) == 3
    trailers = run_git("log", "-1", "--format=%(trailers)", after[0], cwd=killed).stdout
    assert f"Mgit-Resumed-From: {before[0]}" in trailers
    assert "Mgit-Checkpoint: epoch=2 step=4 global_step=12 end_of_epoch=true" in trailers

    for name in ("model.safetensors", "training.safetensors"):
        path = f"checkpoints/demo/{name}"
        assert_same_tensors(
            load_state_dict(f"runs/demo:{path}", Lineage(find_repo(whole))),
            load_state_dict(f"runs/demo:{path}", Lineage(find_repo(killed))),
        )
        assert smudged(whole, "runs/demo", path) == smudged(killed, "runs/demo", path)
        same = [run_git("rev-parse", f"runs/demo:{path}", cwd=r).stdout for r in (whole, killed)]
        assert same[0] == same[1]  # the manifests, a function of the bytes alone

    # the user's checkout never moved, and the lineage chains the run to its base
    assert run_git("rev-parse", "HEAD", cwd=killed).stdout == head
    assert run_git("status", "--porcelain", cwd=killed).stdout == ""
    graph = Lineage(find_repo(killed)).graph
    versions = [
        run_git("rev-parse", f"{c}:checkpoints/demo/model.safetensors", cwd=killed).stdout.strip()
        for c in reversed(after)
    ]
    base = Lineage(find_repo(killed)).resolve("base").id
    first = graph.in_edges(versions[0], (PROVENANCE,))
    assert [(e.parent, e.info["function"]) for e in first] == [(base, "killer:main")]
    for old, new in itertools.pairwise(versions):
        assert old in graph.parents(new, (VERSION,))
    assert {graph.nodes[v].type for v in versions} == {"classifier"}

    # bad resumes fail at once, with one line
    for args, message in [
        (
            ["--resume", "runs/demo~1", "--nproc-per-node", "2"],
            "is not the last checkpoint of run 'demo'",
        ),
        (["--resume", "HEAD"], "is not a checkpoint commit (no Mgit-Run trailer)"),
        (["--resume", "no-such-rev"], "'no-such-rev' is not a commit"),
        (["--nproc-per-node", "2", "--name", "demo", "train:main"], "run 'demo' exists"),
    ]:
        bad = train(killed, *args)
        assert bad.returncode == 2, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and message in bad.stderr, bad.stderr


def test_missing_function_is_a_one_line_error(template: Path, tmp_path: Path) -> None:
    repo = copy(template, tmp_path / "repo")
    for ref, message in [
        ("train:mian", "train:mian: train.py defines no 'mian' at its top level"),
        ("tarin:main", "tarin:main: no module 'tarin'"),
        ("train", "'train' is not a 'module:callable' reference"),
    ]:
        bad = train(repo, "--nproc-per-node", "2", ref)
        assert bad.returncode == 2
        assert last_line(bad).startswith("git-mgit: ") and message in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
    assert run_git("branch", "--list", "runs/*", cwd=repo).stdout == ""


def test_fsdp_checkpoints_a_sharded_folder_and_resumes_exactly(
    template: Path, tmp_path: Path
) -> None:
    """FSDP2 on CPU/gloo: a 2-epoch run, and a run branched from its first epoch's commit."""
    repo = copy(template, tmp_path / "repo")
    done = train(repo, "--nproc-per-node", "2", "--fsdp", "--name", "f", "train:main", "--", "2")
    assert done.returncode == 0, done.stderr
    folder = "checkpoints/f/model"
    files = run_git("ls-tree", "--name-only", f"runs/f:{folder}", cwd=repo).stdout.split()
    # every tensor of this tiny model is small (plan.SMALL): one file, assembled tensor by tensor
    assert files == ["model-00001-of-00001.safetensors", "model.safetensors.index.json"]
    forked = train(repo, "--resume", "runs/f~1", "--name", "g", "--nproc-per-node", "2")
    assert forked.returncode == 0, forked.stderr
    lin = Lineage(find_repo(repo))
    assert_same_tensors(
        load_state_dict(f"runs/f:{folder}", lin),
        load_state_dict("runs/g:checkpoints/g/model", lin),
    )
    assert_same_tensors(
        load_state_dict("runs/f:checkpoints/f/training.safetensors", lin),
        load_state_dict("runs/g:checkpoints/g/training.safetensors", lin),
    )
    g_first = checkpoints(repo, "g")[-1]
    assert (
        run_git("rev-parse", f"{g_first}^", cwd=repo).stdout
        == run_git("rev-parse", "runs/f~1", cwd=repo).stdout
    )  # the new run branches from the checkpoint it resumed
    tree = run_git("rev-parse", "runs/g:checkpoints/g/model", cwd=repo).stdout.strip()
    f_epoch0 = run_git("rev-parse", f"runs/f~1:{folder}", cwd=repo).stdout.strip()
    assert lin.graph.nodes[tree].kind == "folder"
    assert f_epoch0 in lin.graph.parents(tree, (VERSION,))


@pytest.mark.skipif(
    torch.cuda.device_count() < 1, reason="needs a CUDA GPU (NCCL, GPU-to-pinned-memory staging)"
)
def test_nccl_run_killed_and_resumed_is_bit_identical(template: Path, tmp_path: Path) -> None:
    nproc = str(min(2, torch.cuda.device_count()))
    whole, killed = copy(template, tmp_path / "whole"), copy(template, tmp_path / "killed")
    common = ["--nproc-per-node", nproc, "--name", "gpu"]
    assert train(whole, *common, "train:main").returncode == 0
    assert train(killed, *common, "killer:main", env={"KILL_AT": "2:1"}).returncode != 0
    resumed = train(killed, "--resume", "runs/gpu", "--nproc-per-node", nproc, "train:main")
    assert resumed.returncode == 0, resumed.stderr
    for name in ("model.safetensors", "training.safetensors"):
        path = f"checkpoints/gpu/{name}"
        assert smudged(whole, "runs/gpu", path) == smudged(killed, "runs/gpu", path)
