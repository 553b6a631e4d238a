"""`git mgit replay`: hindsight logging by parallel replay from checkpoint commits.

The recorded run is docs/training.md's `classify.py`, run verbatim for 8
epochs; a log statement is added and the run replayed by 4 workers, each
restoring the checkpoint before its segment. The unit tests check the
segment planning and the checkpointer's replay mode without processes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from git_mgit.gitcmd import find_repo
from git_mgit.runtime.training import Checkpointer, layout, runs
from git_mgit.runtime.training.layout import CheckpointError, Info, Position
from git_mgit.runtime.training.replay import Recording, plan
from git_mgit.runtime.training.segment import ENV, Segment, read_record
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo
from tests.runtime_repo import isolated_home, working_copy
from tests.test_training_checkpointer import loader, model_and_optimizer
from tests.test_training_run import (  # noqa: F401 - template: a fixture
    copy,
    documented_python,
    template,
    train,
)

LOG_LINE = '        print(f"epoch {epoch}: weight norm {model[0].weight.norm():.4f}")\n'


def replay(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "mgit", "replay", *args], cwd=repo, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose runs/demo is classify.py's 8-epoch run; the working tree then has
    one more log statement, uncommitted, as a user would have it."""
    with isolated_home(tmp_path_factory.mktemp("replay-home")):
        repo = init_mgit_repo(tmp_path_factory.mktemp("replay") / "repo")
        script = documented_python("A script with its own loop")
        (repo / "classify.py").write_text(script)
        run_git("add", "classify.py", cwd=repo)
        run_git("commit", "-q", "-m", "classify.py", cwd=repo)
        done = subprocess.run(  # one thread: its checkpoints record it, and 4 replay workers
            [sys.executable, "classify.py", "8"],  # on 2 cores then use as many, not 4 x 2
            cwd=repo,
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert done.returncode == 0, done.stderr
        loop_end = '            ckpt.step({"loss": loss})\n'
        assert script.count(loop_end) == 1
        (repo / "classify.py").write_text(script.replace(loop_end, loop_end + LOG_LINE))
        return repo


def test_replay_of_8_epochs_by_4_workers_matches_the_recording(
    recorded: Path, tmp_path: Path
) -> None:
    repo = working_copy(recorded, tmp_path)
    tip = run_git("rev-parse", "runs/demo", cwd=repo).stdout
    done = replay(repo, "demo", "--jobs", "4", "--", sys.executable, "classify.py", "8")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # the new log line, once per epoch, in epoch order although 4 workers printed them
    norms = re.findall(r"^epoch (\d+): weight norm [0-9.]+$", out, re.M)
    assert norms == [str(e) for e in range(8)]
    headers = re.findall(r"^== epochs (\d+)\.\.(\d+) ==$", out, re.M)
    assert headers == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7")]
    rows = re.findall(r"^(\d+)\s+(\d+)\s+accuracy=\S+ loss=\S+\s+(\S+)$", out, re.M)
    assert rows == [(str(e), str(16 * (e + 1)), "identical") for e in range(8)]
    summary = re.search(
        r"replayed 8 epoch\(s\) in ([0-9.]+) s with 4 worker\(s\) \(each ([0-9.]+)-([0-9.]+) s, "
        r"([0-9.]+) s in all\); every epoch identical to the recording",
        out,
    )
    assert summary, out
    wall, longest, total = (float(summary.group(i)) for i in (1, 3, 4))
    assert longest <= wall <= total  # the workers ran at the same time
    assert "warning" not in done.stderr
    assert "1 file changed, 1 insertion(+)" in done.stderr  # the edit, against the recorded code
    # nothing was committed, and the working tree still has the edit
    assert run_git("rev-parse", "runs/demo", cwd=repo).stdout == tip
    assert (
        len(
            run_git(
                "log", "--format=%H", "--grep=^Mgit-Run: demo$", "runs/demo", cwd=repo
            ).stdout.split()
        )
        == 8
    )
    assert run_git("status", "--porcelain", cwd=repo).stdout == " M classify.py\n"


def test_replay_of_some_epochs_as_json_and_with_the_recorded_values(
    recorded: Path, tmp_path: Path
) -> None:
    repo = working_copy(recorded, tmp_path)
    done = replay(
        repo, "runs/demo", "--epochs", "5..6", "-j", "1", "--json", "--",
        sys.executable, "classify.py", "8",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    git = find_repo(repo)
    tip = runs.find(git, "runs/demo~1")  # epoch 6's end
    assert [w["first"] for w in report["workers"]] == [5]
    assert report["workers"][0]["resume"] == runs.find(git, "runs/demo~3").commit  # epoch 4's end
    assert [e["epoch"] for e in report["epochs"]] == [5, 6]
    assert all(e["identical"] for e in report["epochs"])
    assert report["epochs"][1]["replayed"] == tip.info.metrics
    assert report["epochs"][1]["global_step"] == tip.info.position.global_step == 112


def test_changed_training_is_reported_as_divergence(recorded: Path, tmp_path: Path) -> None:
    """An edit that changes what is trained (the loss) is caught epoch by epoch. (A new
    learning rate would not be: the optimizer's state, lr included, is restored.)"""
    repo = working_copy(recorded, tmp_path)
    script = (repo / "classify.py").read_text()
    loss = "cross_entropy(out, yb)"
    assert loss in script
    (repo / "classify.py").write_text(
        script.replace(loss, "cross_entropy(out, yb, label_smoothing=0.1)")
    )
    logs = tmp_path / "logs"
    args = ["--epochs", "7", "--logs", str(logs), "--", sys.executable, "classify.py"]
    warned = replay(repo, "demo", *args)
    checked = replay(repo, "demo", "--check", *args)
    assert warned.returncode == 0, warned.stderr
    assert "git-mgit: warning: epoch 7 differs from the recording: " in warned.stderr
    assert "loss: " in warned.stderr.splitlines()[-1]
    assert re.search(r"^7\s+128\s+.*DIFFERS: accuracy=", warned.stdout, re.M)
    assert checked.returncode == 1
    assert (logs / "segment-0.log").read_text().startswith("epoch 7: weight norm")
    assert len(read_record(str(logs / "segment-0.jsonl"))) == 1


def test_bad_replays_fail_with_one_line(recorded: Path, tmp_path: Path) -> None:
    repo = working_copy(recorded, tmp_path)
    for args, message in [
        (["nope"], "'nope' is neither a run (no runs/nope) nor a commit"),
        (["main"], "'main' has no end-of-epoch checkpoint commit"),
        (["demo", "--epochs", "6..9"], "the recording ends with epoch 7"),
        (["demo", "--epochs", "x"], "--epochs 'x': expected A..B"),
        (["demo"], "give its command: git mgit replay demo -- python train.py"),
        (["demo", "--jobs", "0", "--", "python"], "--jobs must be at least 1"),
        (["demo", "--", "no-such-program-here"], "cannot start 'no-such-program-here'"),
    ]:
        bad = replay(repo, *args)
        assert bad.returncode == 2, (args, bad.stderr)
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, bad.stderr)
    failed = replay(
        repo, "demo", "--epochs", "3", "--", sys.executable, "-c", "raise SystemExit(3)"
    )
    assert failed.returncode == 1
    assert "the worker replaying epochs 3..3 failed (exit 3)" in failed.stderr
    assert "epoch 3 differs from the recording: its worker recorded no metrics" in failed.stderr


def test_a_git_mgit_train_run_replays_its_recorded_function(
    template: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """No command: the recorded module:fn under torchrun, 2 processes per worker (DDP, gloo)."""
    repo = copy(template, tmp_path / "repo")
    done = train(repo, "--nproc-per-node", "2", "--name", "d", "train:main", "--", "3")
    assert done.returncode == 0, done.stderr
    again = replay(repo, "d", "--jobs", "2", "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert [(w["first"], w["last"]) for w in report["workers"]] == [(0, 0), (1, 2)]
    assert [e["identical"] for e in report["epochs"]] == [True, True, True]


# -- planning and the checkpointer's side, in one process ----------------------------------------


def _recording(*epochs: int) -> Recording:
    """Epoch-end checkpoint commits c0, c1, ... of the given epochs."""
    ends = {
        e: runs.Found(f"c{e}", Info("r", Position(epoch=e, end_of_epoch=True)), "", "", False)
        for e in epochs
    }
    return Recording("tip", ends)


def test_segments_split_evenly_where_checkpoints_allow() -> None:
    def spans(rec: Recording, jobs: int, first: int | None = None, last: int | None = None):
        return [(s.first, s.last, s.resume) for s in plan(rec, jobs, first, last)]

    every = _recording(*range(8))
    assert spans(every, 4) == [(0, 1, None), (2, 3, "c1"), (4, 5, "c3"), (6, 7, "c5")]
    assert spans(every, 3) == [(0, 2, None), (3, 4, "c2"), (5, 7, "c4")]
    assert spans(every, 20) == [(e, e, f"c{e - 1}" if e else None) for e in range(8)]
    assert spans(every, 2, 3, 5) == [(3, 3, "c2"), (4, 5, "c3")]
    gaps = _recording(0, 5, 7)  # epochs 1..4 and 6 ended without a checkpoint
    assert spans(gaps, 4) == [(0, 0, None), (1, 5, "c0"), (6, 7, "c5")]
    with pytest.raises(CheckpointError, match="no checkpoint at the end of epoch 3"):
        plan(gaps, 2, 4, 7)


def test_segment_travels_through_the_environment() -> None:
    seg = Segment("abc", 2, 3, "/tmp/x.jsonl")
    assert Segment.from_env({ENV: seg.to_env()}) == seg
    assert Segment.from_env({}) is None
    with pytest.raises(CheckpointError, match="is not a replay segment"):
        Segment.from_env({ENV: "{}"})


def test_checkpointer_in_a_replay_stops_after_its_segment_and_records(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    model, opt = model_and_optimizer()
    ckpt = Checkpointer(
        model, opt, info=Info("r", Position()), mode="sync", replay=Segment(None, 0, 1, str(record))
    )
    assert ckpt.mode == "off"  # a replay commits nothing (no commit function was needed)
    seen = []
    for epoch in ckpt.epochs(5):
        for x, y in ckpt.batches(loader()):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ckpt.step({"loss": loss})
        ckpt.save()
        seen.append(epoch)
    assert seen == [0, 1]
    replayed = read_record(str(record))
    assert [(p.epoch, p.global_step, p.end_of_epoch) for p, _ in replayed] == [
        (0, 8, True),
        (1, 16, True),
    ]
    assert replayed[1][1] == layout.metric_values(ckpt.metrics)
    with pytest.raises(CheckpointError, match="went on past epoch 1"):
        ckpt.save(epoch=2)
