"""git-mgit: model checkpoints as first-class git citizens.

`git_mgit.load(model, planes=k)` reads a model version's tensors, floats from
their top k byte planes with per-element bounds (multires.py). It is
imported on first use: `import git_mgit` stays free of numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports them on first use
    from git_mgit.multires import Truncated, load

__all__ = ["Truncated", "load"]
__version__ = "0.1.0"

_LAZY = {"load": "git_mgit.multires", "Truncated": "git_mgit.multires"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
