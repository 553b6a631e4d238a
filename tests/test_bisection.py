"""DAG bisection on random lineage graphs with a monotone failure boundary."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from git_mgit.lineage.bisection import BisectError, first_bad, linear, rounds, run

DAGS = 1000


def random_dag(rng: random.Random) -> dict[str, list[str]]:
    """Versions v0..vn-1, each with 0-3 parents among older ones (chains, forks, merges)."""
    n = rng.randint(2, 80)
    parents: dict[str, list[str]] = {}
    for i in range(n):
        older = [f"v{j}" for j in range(max(0, i - 6), i)]  # mostly local: long chains appear
        k = 0 if i == 0 else rng.choice([1, 1, 1, 2, 2, 3, 0])
        parents[f"v{i}"] = rng.sample(older, min(k, len(older)))
    return parents


def descendants(parents: dict[str, list[str]], roots: set[str]) -> set[str]:
    out = set(roots)
    for v in parents:  # names are in topological order
        if any(p in out for p in parents[v]):
            out.add(v)
    return out


def ancestors(parents: dict[str, list[str]], v: str) -> set[str]:
    out, stack = {v}, [v]
    while stack:
        for p in parents[stack.pop()]:
            if p not in out:
                out.add(p)
                stack.append(p)
    return out


def situation(rng: random.Random, culprits: int):
    parents = random_dag(rng)
    names = list(parents)
    roots = set(rng.sample(names, culprits))
    failing = descendants(parents, roots)
    bad = rng.choice(sorted(failing))
    passing = [v for v in names if v not in failing]
    good = rng.sample(passing, min(len(passing), rng.randint(0, 2)))
    return parents, roots, failing, bad, good


@pytest.mark.parametrize("culprits", [1, 2])
def test_bisect_returns_the_true_boundary_on_random_dags(culprits: int) -> None:
    rng = random.Random(culprits)
    runs, baseline = [], []
    for _ in range(DAGS):
        parents, roots, failing, bad, good = situation(rng, culprits)
        tested: list[str] = []

        def fails(v: str, failing=failing, tested=tested) -> bool:
            tested.append(v)
            return v in failing

        found, n = run(first_bad(bad, good, parents.__getitem__), fails)
        assert n == len(tested)
        # the boundary: it fails, every parent passes, and it is where bad's failure comes from
        assert found in failing and not any(p in failing for p in parents[found])
        assert found in ancestors(parents, bad)
        if culprits == 1:
            assert found == next(iter(roots & ancestors(parents, bad)))
        lin, m = run(
            linear(bad, good, parents.__getitem__), lambda v, failing=failing: v in failing
        )
        assert lin in failing and not any(p in failing for p in parents[lin])
        runs.append(n)
        baseline.append(m)
    mean, mean_linear = statistics.mean(runs), statistics.mean(baseline)
    print(f"\n{DAGS} random DAGs, {culprits} culprit(s): bisect {mean:.2f} tests on average "
          f"(max {max(runs)}), linear {mean_linear:.2f} (max {max(baseline)})")  # fmt: skip
    assert mean < mean_linear / 2


def test_a_chain_takes_ceil_log2_tests() -> None:
    for n in (2, 3, 10, 100, 1000):
        parents = {f"v{i}": [f"v{i - 1}"] if i else [] for i in range(n)}
        for culprit in (0, n // 3, n - 1):
            failing = {f"v{i}" for i in range(culprit, n)}
            found, runs = run(first_bad(f"v{n - 1}", [], parents.__getitem__), failing.__contains__)
            assert found == f"v{culprit}" and runs <= math.ceil(math.log2(n))


def test_contradictions_are_refused() -> None:
    parents = {"a": [], "b": ["a"], "c": ["b"]}
    with pytest.raises(BisectError, match="good version"):
        next(first_bad("b", ["c"], parents.__getitem__))
    with pytest.raises(BisectError, match="no candidate failed"):
        run(linear("c", ["a"], parents.__getitem__), lambda v: False)


def run_rounds(search, failing: set[str]) -> tuple[str, int, int]:
    """Drive a k-ary search: (answer, rounds, test runs)."""
    n_rounds = n_runs = 0
    try:
        probes = next(search)
        while True:
            assert len(set(probes)) == len(probes)
            n_rounds += 1
            n_runs += len(probes)
            probes = search.send({v: v in failing for v in probes})
    except StopIteration as done:
        return done.value, n_rounds, n_runs


@pytest.mark.parametrize("culprits", [1, 2])
def test_k_ary_rounds_find_the_true_boundary_in_fewer_rounds(culprits: int) -> None:
    rng = random.Random(10 + culprits)
    by_k: dict[int, list[int]] = {1: [], 2: [], 4: [], 8: []}
    for _ in range(DAGS // 2):
        parents, roots, failing, bad, good = situation(rng, culprits)
        for k, counted in by_k.items():
            found, n_rounds, n_runs = run_rounds(rounds(bad, good, parents.__getitem__, k), failing)
            assert found in failing and not any(p in failing for p in parents[found])
            assert found in ancestors(parents, bad)
            if culprits == 1:
                assert found == next(iter(roots & ancestors(parents, bad)))
            assert n_runs <= k * n_rounds
            counted.append(n_rounds)
    means = {k: statistics.mean(v) for k, v in by_k.items()}
    print(f"\n{DAGS // 2} random DAGs, {culprits} culprit(s): mean rounds by k {means}")
    assert means[1] > means[2] > means[4] > means[8]


def test_k_ary_rounds_on_a_chain_take_log_base_k_plus_1() -> None:
    n = 1000
    parents = {f"v{i}": [f"v{i - 1}"] if i else [] for i in range(n)}
    for k in (1, 3, 7):
        for culprit in (0, 1, 499, 998, 999):
            failing = {f"v{i}" for i in range(culprit, n)}
            found, n_rounds, _ = run_rounds(
                rounds(f"v{n - 1}", [], parents.__getitem__, k), failing
            )
            assert found == f"v{culprit}"
            assert n_rounds <= math.ceil(math.log(n) / math.log(k + 1)) + 1


def test_k_ary_rounds_refuse_contradicting_verdicts() -> None:
    parents = {"a": [], "b": ["a"], "c": ["b"], "d": ["c"]}
    search = rounds("d", [], parents.__getitem__, 3)
    probes = next(search)
    with pytest.raises(BisectError, match="contradict"):
        search.send({v: v == "a" for v in probes} | {"b": False, "c": False})
