"""`git mgit compress --lossy`: MGit's test-gated lossy delta compression (Algorithm 3).

Quantize the model's difference from its lineage parent (git_mgit/lossy.py),
run the model's registered tests on the original file and on the
reconstruction, and keep the compression only if it saves storage and no
metric gets worse by more than `max_drop`, relative to its value on the
original. Then the qdelta objects are stored, the working file becomes the
reconstruction (so git stores exactly what users will get back), and the
operation waits in lineage/pending.py for the new version to be committed.

Metric direction: a metric is better when higher, unless the test's pass
condition bounds it from above (`loss < 2`, `error <= 0.1`): then lower is
better. The relative drop of a metric is (before - after) / |before| when
higher is better, (after - before) / |before| when lower is; |before| is
taken as 1 when the metric is 0 on the original. A reconstruction that
fails a pass condition the original meets is rejected whatever its drop.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from git_mgit import config
from git_mgit.errors import MgitError
from git_mgit.lineage import pending, records
from git_mgit.lineage.api import Lineage
from git_mgit.lossy import (
    CompressError,
    Plan,
    apply,
    lineage_parent,
    model_path,
    parent_manifest,
    plan,
    uncommitted,
)
from git_mgit.repoconfig import TestDecl, parse_condition
from git_mgit.runtime.testing import Runner, judge
from git_mgit.store.chunkstore import ChunkStore

DEFAULT_EPS = 1e-4  # MGit's default error bound
DEFAULT_MAX_DROP = 0.01


@dataclass
class Outcome:
    """What compress did: the plan, the tests' verdict and, when written, the new version."""

    plan: Plan
    max_drop: float
    before: dict[str, dict] = field(default_factory=dict)  # test -> metrics on the original
    after: dict[str, dict] = field(default_factory=dict)  # test -> metrics on the reconstruction
    drops: dict[str, float] = field(default_factory=dict)  # "test.metric" -> relative drop
    codes: dict[str, str] = field(default_factory=dict)  # test -> hash of its code
    rejected: str | None = None  # why the compression is not kept
    version: str | None = None  # the new model version, once the file is rewritten
    original_committed: bool = True

    @property
    def accepted(self) -> bool:
        return self.rejected is None


def higher_is_better(test: TestDecl, metric: str) -> bool:
    """Unless the pass condition bounds the metric from above (`<`, `<=`)."""
    if not test.condition:
        return True
    return not any(
        m == metric and op in ("<", "<=") for m, op, _ in parse_condition(test.condition)
    )


def relative_drop(before: float, after: float, higher_better: bool) -> float:
    """How much worse `after` is than `before`, relative to |before| (absolute when it is 0)."""
    if before == after or (math.isnan(before) and math.isnan(after)):
        return 0.0
    worse = (before - after) if higher_better else (after - before)
    if math.isnan(worse):
        return math.inf  # a metric that became NaN, or infinities that moved
    return worse / abs(before) if before and math.isfinite(before) else worse


def gate(
    tests: Iterable[TestDecl],
    before: Mapping[str, dict],
    after: Mapping[str, dict],
    max_drop: float,
) -> tuple[dict[str, float], str | None]:
    """(relative drop per test.metric, why the reconstruction is rejected or None)."""
    drops: dict[str, float] = {}
    problems: list[str] = []
    for test in tests:
        was, now = before[test.name], after[test.name]
        if judge(test, was)[0] and not judge(test, now)[0]:
            problems.append(f"test {test.name} fails on the reconstruction ({test.condition})")
        for metric, value in sorted(was.items()):
            if metric not in now:
                problems.append(f"test {test.name} returned no {metric!r} on the reconstruction")
                continue
            key = f"{test.name}.{metric}"
            drops[key] = relative_drop(
                float(value), float(now[metric]), higher_is_better(test, metric)
            )
            if drops[key] > max_drop:
                problems.append(f"{key} got {drops[key]:.2%} worse (limit {max_drop:.2%})")
    return drops, "; ".join(problems) or None


def _model_tests(lin: Lineage, rel: str) -> tuple[list[TestDecl], str | None]:
    """The tests registered for the model at `rel`, and the architecture that builds it."""
    decl = lin.config.model_at(rel)
    name, type_ = (decl.name, decl.type) if decl else (None, None)
    try:
        node = lin.graph.nodes.get(lin.resolve(rel).id)
    except MgitError:
        node = None  # never committed: mgit.toml alone says what it is
    if node is not None:
        name, type_ = name or node.name, type_ or node.type
    tests = [t for t in lin.config.tests.values() if t.applies_to(name, type_)]
    return tests, lin.config.architecture(decl) if decl else None


def _measure(
    runner: Runner, tests: list[TestDecl], files: Mapping[str, str], architecture: str | None
) -> dict[str, dict[str, dict]]:
    """label -> test -> metrics; an error in any test is one line naming the test."""
    out: dict[str, dict[str, dict]] = {label: {} for label in files}
    for (label, test), answer in runner.run_files(tests, files, architecture).items():
        if not answer["ok"]:
            raise CompressError(
                f"test {test} failed to run on the {label} model: {answer['error']}"
            )
        out[label][test] = answer["metrics"]
    return out


def compress(
    model: str,
    eps: float = DEFAULT_EPS,
    max_drop: float = DEFAULT_MAX_DROP,
    parent: str | None = None,
    dry_run: bool = False,
    gated: bool = True,
    force: bool = False,
    lineage: Lineage | None = None,
) -> Outcome:
    """Compress MODEL against its parent if its tests allow; see the module docstring.

    `gated=False` (--no-tests) skips the tests: the compression is kept wherever it
    saves storage.
    """
    if not 0 < eps < math.inf:
        raise CompressError(f"--eps must be a positive number, not {eps}")
    if not 0 <= max_drop < math.inf:
        raise CompressError(f"--max-drop must be zero or positive, not {max_drop}")
    lin = lineage or Lineage()
    rel = model_path(lin, model)
    base = lin.resolve(parent) if parent is not None else lineage_parent(lin, rel)
    tests, architecture = _model_tests(lin, rel) if gated else ([], None)
    if gated and not tests:
        raise CompressError(
            f"no registered test applies to {rel}: lossy compression without a test gate may "
            "break the model; register one (`git mgit lineage register-test`) or pass --no-tests"
        )
    dirty = uncommitted(lin, rel)
    if dirty and not (force or dry_run):
        raise CompressError(
            f"{rel} has changes that are not committed and compress overwrites it; commit it "
            "first (so the original stays in history) or pass --force"
        )
    settings = config.load(lin.repo)
    store = ChunkStore(lin.repo)
    try:
        p = plan(store, settings, rel, base, parent_manifest(lin, store, base), eps)
        try:
            out = Outcome(p, max_drop, original_committed=not dirty)
            if not p.quantized:
                out.rejected = "no tensor stores smaller as a quantized delta"
                return out
            if tests:
                _run_gate(lin, out, tests, architecture)
            if out.accepted and not dry_run:
                out.version = apply(store, settings, p)
                _hold(lin, out, tests)
            return out
        finally:
            p.reconstruction.unlink(missing_ok=True)
    finally:
        store.close()


def _run_gate(lin: Lineage, out: Outcome, tests: list[TestDecl], architecture: str | None) -> None:
    assert lin.repo.worktree is not None
    files = {
        "original": str(lin.repo.worktree / out.plan.path),
        "reconstructed": str(out.plan.reconstruction),
    }
    runner = Runner(lin)
    try:
        measured = _measure(runner, tests, files, architecture)
        out.before, out.after = measured["original"], measured["reconstructed"]
        out.drops, out.rejected = gate(tests, out.before, out.after, out.max_drop)
        out.codes = {t.name: runner.code(t) for t in tests}
    finally:
        runner.close()


def _hold(lin: Lineage, out: Outcome, tests: list[TestDecl]) -> None:
    """The compress record and the reconstruction's test results, for when it is committed."""
    assert out.version is not None
    p = out.plan
    recs = [
        records.make(
            "compress",
            eps=p.eps,
            step=p.step,
            max_drop=out.max_drop,
            parent=p.parent.id,
            parent_path=p.parent.path,
            tensors=p.tensors,
            chunks=len(p.quantized),
            raw=p.raw,
            stored_before=p.stored_before,
            stored_after=p.stored_after,
            metrics_before=out.before or None,
            metrics_after=out.after or None,
        )
    ]
    for test in tests:
        code = out.codes[test.name]
        recs.append(
            records.make(
                "test",
                id=f"{test.name}:{code}",
                test=test.name,
                code=code,
                metrics=out.after[test.name],
            )
        )
    pending.hold(lin.repo, out.version, recs, "compress")


def original_hint(out: Outcome) -> str:
    """How to get the original file back."""
    if out.original_committed:
        return f"the original is in history: `git restore --source=HEAD -- {out.plan.path}`"
    return "the original was not committed and is gone (--force)"
