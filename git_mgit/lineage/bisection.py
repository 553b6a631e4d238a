"""Find the first failing version in a DAG of versions, like `git bisect`, in about log2(n) tests.

The question: a test passes on `good` versions and fails on `bad`; which
version introduced the failure? The assumption that makes it answerable in
few tests is the one git bisect makes: failures are inherited, so every
descendant of a failing version fails too. Then:

- the candidates are `bad` and its ancestors, minus the good versions and
  their ancestors (they cannot fail);
- testing a candidate c splits them: if c fails, the first failure is c or
  one of its ancestors; if it passes, so do all its ancestors;
- each step tests the candidate that splits best (the one whose ancestors
  among the candidates are closest to half of them, as git bisect picks),
  so a chain of n versions takes about log2(n) tests.

The answer is a failing version whose parents all pass (when several
failures were introduced independently, one of them): the true boundary,
not just some failing version. Ancestor sets are bitsets (Python ints),
built once in topological order, so choosing a split is cheap even for
thousands of versions.

`rounds()` tests k candidates at a time (k free workers): a k-ary split, so
the rounds fall as workers grow. `linear()` is the baseline: test every
candidate, oldest first, until one fails.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable

Parents = Callable[[str], Iterable[str]]


class BisectError(ValueError):
    """The good and bad versions contradict each other, or name no candidates."""


def _topological(start: Iterable[str], parents: Parents) -> list[str]:
    """Every version reachable from `start` through parents, ancestors first."""
    order: list[str] = []
    state: dict[str, bool] = {}  # False: visiting, True: done
    for root in start:
        stack = [(root, iter(parents(root)))]
        if root in state:
            continue
        state[root] = False
        while stack:
            node, it = stack[-1]
            nxt = next((p for p in it if p not in state), None)
            if nxt is None:
                stack.pop()
                state[node] = True
                order.append(node)
            else:
                state[nxt] = False
                stack.append((nxt, iter(parents(nxt))))
    return order


class _Ancestry:
    """Ancestor bitsets (each version's own bit included) over the versions `bad` and `good` reach."""

    def __init__(self, bad: str, good: Iterable[str], parents: Parents) -> None:
        good = list(good)
        self.order = _topological([bad, *good], parents)
        self.bit = {v: 1 << i for i, v in enumerate(self.order)}
        self.anc: dict[str, int] = {}
        for v in self.order:
            mask = self.bit[v]
            for p in parents(v):
                mask |= self.anc[p]
            self.anc[v] = mask
        cannot_fail = 0
        for g in good:
            cannot_fail |= self.anc[g]
        if cannot_fail & self.bit[bad]:
            raise BisectError("the bad version is a good version or one of their ancestors")
        self.candidates = self.anc[bad] & ~cannot_fail

    def members(self, mask: int) -> list[str]:
        return [v for v in self.order if mask & self.bit[v]]


def first_bad(bad: str, good: Iterable[str], parents: Parents) -> Generator[str, bool, str]:
    """Yields the version to test next; send True if it fails, False if it passes.

    Returns (StopIteration.value) the first failing version.
    """
    search = rounds(bad, good, parents, 1)
    try:
        (v,) = next(search)
        while True:
            (v,) = search.send({v: (yield v)})
    except StopIteration as done:
        return done.value


def rounds(
    bad: str, good: Iterable[str], parents: Parents, k: int
) -> Generator[list[str], dict[str, bool], str]:
    """A k-ary search: yields up to k versions to test at once (one round); send back
    {version: fails}. Returns (StopIteration.value) the first failing version.

    After a round, the ancestors of every probe that passed are out, and of the probes
    that failed, the one with the fewest candidates below it bounds what is left (as one
    failing test does in first_bad). Probes are chosen one at a time, each the one that
    splits the candidates into the smallest classes by which probes they are below (the
    largest class, then the sum of squares of their sizes): with k = 1 that is
    first_bad's best split, and a chain of n versions takes about log(n) / log(k + 1)
    rounds.
    """
    a = _Ancestry(bad, good, parents)
    left = a.candidates
    while left & (left - 1):  # more than one candidate
        probes = _probes(a, left, max(1, k))
        verdicts = yield probes
        for v in probes:
            if not verdicts[v]:
                left &= ~a.anc[v]
        failed = [left & a.anc[v] for v in probes if verdicts[v]]
        if failed:
            # The failing probe with the fewest candidates below it becomes the known bad
            # one. Not all of them at once: failures introduced independently may meet
            # only in versions that pass.
            left = min(failed, key=int.bit_count)
        if not left:
            raise BisectError(
                "the verdicts contradict each other (a version passes although one it is "
                "derived from fails): is the test deterministic?"
            )
    (answer,) = a.members(left)
    return answer


def _probes(a: _Ancestry, left: int, k: int) -> list[str]:
    """Up to k candidates whose verdicts together split `left` into the smallest classes."""
    members = a.members(left)
    classes = [left]
    chosen: list[str] = []
    while len(chosen) < k:
        now = [c.bit_count() for c in classes]
        best, score = None, (max(now), sum(n * n for n in now))  # a probe must improve on it
        for v in members:
            sizes = [
                part.bit_count() for c in classes for part in (c & a.anc[v], c & ~a.anc[v]) if part
            ]
            s = (max(sizes), sum(n * n for n in sizes))
            if s < score:
                best, score = v, s
        if best is None:
            break  # no candidate splits any class further
        chosen.append(best)
        m = a.anc[best]
        classes = [part for c in classes for part in (c & m, c & ~m) if part]
    return chosen


def linear(bad: str, good: Iterable[str], parents: Parents) -> Generator[str, bool, str]:
    """The baseline: every candidate in turn, ancestors first, until one fails."""
    a = _Ancestry(bad, good, parents)
    for v in a.members(a.candidates):
        if (yield v):
            return v
    raise BisectError(f"no candidate failed, not even {bad}: is the test deterministic?")


def candidates(bad: str, good: Iterable[str], parents: Parents) -> int:
    """How many versions could be the first failing one."""
    return _Ancestry(bad, good, parents).candidates.bit_count()


def run(search: Generator[str, bool, str], fails: Callable[[str], bool]) -> tuple[str, int]:
    """Drive a search with a test function: (first failing version, number of tests run)."""
    runs = 0
    try:
        v = next(search)
        while True:
            runs += 1
            v = search.send(fails(v))
    except StopIteration as done:
        return done.value, runs
