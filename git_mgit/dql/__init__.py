"""The model query language: ModelHub's DQL over git-mgit's repository (docs/query.md).

    import git_mgit

    result = git_mgit.query('select m where m.name like "ft-%" order by m.time desc')
    for row in result:
        print(row["name"], row["id"])
    print(result.table())

Four statements: `select` (versions by name, path, date, author, branch,
type, tensors, lineage and recorded test metrics), `slice` and `construct`
(new models from selected or mutated tensors, committed with a provenance
edge naming the query) and `evaluate ... vary ... keep` (configurations of
a creation function, run and ranked by a test metric).

The package is named for ModelHub's DQL, so that `git_mgit.query` can be
this package's `query` function (a subpackage of that name would replace
it on import). Modules, in the order a query flows through them: grammar
(lark), parse (text -> syntax tree), syntax, catalog (the repository as a
table), values (attributes), predicates, planner (where, order by, limit),
derive (slice and construct plans), engine, output (table, JSON).
"""

from __future__ import annotations

import os

from git_mgit.dql.errors import Pos, QueryError
from git_mgit.dql.output import Result

__all__ = ["Pos", "QueryError", "Result", "query"]


def query(
    text: str,
    repo: str | os.PathLike[str] | None = None,
    jobs: int | None = 1,
    dry_run: bool = False,
    cluster: str | None = None,
) -> Result:
    """Run one query on the repository at `repo` (default: around the current directory).

    `jobs`: worker processes for evaluate (on the Dask cluster at `cluster`, when
    given: docs/runtime.md); `dry_run`: check and show what slice,
    construct or evaluate would make, and make nothing. Raises QueryError
    (pointing at the query text) or another MgitError.
    """
    from git_mgit.dql.engine import run
    from git_mgit.gitcmd import find_repo
    from git_mgit.lineage.api import Lineage

    return run(text, Lineage(find_repo(repo)), jobs=jobs, dry_run=dry_run, cluster=cluster)
