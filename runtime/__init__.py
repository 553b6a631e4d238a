"""Runtime for the lineage graph: registered tests, bisection, update cascades, model loading.

The only part of git-mgit that imports torch (and the user's own code).

    from git_mgit.runtime import load_models
    loaded = load_models(["base", "ft-frozen", "ft-full"])
    print(loaded.summary())          # tensors with the same content share one storage

Modules: `targets` (which versions a command works on), `callables`
(the user's `module:callable` references and their code hashes), `worker`
and `jobs` (worker processes that run user code), `testing` (run, record,
reuse test results), `bisecting`, `cascade`, `loading`.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "load_models": "loading",
    "load_state_dict": "loading",
    "Loaded": "loading",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    """Import torch only when something that needs it is used."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
