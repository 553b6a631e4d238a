"""The execution layer: where runtime jobs (tests, creation functions) run.

Two backends behind one interface (base.Executor): `local` (worker
processes on this machine, the default) and `cluster` (tasks on an existing
Dask cluster, `--cluster ADDRESS`): `shipping` is the head's side of what a
job carries to a node, `node` the node's. Jobs name model versions by id;
the answers are JSON values and safetensors files; only the head commits.
The engine is an optional extra: nothing outside this package imports it.
"""

from __future__ import annotations

from pathlib import Path

from git_mgit.lineage.api import Lineage
from git_mgit.runtime.execution.base import Executor


def open_pool(lin: Lineage, jobs: int | None, cluster: str | None = None) -> Executor:
    """Worker processes here (`cluster` None), else a client of the Dask cluster at `cluster`
    ("" for DASK_SCHEDULER_ADDRESS); `jobs` at once (default: 1 here, every worker thread there)."""
    if cluster is None:
        from git_mgit.runtime.execution.local import Pool

        assert lin.repo.worktree is not None
        return Pool(Path(lin.repo.worktree), max(1, jobs or 1))
    from git_mgit.runtime.execution.cluster import ClusterPool

    return ClusterPool(lin, jobs, cluster)
