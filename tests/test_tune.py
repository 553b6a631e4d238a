"""`git mgit tune`: MLtuner's loop on real branches of a real repository, with real torch.

The summarizer and TUNABLES.toml are checked on their own; then docs/tuning.md's
`tune_demo.py` and `TUNABLES.toml` run verbatim: the clearly best learning rate
is kept, the huge one diverges, only the run branch is left, and after
`git mgit gc --prune now` the pruned trials' objects are gone while every
commit of the run still loads. A full-batch L1 regression, whose loss
flattens at a level set by the learning rate, shows a re-tuning pick a
smaller rate, and, without re-tuning, that the kept branch trains exactly
as the kept setting would from the start, on the thread count its
checkpoints record (another than this process's: torch's sums differ by it).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage
from git_mgit.modelfile import manifest as mf
from git_mgit.runtime.training import load_checkpoint
from git_mgit.runtime.tuning import searcher, tunables
from git_mgit.runtime.tuning.summarize import (
    CONVERGING,
    DIVERGED,
    UNSTABLE,
    downsample,
    summarize,
)
from git_mgit.store.chunkstore import ChunkStore
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo, mgit
from tests.runtime_repo import isolated_home, working_copy

DOCS = Path(__file__).parents[1] / "docs" / "tuning.md"

PLATEAU = """
import torch

from git_mgit.runtime.tuning import Workload

X = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
Y = X @ torch.randn(8, 1, generator=torch.Generator().manual_seed(1))


def optimizer(model, tunables):
    return torch.optim.SGD(model.parameters(), lr=tunables["lr"])


def step(model, opt, clock, tunables):
    loss = (model(X) - Y).abs().mean()  # full batch, L1: a constant rate ends on a plateau
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def workload():
    return Workload(torch.nn.Linear(8, 1), optimizer, step)


def not_a_workload():
    return torch.nn.Linear(8, 1)
"""

PLATEAU_TOML = """
[tune]
clocks = 300
epoch = 50

[tunables]
lr = [1.0, 0.3, 0.1, 0.03, 0.01]
"""


def from_docs(lang: str, caption: str) -> str:
    """The code block after `caption` in docs/tuning.md."""
    text = DOCS.read_text()
    found = re.search(rf"```{lang}\n(.*?)```", text[text.index(caption) :], re.S)
    assert found, f"docs/tuning.md has no {lang} block after {caption}"
    return found.group(1)


def tune(repo: Path, *args: str, threads: int = 1) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}  # tiny models: one is fastest
    return subprocess.run(
        ["git", "mgit", "tune", *args], cwd=repo, env=env, capture_output=True, text=True
    )


def tuned(repo: Path, *args: str, threads: int = 1) -> dict:
    done = tune(repo, "--json", *args, threads=threads)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def trailers(repo: Path, rev: str) -> list[str]:
    """Each first-parent commit's Mgit-Tune trailer ('' for none), oldest first."""
    log = run_git(
        "log",
        "--first-parent",
        "--format=%x00%(trailers:key=Mgit-Tune,valueonly)",
        rev,
        cwd=repo,
    )
    return [t.strip() for t in log.stdout.split("\0")[1:]][::-1]


# -- the summarizer ------------------------------------------------------------------------------


def test_summarizer_speed_and_labels() -> None:
    line = summarize([20.0 - i for i in range(20)])  # windows 19.5, 17.5, ..., 1.5
    assert line.label == CONVERGING and line.range == -18 and line.noise == 0
    assert line.speed == pytest.approx(1.0)  # 18 down over 18 clocks between window centres
    assert summarize([20.0 - i for i in range(20)], [0.5 * i for i in range(20)]).speed == (
        pytest.approx(2.0)
    )
    assert summarize([10 * 0.9**i for i in range(40)]).label == CONVERGING
    bumpy = [10 * 0.95**i + (3 if i % 8 < 4 else 0) for i in range(40)]  # falls, jumps back up
    noisy = summarize(bumpy)
    assert noisy.label == UNSTABLE and noisy.noise > abs(noisy.range) / 10
    assert noisy.speed == max(0.0, (-noisy.range - noisy.noise) / 36)
    assert summarize([1.0] * 20).label == UNSTABLE
    cycle = summarize([0.4484 + 1e-9 * (i % 2) - 1e-13 * i for i in range(40)])
    assert cycle.label == UNSTABLE  # falls by rounding only: flat
    assert summarize([5.0, 4.0] + [3.0] * 18).label == CONVERGING  # fell, then flat: no uptick
    for bad in (math.nan, math.inf):
        gone = summarize([1.0, 0.9, bad])  # a branch stops at its first non-finite loss
        assert gone.label == DIVERGED and gone.speed == 0 and len(gone.windows) == 3
    with pytest.raises(ValueError):
        downsample([1.0] * 9)


# -- TUNABLES.toml and searchers -----------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "TUNABLES.toml"
    path.write_text(text)
    return path


def test_tunables_and_searchers(tmp_path: Path) -> None:
    plan = tunables.load(
        write(
            tmp_path,
            "[tune]\nclocks = 200\n\n[tunables]\nlr = [0.1, 0.01]\nmomentum = [0.0, 0.9]\n",
        )
    )
    assert (plan.epoch, plan.initial_trial, plan.window, plan.searcher) == (20, 10, 20, "grid")
    grid = searcher.settings(plan, 0, 1)
    assert grid[0] == {"lr": 0.1, "momentum": 0.0} and len(grid) == 4
    assert searcher.settings(plan, 0, 2, limit=3) == grid[:3]
    plan = tunables.load(
        write(
            tmp_path,
            '[tune]\nclocks = 200\nsearcher = "random"\ntrials = 3\n\n[tunables]\n'
            "lr = { log_uniform = [1e-4, 1.0] }\nbatch = [16, 32]\n",
        )
    )
    drawn = searcher.settings(plan, 7, 1)
    assert drawn == searcher.settings(plan, 7, 1) != searcher.settings(plan, 7, 2)
    assert len(drawn) == 3 and all(1e-4 <= d["lr"] <= 1 and d["batch"] in (16, 32) for d in drawn)
    assert searcher.describe({"lr": 0.001, "batch": 16}) == "batch=16 lr=0.001"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[tune]\nclocks = 100\n", "[tunables] is empty"),
        ("[tunables]\nlr = [0.1]\n", "needs a [tune] table"),
        ("[tune]\nepoch = 10\n[tunables]\nlr = [0.1]\n", "clocks is required"),
        ("[tune]\nclocks = 100\ninitial_trial = 5\n[tunables]\nlr = [0.1]\n", "at least 10"),
        ("[tune]\nclocks = 100\nlr = 0.1\n[tunables]\nlr = [0.1]\n", "no key 'lr'"),
        ("[tune]\nclocks = 100\n[tunables]\nlr = { uniform = [0, 1] }\n", 'searcher = "grid"'),
        ("[tune]\nclocks = 100\n[tunables]\nlr = [0.1\n", "not TOML"),
    ],
)
def test_tunables_errors_name_the_file_and_key(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(tunables.TunablesError) as err:
        tunables.load(path)
    assert str(path) in str(err.value) and says in str(err.value)


# -- the docs' workload, end to end --------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The docs' example tuned once: its repository and the JSON summary."""
    with isolated_home(tmp_path_factory.mktemp("tune-home")):
        repo = init_mgit_repo(tmp_path_factory.mktemp("tune") / "repo")
        (repo / "tune_demo.py").write_text(from_docs("python", "`tune_demo.py`"))
        (repo / "TUNABLES.toml").write_text(from_docs("toml", "`TUNABLES.toml`"))
        run_git("add", ".", cwd=repo)
        run_git("commit", "-q", "-m", "tuning workload", cwd=repo)
        return repo, tuned(
            repo, "--tunables", "TUNABLES.toml", "--name", "lr", "tune_demo:workload"
        )


def losers(summary: dict) -> list[dict]:
    return [t for r in summary["rounds"] for t in r["trials"] if t["trial"] != r["kept"]]


def test_tune_keeps_the_best_rate_on_the_run_branch_alone(demo: tuple[Path, dict]) -> None:
    repo, summary = demo
    first = summary["rounds"][0]
    labels = {t["tunables"]["lr"]: t["label"] for t in first["trials"]}
    assert labels[1000.0] == DIVERGED and labels[0.1] == CONVERGING
    kept = first["trials"][first["kept"]]
    assert kept["tunables"] == {"lr": 0.1} and first["snapshot"] != kept["commit"]
    assert summary["clocks"] == 600 and summary["pruned_clocks"] > 0
    heads = run_git("for-each-ref", "--format=%(refname)", "refs/heads/", cwd=repo).stdout.split()
    assert heads == ["refs/heads/main", "refs/heads/runs/lr"]  # every trial branch deleted
    chain = run_git("rev-list", "--first-parent", "--reverse", "main..runs/lr", cwd=repo)
    commits = chain.stdout.split()
    assert commits[0] == first["snapshot"] and commits[1] == kept["commit"]
    marks = trailers(repo, "main..runs/lr")
    assert marks[:2] == ["round=1 snapshot", "round=1 trial=2 label=converging lr=0.1"]
    retuned = sum(r["kept"] is not None for r in summary["rounds"][1:])
    assert commits[-1] == summary["commit"] and len(commits) == 2 + 600 // 100 + retuned
    for r in summary["rounds"][1:]:  # a re-tuning starts from an epoch's checkpoint
        assert marks[commits.index(r["snapshot"])] == f"round={r['round']} snapshot"
    model = run_git("rev-parse", f"{kept['commit']}:checkpoints/lr/model.safetensors", cwd=repo)
    details = Lineage(find_repo(repo)).graph.nodes[model.stdout.strip()].details["tune"]
    assert (details["round"], details["trial"], details["tunables"]) == (1, 2, {"lr": 0.1})
    assert details["label"] == CONVERGING and len(details["losses"]) == 10
    reachable = set(run_git("rev-list", "--all", cwd=repo).stdout.split())
    assert not reachable & {t["commit"] for t in losers(summary)}


def chunk_hashes(repo: Path, blobs: list[str]) -> set[bytes]:
    return {
        c.content_hash
        for b in blobs
        for c in mf.parse(run_git("cat-file", "blob", b, cwd=repo).stdout.encode()).chunks()
    }


def test_gc_reclaims_pruned_trials(demo: tuple[Path, dict], tmp_path: Path) -> None:
    template, summary = demo
    repo = working_copy(template, tmp_path)
    pruned = losers(summary)
    trees = run_git("rev-list", "main..runs/lr", cwd=repo).stdout.split()
    kept = [
        run_git("rev-parse", f"{c}:checkpoints/lr/{f}", cwd=repo).stdout.strip()
        for c in trees
        for f in ("model.safetensors", "training.safetensors")
    ]
    gone = chunk_hashes(repo, [t["model"] for t in pruned]) - chunk_hashes(repo, kept)
    assert gone, "every pruned trial shares all its tensors with a kept model"
    mgit("gc", "--prune", "now", cwd=repo)
    for t in pruned:
        for oid in (t["commit"], t["model"]):
            assert run_git("cat-file", "-e", oid, cwd=repo, check=False).returncode != 0
    store = ChunkStore(find_repo(repo))
    try:
        assert not [h for h in gone if store.locate(h)]
    finally:
        store.close()
    assert "0 problems" in mgit("fsck", cwd=repo).stdout
    for commit in trees:
        resumed = load_checkpoint(repo, commit)
        assert resumed.snapshot is not None and resumed.snapshot.model
    for commit in trees:  # smudge checks every tensor object against its hash
        run_git("checkout", "-q", commit, cwd=repo)
        assert (repo / "checkpoints" / "lr" / "model.safetensors").stat().st_size > 0


# -- re-tuning, and the kept branch against training from the start ------------------------------


@pytest.fixture
def plateau(tmp_path: Path) -> Path:
    repo = init_mgit_repo(tmp_path / "repo")
    (repo / "plateau.py").write_text(PLATEAU)
    (repo / "P.toml").write_text(PLATEAU_TOML)
    run_git("add", ".", cwd=repo)
    run_git("commit", "-q", "-m", "a workload that plateaus", cwd=repo)
    return repo


def test_retunes_on_a_plateau(plateau: Path) -> None:
    summary = tuned(plateau, "--tunables", "P.toml", "--name", "p", "plateau:workload")
    first, second = summary["rounds"][:2]
    rate = [r["trials"][r["kept"]]["tunables"]["lr"] for r in (first, second)]
    assert rate[1] < rate[0], "the re-tuning did not lower the learning rate"
    assert second["clock"] > 0 and second["clock"] % 50 == 0
    assert f"round=2 trial={second['kept']} label=converging" in " ".join(
        trailers(plateau, "runs/p")
    )
    assert summary["metrics"]["loss"] < 0.02  # lr=0.3 alone stays at 0.137


def test_kept_branch_trains_as_its_setting_from_the_start(plateau: Path) -> None:
    (plateau / "P.toml").write_text(
        PLATEAU_TOML.replace("epoch = 50", "epoch = 50\nretune = false")
    )
    here = torch.get_num_threads()
    other = 1 if here > 1 else 2  # the tuning computes on another count than this process
    summary = tuned(
        plateau, "--tunables", "P.toml", "--name", "fixed", "plateau:workload", threads=other
    )
    assert len(summary["rounds"]) == 1 and summary["tunables"] == {"lr": 0.3}
    kept = load_checkpoint(plateau, "runs/fixed")
    assert kept.info.threads == other  # recorded with every checkpoint, and used again here
    sys.path.insert(0, str(plateau))
    torch.set_num_threads(kept.info.threads)
    try:
        import plateau as work  # type: ignore[import-not-found]

        torch.manual_seed(0)  # what --seed 0 does before calling workload()
        w = work.workload()
        opt = w.optimizer(w.model, {"lr": 0.3})
        for clock in range(300):
            w.step(w.model, opt, clock, {"lr": 0.3})
    finally:
        torch.set_num_threads(here)
        sys.path.remove(str(plateau))
        sys.modules.pop("plateau", None)
    tuned_model = kept.snapshot
    assert tuned_model is not None
    for name, value in w.model.state_dict().items():
        assert torch.equal(tuned_model.model[name], value), name


# -- errors ------------------------------------------------------------------------------------


def test_bad_input_gets_one_line_naming_the_fix(plateau: Path) -> None:
    toml = ["--tunables", "P.toml"]
    cases = [
        (["--tunables", "missing.toml", "plateau:workload"], "missing.toml: no such file"),
        ([*toml, "nowhere:workload"], "no module 'nowhere'"),
        ([*toml, "plateau:not_a_workload"], "returned Linear, not a Workload"),
        ([*toml, "plateau:absent"], "plateau has no 'absent'"),
    ]
    for args, says in cases:
        done = tune(plateau, "--name", "bad", *args)
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    (plateau / "P.toml").write_text("[tune]\nclocks = 40\n\n[tunables]\nlr = [1e6]\n")
    done = tune(plateau, "--name", "huge", *toml, "plateau:workload")
    assert done.returncode == 2 and "no setting converged within 40 clocks" in done.stderr
    assert "widen the tunables' range" in done.stderr
    refs = run_git("for-each-ref", "refs/heads/runs/", cwd=plateau).stdout
    assert refs == "", "a tuning that kept nothing left branches behind"
    run_git("branch", "runs/taken", cwd=plateau)
    done = tune(plateau, "--name", "taken", *toml, "plateau:workload")
    assert done.returncode == 2 and "runs/taken exists; pick another --name" in done.stderr
