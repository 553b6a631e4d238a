"""Flor's adaptive checkpoint period on synthetic timings: decisions, the due iteration, the bound."""

from __future__ import annotations

import pytest

from git_mgit.runtime.training.adaptive import (
    CLEAN,
    EPS,
    AdaptivePeriod,
    next_due,
    should_checkpoint,
    threshold,
)


def test_threshold_is_flors_joint_invariant() -> None:
    # n / (k+1) * min(1/(1+c), eps): eps binds unless c makes the replay bound tighter
    assert threshold(10, 1, c=1.0, eps=EPS) == pytest.approx(10 / 2 * (1 / 15))
    assert threshold(10, 1, c=9.0, eps=0.5) == pytest.approx(10 / 2 * 0.1)


@pytest.mark.parametrize(
    ("m", "cost", "n", "k", "expected"),
    [
        (0.0, 1.0, 1, 0, True),  # nothing measured yet: checkpoint to measure M
        (0.01, 1.0, 1, 0, True),  # 0.01 < 1/1 * 1/15
        (0.05, 1.0, 1, 1, False),  # 0.05 < 1/2 * 1/15 = 0.033: no
        (0.1, 1.0, 1, 0, False),  # a checkpoint costing 10 % of a step: not yet
        (0.1, 1.0, 2, 0, True),  # 0.1 < 2/1 * 1/15 = 0.133
        (1.0, 1.0, 30, 1, False),  # 1 < 30/2 * 1/15 = 1.0: strict, no
        (1.0, 1.0, 31, 1, True),
        (1.0, 0.0, 100, 1, False),  # no compute measured: the rule never holds
    ],
)
def test_should_checkpoint_on_synthetic_timings(m, cost, n, k, expected) -> None:
    assert should_checkpoint(m, cost, n, k) is expected


def test_restore_ratio_binds_when_eps_is_loose() -> None:
    # min(1/(1+c), eps) with eps = 0.5, c = 1.38: the replay bound 0.42 binds
    assert should_checkpoint(0.41, 1.0, 1, 0, eps=0.5)
    assert not should_checkpoint(0.43, 1.0, 1, 0, eps=0.5)


@pytest.mark.parametrize("ratio", [0.001, 0.05, 0.3, 1.0, 7.5])
@pytest.mark.parametrize("k", [0, 1, 4])
def test_next_due_is_the_first_iteration_the_rule_allows(ratio: float, k: int) -> None:
    n = 3
    due = next_due(ratio, 1.0, n, k)
    assert due > n
    assert should_checkpoint(ratio, 1.0, due, k)
    assert not any(should_checkpoint(ratio, 1.0, i, k) for i in range(n + 1, due))


def simulate(m: float, cost: float, iterations: int, eps: float = EPS) -> AdaptivePeriod:
    """A loop whose steps take `cost` and checkpoints take `m`, following next_due."""
    period = AdaptivePeriod(eps=eps)
    due = 1
    for _ in range(iterations):
        period.iteration(cost)
        if period.n >= due:
            period.checkpointed(m)
            due = period.next_due()
    return period


@pytest.mark.parametrize("eps", [1 / 15, 0.2])
@pytest.mark.parametrize("m", [0.001, 0.05, 0.5, 3.0])
def test_overhead_stays_within_eps(m: float, eps: float) -> None:
    period = simulate(m, 0.1, 2000, eps)
    # the first checkpoint is taken blind (to measure M); every later one keeps k*M < n*eps*C
    assert (period.materialize - m) / period.compute < eps
    assert period.k >= 1


def test_cheap_checkpoints_happen_every_iteration_expensive_ones_rarely() -> None:
    assert simulate(0.00001, 0.1, 100).k == 100
    rare = simulate(1.0, 0.1, 1000)
    assert 1 < rare.k < 10


def simulate_background(
    copy: float, commit_iterations: int, slower: float, iterations: int
) -> tuple[AdaptivePeriod, float]:
    """A loop whose checkpoints block it for `copy`, then slow the next `commit_iterations`
    iterations by `slower` (a background commit competing with training), deciding as the
    checkpointer does; returns the period and the overhead really paid."""
    period, cost, due, running, paid = AdaptivePeriod(), 0.1, 1, 0, 0.0
    for i in range(iterations):
        took = cost * (1 + slower) if running else cost
        paid += took - cost
        took += 0.3 if i == 0 else 0.0  # the first iteration warms up: C must not count it
        period.iteration(took, overlapped=running > 0)
        running = max(0, running - 1)
        if period.n < due:
            continue
        due = period.decide(committing=running > 0)
        if due == period.n:
            period.checkpointed(copy)
            paid += copy
            running = commit_iterations
            due = period.next_due()
    return period, paid


@pytest.mark.parametrize(("commit_iterations", "slower"), [(5, 0.5), (20, 1.0), (3, 0.1)])
def test_a_background_commits_slowdown_counts_toward_the_bound(
    commit_iterations: int, slower: float
) -> None:
    period, paid = simulate_background(0.01, commit_iterations, slower, 3000)
    first = 0.01 + commit_iterations * 0.1 * slower  # the blind first checkpoint
    assert period.materialize == pytest.approx(paid)  # M sees the slowdown, not just the copy
    assert period.compute == pytest.approx(3000 * 0.1 + 0.3)
    assert (paid - first) / period.compute < EPS
    assert period.k > 1


def test_no_decision_while_a_commit_runs_nor_before_clean_iterations_follow_it() -> None:
    period = AdaptivePeriod()
    period.iteration(0.1)
    assert period.decide(committing=True) == 2
    assert period.decide(committing=False) == 1  # nothing measured yet: checkpoint now
    period.checkpointed(0.001)
    for i in range(2, 2 + CLEAN):
        assert period.decide(committing=False) == i  # C not yet measured since
        period.iteration(0.1)
    assert period.decide(committing=False) == period.n  # cheap: checkpoint now
