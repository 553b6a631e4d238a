"""Automatic tuning of training tunables on git branches: `git mgit tune` (MLtuner, paper 001).

    from git_mgit.runtime.tuning import Workload

    def workload() -> Workload:      # git mgit tune --tunables TUNABLES.toml demo:workload
        model = Net()
        return Workload(model, optimizer, step, evaluate)

Modules: `tunables` (TUNABLES.toml: budget and search space, no torch),
`searcher` (grid and random settings), `summarize` (the progress
summarizer: a loss trace's label and convergence speed, no torch),
`workload` (the user's functions), `branches` (trial branches in one
process: fork, switch, time-share), `record` (the run and trial branches in
git: commit, keep, prune), `tuner` (Algorithm 6 and re-tuning), `report`
(table, JSON). See docs/tuning.md.
"""

from __future__ import annotations

from git_mgit.lazy import exports

_EXPORTS = {
    "Workload": "workload",
    "TuneError": "workload",
}

__all__ = sorted(_EXPORTS)
__getattr__ = exports(__name__, {k: f"{__name__}.{m}" for k, m in _EXPORTS.items()})
