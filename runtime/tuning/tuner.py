"""MLtuner's loop on git branches (paper 001, sections 5.2.3-5.3.4): tune, train, re-tune.

A tuning round forks one trial branch per setting from a snapshot and
decides the trial time as Algorithm 6 does: the branches run, time-shared,
until the trial time; the summarizer labels each; diverged ones are
dropped; if none converges, the trial time doubles and the others run on,
up to a bound (the whole budget for the first tuning, an epoch for a
re-tuning, section 5.3.4). The converging branch with the highest speed is
kept (runs/NAME moves to it) and every trial branch is pruned.

Training then goes on with the kept setting, a checkpoint per epoch. At an
epoch's end the last `window` clocks are summarized; a trace that no longer
converges (a plateau) starts a re-tuning from that checkpoint, with no more
settings than the tuning before. A re-tuning in which nothing converges
within an epoch means the model has converged as far as tuning can tell:
training goes on with the setting it had, to the budget, without re-tuning again.

Clocks: the budget counts the kept branch's clocks (its position in the
data), so a kept trial's clocks are training; every other trial clock is
tuning overhead, which the outcome reports in clocks and seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from git_mgit.runtime.training.layout import Snapshot
from git_mgit.runtime.training.storage import Committed
from git_mgit.runtime.tuning import searcher
from git_mgit.runtime.tuning.branches import Branch, Trainer
from git_mgit.runtime.tuning.record import RunRecord, trial_run
from git_mgit.runtime.tuning.summarize import CONVERGING, DIVERGED, Summary, summarize
from git_mgit.runtime.tuning.tunables import Plan
from git_mgit.runtime.tuning.workload import Tunables, TuneError, Workload


@dataclass
class Trial:
    index: int
    branch: Branch
    summary: Summary | None = None
    committed: Committed | None = None
    clocks: int = 0  # its trial time, when committed


@dataclass
class Round:
    index: int  # from 1
    clock: int  # its snapshot's
    snapshot: str  # the commit its trials fork from
    bound: int  # the longest trial time it may reach
    trials: list[Trial]
    trial_times: list[int] = field(default_factory=list)  # Algorithm 6's, in order
    kept: Trial | None = None
    seconds: float = 0.0


@dataclass
class Outcome:
    name: str
    plan: Plan
    rounds: list[Round]
    tunables: Tunables  # the setting training ended with
    clocks: int  # the kept branch's: training
    converged: int | None  # the clock a re-tuning found nothing converging at (no more after)
    last: Committed  # runs/NAME's tip
    seconds: float

    @property
    def trial_clocks(self) -> int:
        return sum(t.clocks for r in self.rounds for t in r.trials)

    @property
    def pruned_clocks(self) -> int:
        """Clocks of trials that were not kept: tuning's cost in training work."""
        return sum(t.clocks for r in self.rounds for t in r.trials if t is not r.kept)

    @property
    def tuning_seconds(self) -> float:
        return sum(r.seconds for r in self.rounds)


class Tuner:
    def __init__(
        self,
        plan: Plan,
        workload: Workload,
        record: RunRecord,
        seed: int,
        say: Callable[[str], None],
    ) -> None:
        self.plan, self.record, self.seed, self.say = plan, record, seed, say
        self.trainer = Trainer(workload)
        self.rounds: list[Round] = []
        self.clock = 0  # training clocks of the kept branch
        self.converged: int | None = None  # the clock a re-tuning found nothing converging at

    def run(self) -> Outcome:
        began = time.monotonic()
        origin = self.trainer.live
        assert origin is not None
        metrics = self.trainer.evaluate(origin)
        snapshot = self.record.stamp(self.trainer.state(origin), 0, metrics, {})
        last = self.record.checkpoint(snapshot, "round=1 snapshot")
        kept = self._tune(last, snapshot, self.plan.clocks)
        if kept is None:
            self.record.abandon(last)
            raise TuneError(
                f"no setting converged within {self.plan.clocks} clocks; widen the tunables' "
                f"range in {self.plan.path} (nothing was kept: runs/{self.record.name} is deleted)"
            )
        assert kept.committed is not None
        branch, last = self._train(kept.branch, kept.committed)
        return Outcome(
            self.record.name,
            self.plan,
            self.rounds,
            branch.tunables,
            self.clock,
            self.converged,
            last,
            time.monotonic() - began,
        )

    # -- tuning --------------------------------------------------------------------------------

    def _summary(self, branch: Branch, last: int | None = None) -> Summary:
        """The branch's trace since its fork, or its last `last` clocks."""
        start = 0 if last is None else branch.clocks - last
        times = branch.seconds[start:] if self.plan.time == "seconds" else None
        return summarize(branch.losses[start:], times)

    def _tune(self, parent: Committed, snapshot: Snapshot, bound: int) -> Trial | None:
        """One round from `parent` (Algorithm 6): the kept trial, or None if none converged."""
        began = time.monotonic()
        index = len(self.rounds) + 1
        limit = len(self.rounds[-1].trials) if self.rounds else None
        settings = searcher.settings(self.plan, self.seed, index, limit)
        trials = [
            Trial(k, self.trainer.fork(snapshot, s, self.clock)) for k, s in enumerate(settings)
        ]
        rnd = Round(index, self.clock, parent.commit, bound, trials)
        self.rounds.append(rnd)
        alive, trial_time = trials, min(self.plan.initial_trial, bound)
        while True:
            self.trainer.time_share([t.branch for t in alive], trial_time)
            rnd.trial_times.append(trial_time)
            for t in alive:
                t.summary = self._summary(t.branch)
            self.say(
                f"round {index}: trial time {trial_time} clocks, {len(alive)} setting(s): "
                + ", ".join(_said(t) for t in alive)
            )
            alive = [t for t in alive if t.summary and t.summary.label != DIVERGED]
            converging = [t for t in alive if t.summary and t.summary.label == CONVERGING]
            if converging or trial_time >= bound or not alive:
                break
            trial_time = min(2 * trial_time, bound)
        rnd.kept = max(converging, key=_speed, default=None)
        done = [self._commit_trial(rnd, parent, t) for t in trials]
        kept = {parent.model}
        if rnd.kept is not None:
            won = done[rnd.kept.index]
            self.record.keep(
                parent, won, f"keep {trial_run(self.record.name, index, rnd.kept.index)}"
            )
            self.clock += rnd.kept.clocks
            kept.add(won.model)
        self.record.prune([(index, t.index, c) for t, c in zip(trials, done, strict=True)], kept)
        rnd.seconds = time.monotonic() - began
        return rnd.kept

    def _commit_trial(self, rnd: Round, parent: Committed, t: Trial) -> Committed:
        """The trial's state on runs/NAME-rR-tK, with its label and trace in the lineage node."""
        s, branch = t.summary, t.branch
        assert s is not None
        t.clocks = branch.clocks
        tune = {
            "round": rnd.index,
            "trial": t.index,
            "tunables": branch.tunables,
            "label": s.label,
            "speed": s.speed,
            "trial_clocks": t.clocks,
            "losses": [_number(x) for x in s.windows],
        }
        metrics = {"loss": _number(s.windows[-1]), "speed": s.speed, "label": s.label}
        said = searcher.describe(branch.tunables)
        t.committed = self.record.trial(
            parent,
            trial_run(self.record.name, rnd.index, t.index),
            self.record.stamp(self.trainer.state(branch), branch.clock, metrics, branch.tunables),
            {"tune": tune},
            f"round={rnd.index} trial={t.index} label={s.label} {said}",
        )
        if t is not rnd.kept:
            self.trainer.free(branch)
        return t.committed

    # -- training ------------------------------------------------------------------------------

    def _train(self, branch: Branch, last: Committed) -> tuple[Branch, Committed]:
        """Train the kept branch to the budget, a checkpoint per epoch, re-tuning on a plateau."""
        plan = self.plan
        while self.clock < plan.clocks:
            end = min((self.clock // plan.epoch + 1) * plan.epoch, plan.clocks)
            since = last.info.position.global_step - branch.origin  # losses since `last`
            self.trainer.run(branch, end - self.clock)
            self.clock = branch.clock
            if branch.diverged:
                raise TuneError(
                    f"training with {searcher.describe(branch.tunables)} diverged at clock "
                    f"{self.clock}; the last checkpoint is {last.commit[:10]} on "
                    f"runs/{self.record.name}"
                )
            metrics = {"loss": _mean(branch.losses[since:]), **self.trainer.evaluate(branch)}
            plateau = self._plateau(branch)
            trailer = f"round={len(self.rounds) + 1} snapshot" if plateau else None
            snapshot = self.record.stamp(
                self.trainer.state(branch), self.clock, metrics, branch.tunables
            )
            last = self.record.checkpoint(snapshot, trailer)
            self.say(f"clock {self.clock}: {searcher.describe(metrics)} ({last.commit[:10]})")
            if plateau:
                self.say(f"clock {self.clock}: {plateau}; re-tuning")
                kept = self._tune(last, snapshot, min(plan.epoch, plan.clocks - self.clock))
                if kept is None:
                    self.converged = self.clock
                    self.say(
                        f"round {len(self.rounds)}: no setting converged within "
                        f"{self.rounds[-1].bound} clocks: the model has converged; going on "
                        f"with {searcher.describe(branch.tunables)}, no more re-tuning"
                    )
                    continue
                assert kept.committed is not None
                branch, last = kept.branch, kept.committed
        return branch, last

    def _plateau(self, branch: Branch) -> str | None:
        """Why training should re-tune now (its last `window` clocks do not converge), or None."""
        plan = self.plan
        room = plan.clocks - self.clock
        if self.converged is not None or not plan.retune:
            return None
        if room < plan.initial_trial or branch.clocks < plan.window:
            return None
        s = self._summary(branch, plan.window)
        if s.label == CONVERGING:
            return None
        return f"plateau: {s.label} over the last {plan.window} clocks"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _number(value: float) -> float | str:
    """JSON has no NaN or infinity: those as text."""
    return value if math.isfinite(value) else str(value)


def _speed(t: Trial) -> float:
    return t.summary.speed if t.summary else 0.0


def _said(t: Trial) -> str:
    s = t.summary
    assert s is not None
    speed = "" if s.label == DIVERGED else f" speed {s.speed:.3g}"
    return f"{searcher.describe(t.branch.tunables)} {s.label}{speed}"
