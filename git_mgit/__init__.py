"""git-mgit: model checkpoints as first-class git citizens.

`git_mgit.load(model, planes=k)` reads a model version's tensors, floats from
their top k byte planes with per-element bounds (tensors/multires.py);
`git_mgit.query("select m where ...")` runs a model query (the dql
package, docs/query.md). Both are imported on first use: `import git_mgit`
stays free of numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from git_mgit.lazy import exports

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports them on first use
    from git_mgit.dql import query
    from git_mgit.tensors.multires import Truncated, load

__all__ = ["Truncated", "load", "query"]
__version__ = "0.1.0"

__getattr__ = exports(
    __name__,
    {
        "load": "git_mgit.tensors.multires",
        "Truncated": "git_mgit.tensors.multires",
        "query": "git_mgit.dql",
    },
)
