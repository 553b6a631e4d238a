"""What a tuning run shows at its end: a table of every trial and what was kept, or JSON."""

from __future__ import annotations

from typing import Any

from git_mgit.console.columns import aligned
from git_mgit.runtime.training import layout
from git_mgit.runtime.tuning.searcher import describe
from git_mgit.runtime.tuning.tuner import Outcome, Trial


def _row(round_: int, t: Trial, kept: bool) -> list[str]:
    s = t.summary
    assert s is not None
    return [
        "*" if kept else "",
        str(round_),
        f"t{t.index}",
        describe(t.branch.tunables),
        s.label,
        f"{s.speed:.4g}",
        str(t.clocks),
    ]


def table(out: Outcome) -> str:
    """One row per trial (* the kept ones), a line per round, the cost of tuning, the result."""
    rows = [["", "round", "trial", "setting", "label", "speed", "clocks"]]
    for r in out.rounds:
        rows += [_row(r.index, t, t is r.kept) for t in r.trials]
    lines = aligned(rows)
    for r in out.rounds:
        kept = (
            f"kept t{r.kept.index} {describe(r.kept.branch.tunables)}"
            if r.kept
            else "none converged"
        )
        times = ", ".join(map(str, r.trial_times))
        lines.append(f"round {r.index} at clock {r.clock}: trial time {times} clocks; {kept}")
    converged = "" if out.converged is None else f" (converged at clock {out.converged})"
    lines.append(
        f"tuning: {len(out.rounds)} round(s), {out.trial_clocks} trial clocks "
        f"({out.pruned_clocks} pruned) in {out.tuning_seconds:.1f} s; "
        f"training: {out.clocks} clocks{converged}"
    )
    info = out.last.info
    lines.append(
        f"{layout.branch(out.name)} at {out.last.commit[:10]} (clock {info.position.global_step}): "
        f"{describe(info.metrics)}; {out.seconds:.1f} s"
    )
    return "\n".join(lines)


def as_json(out: Outcome) -> dict[str, Any]:
    return {
        "name": out.name,
        "branch": layout.branch(out.name),
        "commit": out.last.commit,
        "tunables": out.tunables,
        "clocks": out.clocks,
        "converged": out.converged,
        "metrics": out.last.info.metrics,
        "trial_clocks": out.trial_clocks,
        "pruned_clocks": out.pruned_clocks,
        "seconds": out.seconds,
        "tuning_seconds": out.tuning_seconds,
        "rounds": [
            {
                "round": r.index,
                "clock": r.clock,
                "snapshot": r.snapshot,
                "bound": r.bound,
                "trial_times": r.trial_times,
                "kept": r.kept.index if r.kept else None,
                "seconds": r.seconds,
                "trials": [_trial(t) for t in r.trials],
            }
            for r in out.rounds
        ],
    }


def _trial(t: Trial) -> dict[str, Any]:
    s, c = t.summary, t.committed
    assert s is not None and c is not None
    return {
        "trial": t.index,
        "tunables": t.branch.tunables,
        "label": s.label,
        "speed": s.speed,
        "clocks": t.clocks,
        "commit": c.commit,
        "model": c.model,
    }
