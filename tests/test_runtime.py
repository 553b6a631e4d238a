"""The runtime on real PyTorch models in real git repositories: test, bisect, cascade, loading.

The family of models (tests/runtime_repo.py) is built once per module and
copied for each test; every command runs as a user runs it, `git mgit ...`
in a subprocess, so worker processes, exit codes and messages are the real ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model, records
from git_mgit.lineage.graph import PROVENANCE, VERSION
from git_mgit.runtime import load_models
from tests.gitsandbox import run_git
from tests.mgitrepo import mgit
from tests.runtime_repo import family, isolated_home, plant_fp16_overflow, working_copy

MODELS = ["ft-a", "ft-b", "grand", "head-x", "head-y", "pruned"]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with isolated_home(tmp_path_factory.mktemp("template-home")):
        return family(tmp_path_factory.mktemp("template") / "repo")


@pytest.fixture
def repo(template: Path, tmp_path: Path) -> Path:
    return working_copy(template, tmp_path)


def lineage(repo: Path) -> Lineage:
    return Lineage(find_repo(repo))


def update_base(repo: Path, factor: float = 1.1) -> str:
    state = {k: v * factor for k, v in load_file(repo / "models/base.safetensors").items()}
    return commit_model(
        state, repo / "models/base.safetensors", "update base", lineage=lineage(repo)
    ).version


def edit_config(repo: Path, old: str, new: str) -> None:
    config = repo / "mgit.toml"
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new))
    run_git("commit", "-q", "-am", "edit mgit.toml", cwd=repo)


def cascade_commits(repo: Path, branch: str) -> Counter:
    """old version -> how many commits of the branch re-derived it."""
    log = run_git("log", "--format=%(trailers:key=Mgit-Cascade,valueonly)", branch, cwd=repo)
    return Counter(line.split()[1] for line in log.stdout.splitlines() if line.strip())


# -- git mgit test ------------------------------------------------------------------------------


def test_runs_records_and_reuses_results(repo: Path) -> None:
    first = json.loads(mgit("test", "--json", cwd=repo).stdout)
    assert len(first) == 14  # 7 models x 2 tests (accuracy by type, fp16 on all)
    assert {r["result"] for r in first} == {"pass"} and not any(r["reused"] for r in first)
    assert all(0.0 <= r["metrics"]["accuracy"] <= 1.0 for r in first if r["test"] == "accuracy")
    recorded = lineage(repo).graph.test_results
    assert sum(len(v) for v in recorded.values()) == 14

    again = json.loads(mgit("test", "--json", "--jobs", "2", cwd=repo).stdout)
    assert all(r["reused"] for r in again)
    assert [r["metrics"] for r in again] == [r["metrics"] for r in first]

    # a module the test does not import: still reused; the test's own module: run again
    (repo / "train.py").write_text((repo / "train.py").read_text() + "\n# tweak\n")
    assert all(r["reused"] for r in json.loads(mgit("test", "--json", cwd=repo).stdout))
    (repo / "nets.py").write_text((repo / "nets.py").read_text() + "\n# tweak\n")
    rerun = json.loads(mgit("test", "--json", "--tests", "fp16", cwd=repo).stdout)
    assert len(rerun) == 7 and not any(r["reused"] for r in rerun)


def test_selection_table_and_traversal(repo: Path) -> None:
    out = mgit("test", "base", "--traversal", "provenance", "--models", "ft-", cwd=repo).stdout
    rows = [line for line in out.splitlines() if line.startswith("ft-")]
    assert len(rows) == 4 and all(" pass " in row for row in rows)  # ft-a, ft-b x 2 tests
    assert "4 passed, 0 failed, 0 errors" in out


def test_pending_runs_the_tests_of_merges_marked_possible_conflicts(repo: Path) -> None:
    lin = lineage(repo)
    merged = lin.resolve("ft-a").id
    lin._write({merged: [records.make("possible_conflict", ours="a", theirs="b")]}, "mark")
    rows = json.loads(mgit("test", "--pending", "--json", cwd=repo).stdout)
    assert {(r["version"], r["test"]) for r in rows} == {(merged, "accuracy"), (merged, "fp16")}


def test_failing_and_raising_tests_and_unknown_model(repo: Path) -> None:
    with (repo / "mgit.toml").open("a") as f:
        f.write('\n[tests.broken]\nfunction = "checks:raises"\nmodels = "base"\n')
        f.write('\n[tests.strict]\nfunction = "checks:accuracy"\nmodels = "base"\n')
        f.write('pass = "accuracy >= 0.99"\n')
    proc = mgit("test", "--tests", "broken|strict", "--json", cwd=repo, check=False)
    assert proc.returncode == 1
    by_test = {r["test"]: r for r in json.loads(proc.stdout)}
    assert by_test["broken"]["result"] == "error"
    assert by_test["broken"]["error"] == "ValueError: no validation set"
    assert by_test["strict"]["result"] == "FAIL"
    recorded = {k.split(":")[0] for v in lineage(repo).graph.test_results.values() for k in v}
    assert recorded == {"strict"}  # an error is never recorded as a result

    for args in (["test", "nosuch"], ["cascade", "nosuch"], ["bisect", "--test", "fp16", "nosuch"]):
        proc = mgit(*args, cwd=repo, check=False)
        assert proc.returncode == 2
        assert len(proc.stderr.strip().splitlines()) == 1 and "nosuch" in proc.stderr


# -- git mgit bisect ----------------------------------------------------------------------------


def test_bisect_finds_the_planted_fp16_overflow(repo: Path) -> None:
    made = plant_fp16_overflow(repo)
    planted = made[7]

    found = json.loads(mgit("bisect", "--test", "fp16", "grand", "--json", cwd=repo).stdout)
    assert found["first_bad"] == planted
    linear = json.loads(
        mgit("bisect", "--test", "fp16", "grand", "--linear", "--json", cwd=repo).stdout
    )
    assert linear["first_bad"] == planted
    assert found["candidates"] == linear["candidates"] == 15  # base, ft-a, grand x 13
    assert found["runs"] <= 5 < linear["runs"]
    # the second search reuses the first one's recorded verdicts
    assert linear["executed"] < linear["runs"]

    narrowed = mgit("bisect", "--test", "fp16", "--bad", "grand", "--good", made[5], cwd=repo)
    assert f"first failing version: grand@{planted[:7]}" in narrowed.stdout

    edit_config(repo, 'function = "checks:fp16_finite"', 'function = "checks:raises"')
    proc = mgit("bisect", "--test", "fp16", "grand", cwd=repo, check=False)
    assert proc.returncode == 2 and "ValueError: no validation set" in proc.stderr


# -- git mgit cascade ---------------------------------------------------------------------------


def test_cascade_rederives_every_descendant_in_parallel(repo: Path, tmp_path: Path) -> None:
    before = lineage(repo)
    old = {m: before.resolve(m).id for m in ["base", *MODELS]}
    new_base = update_base(repo)
    head = run_git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    log = tmp_path / "calls.log"
    env_proc = _mgit_env(repo, {"CASCADE_LOG": str(log)}, "cascade", "base", "--jobs", "2")
    assert env_proc.returncode == 0, env_proc.stderr
    branch = re.search(r"onto branch (\S+)", env_proc.stdout).group(1)
    assert branch == f"mgit/cascade/base-{new_base[:8]}"

    # nothing the user has checked out changed
    assert run_git("rev-parse", "HEAD", cwd=repo).stdout.strip() == head
    assert run_git("status", "--porcelain", cwd=repo).stdout == ""

    calls = [line.split() for line in log.read_text().splitlines()]
    assert Counter(c[0] for c in calls) == {"finetune": 2, "frozen": 1, "prune": 1, "heads": 1}
    assert len({pid for _, pid in calls}) == 2  # two worker processes shared the work
    assert cascade_commits(repo, branch) == Counter({old[m]: 1 for m in MODELS})

    lin = lineage(repo)
    new = {m: lin.resolve(f"{branch}:models/{m}.safetensors").id for m in MODELS}
    expected_parent = {m: new_base for m in MODELS} | {"grand": new["ft-a"]}
    for m in MODELS:
        assert lin.graph.parents(new[m], (PROVENANCE,)) == [expected_parent[m]]
        assert old[m] in lin.graph.parents(new[m], (VERSION,))

    run_git("checkout", "-q", branch, cwd=repo)
    base = load_file(repo / "models/base.safetensors")
    frozen = load_file(repo / "models/ft-b.safetensors")
    assert torch.equal(frozen["body.weight"], base["body.weight"])  # derived from the new base
    assert not torch.equal(frozen["head.weight"], base["head.weight"])
    hx, hy = (load_file(repo / f"models/head-{h}.safetensors") for h in "xy")
    assert torch.equal(hx["body.weight"], hy["body.weight"])  # one MTL call: a shared body
    assert torch.allclose(hy["head.bias"] - hx["head.bias"], torch.ones(4))
    mgit("fsck", cwd=repo)
    merged = mgit("cascade", "base", cwd=repo)  # the branch holds no old version: no work
    assert "nothing to re-derive" in merged.stdout

    run_git("checkout", "-q", "main", cwd=repo)
    again = mgit("cascade", "base", cwd=repo)
    assert "6 from an earlier run" in again.stdout
    assert cascade_commits(repo, branch) == Counter({old[m]: 1 for m in MODELS})


def _mgit_env(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "mgit", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )


def test_cascade_killed_with_sigkill_resumes_without_duplicates(repo: Path, tmp_path: Path) -> None:
    old = {m: lineage(repo).resolve(m).id for m in MODELS}
    edit_config(repo, 'creation = "train:prune"', 'creation = "train:kill_parent_once"')
    update_base(repo)
    env = {"CASCADE_MARKER": str(tmp_path / "killed")}
    killed = _mgit_env(repo, env, "cascade", "base")
    assert killed.returncode in (-9, 128 + 9)  # SIGKILL, from inside the creation function
    branch = re.search(r"onto branch (\S+)", killed.stdout).group(1)
    done_before = cascade_commits(repo, branch)
    assert 0 < len(done_before) < len(MODELS) and set(done_before.values()) == {1}

    resumed = _mgit_env(repo, env, "cascade", "base")
    assert resumed.returncode == 0, resumed.stderr
    assert f"({len(done_before)} from an earlier run)" in resumed.stdout
    assert cascade_commits(repo, branch) == Counter({old[m]: 1 for m in MODELS})
    lin = lineage(repo)
    for m in MODELS:
        new = lin.resolve(f"{branch}:models/{m}.safetensors").id
        assert lin.graph.parents(new, (PROVENANCE,)), m


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'creation = "train:frozen"',
            'creation = "train:broken"',
            "train:broken failed on ft-b: RuntimeError: the learning rate schedule is missing",
        ),
        ('creation = "train:frozen"', 'creation = "train:nope"', "train:nope: train has no 'nope'"),
        (
            'creation = "train:heads"\n',
            "",
            "heads has no creation function: add creation = 'module:function' to [groups.heads]",
        ),
    ],
)
def test_cascade_stops_at_a_bad_creation_function(
    repo: Path, old: str, new: str, message: str
) -> None:
    edit_config(repo, old, new)
    update_base(repo)
    proc = mgit("cascade", "base", cwd=repo, check=False)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert message in proc.stderr and "run the same command again" in proc.stderr
    branch = re.search(r"onto branch (\S+)", proc.stdout).group(1)
    kept = cascade_commits(repo, branch)
    assert kept and set(kept.values()) == {1}  # the finished versions are kept

    edit_config(
        repo,
        new or "[groups.heads]\n",
        old if new else '[groups.heads]\ncreation = "train:heads"\n',
    )
    finished = mgit("cascade", "base", cwd=repo)
    assert f"({len(kept)} from an earlier run)" in finished.stdout
    assert len(cascade_commits(repo, branch)) == len(MODELS)


def test_cascade_skip_stop_to_and_branch(repo: Path) -> None:
    old = {m: lineage(repo).resolve(m).id for m in MODELS}
    new_base = update_base(repo)
    update_base(repo, 0.5)  # a later version: --to picks the one in between
    args = ["--to", new_base, "--skip", "pruned|head", "--stop", "ft-a", "--branch", "mine"]
    plan = mgit("cascade", "base", *args, "-n", cwd=repo).stdout
    listed = [line.split()[0].rstrip(",") for line in plan.splitlines()[1:]]
    assert sorted(listed) == ["ft-a", "ft-b", "head-x", "head-y", "pruned"]  # grand: below --stop
    assert plan.count("(skipped)") == 3

    mgit("cascade", "base", *args, cwd=repo)
    assert cascade_commits(repo, "mine") == Counter({old["ft-a"]: 1, old["ft-b"]: 1})
    lin = lineage(repo)
    made = lin.resolve("mine:models/ft-b.safetensors").id
    assert lin.graph.parents(made, (PROVENANCE,)) == [new_base]


# -- shared-weight loading ----------------------------------------------------------------------


def test_load_models_shares_equal_tensors(repo: Path) -> None:
    lin = lineage(repo)
    loaded = load_models(["base", "ft-b", "ft-a"], lin)
    base, frozen, full = (loaded.models[m] for m in ("base", "ft-b", "ft-a"))
    for name in ("body.weight", "body.bias"):  # frozen while fine-tuning ft-b
        assert frozen[name].data_ptr() == base[name].data_ptr()
    assert full["body.weight"].data_ptr() != base["body.weight"].data_ptr()
    for name, t in frozen.items():
        assert torch.equal(t, load_file(repo / "models/ft-b.safetensors")[name])
    one = sum(t.numel() * t.element_size() for t in base.values())
    shared = base["body.weight"].nbytes + base["body.bias"].nbytes
    assert loaded.total_bytes == 3 * one and loaded.saved_bytes == shared
    assert loaded.shared_tensors == 2 and "saved" in loaded.summary()
