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

from git_mgit.lazy import exports

_EXPORTS = {
    "load_models": "loading",
    "load_state_dict": "loading",
    "Loaded": "loading",
}

__all__ = sorted(_EXPORTS)
__getattr__ = exports(__name__, {k: f"{__name__}.{m}" for k, m in _EXPORTS.items()})
