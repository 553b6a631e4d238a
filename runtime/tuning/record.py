"""A tuning run in git: its run branch, the trial branches, what is kept and what is pruned.

`runs/NAME` holds what the model went through: the snapshot each tuning
forks from, the trial it kept, the training checkpoints. Trial K of round R
is committed on `runs/NAME-rR-tK`, a branch that starts at the round's
snapshot commit; its files are run NAME's own (`checkpoints/NAME/...`), so
every trial is stored as a delta against the snapshot, and the kept one is
simply the next checkpoint of runs/NAME once the branch is fast-forwarded to
it. Pruning deletes the trial branches (and their reflogs) and hides the
pruned versions in the lineage graph: nothing references their commits or
manifests any more, so `git mgit gc` drops their tensor objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from git_mgit.gitcmd import Repo
from git_mgit.lineage.api import Lineage
from git_mgit.runtime.training import layout, runs, threads
from git_mgit.runtime.training.layout import Info, Position, Snapshot
from git_mgit.runtime.training.storage import Committed, RunCommitter

TRAILER = "Mgit-Tune"


def trial_run(name: str, round_: int, index: int) -> str:
    return f"{name}-r{round_}-t{index}"


def position(clock: int, epoch: int) -> Position:
    """Where clock `clock` lies in epochs of `epoch` clocks (a boundary ends the epoch before)."""
    done, into = divmod(clock, epoch)
    if into == 0 and done:
        return Position(done - 1, epoch, clock, end_of_epoch=True)
    return Position(done, into, clock)


class RunRecord:
    """Commits of one tuning run, in order (one thread)."""

    def __init__(self, repo: Repo, name: str, code: str, function: str, epoch: int) -> None:
        self.repo, self.name, self.code = repo, name, code
        self.function, self.epoch = function, epoch
        self.lineage = Lineage(repo)
        self.main = RunCommitter(repo, name, code, lineage=self.lineage)

    def stamp(
        self, snapshot: Snapshot, clock: int, metrics: Mapping[str, float | str], tunables: dict
    ) -> Snapshot:
        """The snapshot with what its commit says about it: clock, metrics, setting, code, and
        the threads it was computed with (training it again gives the same bits on as many)."""
        info = Info(
            self.name,
            position(clock, self.epoch),
            dict(metrics),
            dict(tunables),
            self.code,
            self.function,
            threads=threads.current(),
        )
        return dataclasses.replace(snapshot, info=info)

    def checkpoint(self, snapshot: Snapshot, trailer: str | None = None) -> Committed:
        """A commit on runs/NAME (a snapshot a tuning forks from, or a training checkpoint)."""
        return self.main(snapshot, trailers={TRAILER: trailer} if trailer else None)

    def trial(
        self, parent: Committed, run: str, snapshot: Snapshot, details: dict, trailer: str
    ) -> Committed:
        """A trial's state on its own branch, runs/RUN, starting at the snapshot commit."""
        committer = RunCommitter(
            self.repo,
            self.name,
            self.code,
            previous=parent.model,
            branch_from=parent.commit,
            lineage=self.lineage,
            branch=run,
        )
        return committer(snapshot, details, {TRAILER: trailer})

    def keep(self, parent: Committed, trial: Committed, why: str) -> None:
        """Fast-forward runs/NAME from the snapshot to the kept trial; training goes on from it."""
        ref = f"refs/heads/{layout.branch(self.name)}"
        self.repo.git("update-ref", "-m", f"git mgit tune: {why}", ref, trial.commit, parent.commit)
        self.main = RunCommitter(
            self.repo, self.name, self.code, previous=trial.model, lineage=self.lineage
        )

    def abandon(self, snapshot: Committed) -> None:
        """Delete runs/NAME, which holds only the snapshot: a first tuning that kept nothing."""
        ref = f"refs/heads/{layout.branch(self.name)}"
        self.repo.git("update-ref", "-m", "git mgit tune: nothing kept", "-d", ref, snapshot.commit)
        self.lineage.remove_node(snapshot.model)

    def prune(self, trials: list[tuple[int, int, Committed]], keep: set[str]) -> None:
        """Delete every trial branch (round, trial, commit); hide their versions but `keep`'s."""
        lines = "".join(
            f"delete refs/heads/{layout.branch(trial_run(self.name, r, k))} {c.commit}\n"
            for r, k, c in trials
        )
        if lines:
            self.repo.git("update-ref", "--stdin", input=lines.encode())
        for model in dict.fromkeys(c.model for _, _, c in trials):
            if model not in keep:
                self.lineage.remove_node(model)


def check_name(repo: Repo, name: str) -> None:
    """A new run's name: valid as a branch, and no run of that name yet."""
    runs.check_name(repo, name)
    if runs.tip(repo, name) is not None:
        raise layout.CheckpointError(
            f"{layout.branch(name)} exists; pick another --name for this tuning run"
        )
