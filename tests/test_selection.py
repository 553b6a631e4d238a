"""`git mgit select`: model hopper parallelism on real worker processes and a real repository.

The workload is docs/selection.md's `mop.py` and `space.toml`, run verbatim:
8 configurations, 2 workers (partitions), 3 epochs. A hopped configuration's
weights are compared bit for bit with the same configuration trained in one
process over the partitions in its recorded visit order; a worker is killed
mid-run and the recorded schedule must still show every configuration on
every partition exactly once per epoch.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage
from git_mgit.runtime import load_state_dict
from git_mgit.runtime.selection.schedule import FixedScheduler, RandomScheduler, Unit
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo
from tests.runtime_repo import isolated_home, working_copy

DOCS = Path(__file__).parents[1] / "docs" / "selection.md"
WORKERS, CONFIGS, EPOCHS = 2, 8, 3


def documented(lang: str, after: str) -> str:
    text = DOCS.read_text()
    match = re.search(rf"```{lang}\n(.*?)```", text[text.index(after) :], re.S)
    assert match, f"docs/selection.md lost its {after}"
    return match.group(1)


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with isolated_home(tmp_path_factory.mktemp("select-home")):
        repo = init_mgit_repo(tmp_path_factory.mktemp("select") / "repo")
        (repo / "mop.py").write_text(documented("python", "`mop.py`"))
        (repo / "space.toml").write_text(documented("toml", "`space.toml`"))
        run_git("add", "mop.py", "space.toml", cwd=repo)
        run_git("commit", "-q", "-m", "selection workload", cwd=repo)
        return repo


def select(repo: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["git", "mgit", "select", "--space", "space.toml", "--workers", str(WORKERS), *args],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out, err


def visits(repo: Path, run: str) -> list[list[int]]:
    """The recorded visit order of each epoch, oldest first."""
    log = run_git("log", "--format=%(trailers:key=Mgit-Visits,valueonly)", f"runs/{run}", cwd=repo)
    return [[int(p) for p in line.split(",")] for line in log.stdout.split()][::-1]


def sequential(repo: Path, config: dict, orders: list[list[int]]) -> dict[str, torch.Tensor]:
    """The configuration trained in this process alone, partition after partition."""
    sys.path.insert(0, str(repo))
    try:
        import mop  # type: ignore[import-not-found]

        torch.set_num_threads(1)  # as each worker runs (cores / workers on 2 cores)
        data = [mop.partition(j, WORKERS) for j in range(WORKERS)]
        torch.manual_seed(config["seed"])
        model = mop.model(config)
        opt = mop.optimizer(model, config)
        for order in orders:
            for j in order:
                mop.train_unit(model, opt, data[j], config)
            mop.evaluate(model, config)
        return model.state_dict()
    finally:
        sys.path.remove(str(repo))
        sys.modules.pop("mop", None)


def test_hopped_configurations_equal_sequential_training_and_replay_exactly(
    workload: Path, tmp_path: Path
) -> None:
    repo = working_copy(workload, tmp_path)
    out, _err = finish(select(repo, "--name", "s1", "--json"))
    summary = json.loads(out)
    assert len(summary["configs"]) == CONFIGS and summary["events"] == []
    assert Path(summary["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lin = Lineage(find_repo(repo))
    for c in summary["configs"]:
        orders = visits(repo, c["run"])
        assert orders == c["visits"] and len(orders) == EPOCHS
        assert all(sorted(o) == list(range(WORKERS)) for o in orders)
        for epoch, order in enumerate(orders):  # the schedule is in the lineage notes too
            rev = f"runs/{c['run']}~{EPOCHS - 1 - epoch}:checkpoints/{c['run']}/model.safetensors"
            node = lin.graph.nodes[run_git("rev-parse", rev, cwd=repo).stdout.strip()]
            schedule = node.details["schedule"]
            assert (schedule["selection"], schedule["epoch"]) == ("s1", epoch)
            assert schedule["visits"] == order
    hopped = [c for c in summary["configs"] if c["visits"][0] != c["visits"][1]]
    assert hopped, "every configuration kept one order: nothing hopped differently"
    for c in (summary["configs"][0], hopped[0]):
        weights = load_state_dict(f"runs/{c['run']}:checkpoints/{c['run']}/model.safetensors", lin)
        expected = sequential(repo, c["values"], c["visits"])
        assert weights.keys() == expected.keys()
        for name, t in expected.items():
            assert torch.equal(weights[name], t), (c["run"], name)

    table = finish(select(repo, "--replay", "s1", "--name", "s2"))[0]
    assert re.search(r"^best: c\d\d \(runs/s2-c\d\d\) accuracy=", table, re.M)
    for i in range(CONFIGS):  # the same tensors (the files differ only in the run's name)
        for name in ("model", "training"):
            a = load_state_dict(f"runs/s1-c{i:02d}:checkpoints/s1-c{i:02d}/{name}.safetensors", lin)
            b = load_state_dict(f"runs/s2-c{i:02d}:checkpoints/s2-c{i:02d}/{name}.safetensors", lin)
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (i, name)
        assert visits(repo, f"s2-c{i:02d}") == visits(repo, f"s1-c{i:02d}")


def _workers(repo: Path) -> list[int]:
    """Pids of this repository's selection workers."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if b"git_mgit.runtime.selection.worker" in cmd and cwd == str(repo):
            out.append(int(pid))
    return out


def test_a_killed_worker_is_restarted_and_every_unit_runs_once(
    workload: Path, tmp_path: Path
) -> None:
    repo = working_copy(workload, tmp_path)
    proc = select(repo, "--name", "k", "--json", "--seed", "3")
    deadline = time.monotonic() + 120
    while len(_workers(repo)) < WORKERS and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(3)  # into the run: units are training
    victim = _workers(repo)[0]
    os.kill(victim, signal.SIGKILL)
    out, err = finish(proc)
    summary = json.loads(out)
    assert len(summary["events"]) == 1 and "died (exit -9)" in summary["events"][0], err
    assert "restarting it" in err
    for c in summary["configs"]:
        orders = visits(repo, c["run"])
        assert len(orders) == EPOCHS and len(c["history"]) == EPOCHS
        for order in orders:  # every partition exactly once per epoch
            assert sorted(order) == list(range(WORKERS)), (c["run"], orders)


# -- the schedulers, without processes ---------------------------------------------------------


def _drive(sched, workers: int, seed: int) -> list[Unit]:
    """Run a schedule to its end, finishing running units in a random order."""
    rng, running, order = random.Random(seed), {}, []
    while not sched.done:
        for w in range(workers):
            if w not in running and (u := sched.next_for(w)) is not None:
                assert not any(r.config == u.config for r in running.values())  # isolation
                running[w] = u
                order.append(u)
        w = rng.choice(sorted(running))
        sched.finished(running.pop(w))
    return order


def test_random_scheduler_keeps_mops_invariants_and_survives_failures() -> None:
    sched = RandomScheduler(range(5), 3, 0, random.Random(1))
    first = sched.next_for(0)
    assert first is not None and first.partition == 0
    sched.failed(first)  # its worker died: queued again
    units = _drive(sched, 3, 2)
    assert sorted((u.config, u.partition) for u in units) == [
        (c, p) for c in range(5) for p in range(3)
    ]
    assert all(sorted(v) == [0, 1, 2] for v in sched.visits.values())


def test_fixed_scheduler_follows_the_recorded_orders() -> None:
    orders = {0: [1, 0, 2], 1: [0, 2, 1], 2: [2, 1, 0]}
    sched = FixedScheduler(orders, 3, 0)
    _drive(sched, 3, 5)
    assert sched.visits == orders
    with pytest.raises(ValueError, match="is not every one of 3 partitions once"):
        FixedScheduler({0: [0, 0, 1]}, 3, 0)
