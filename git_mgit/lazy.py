"""Package attributes imported on first use, so importing the package stays cheap.

`import git_mgit` must not pull in numpy (the filter process starts in well
under 0.3 s), and `import git_mgit.runtime` must not pull in torch before a
command has checked its arguments.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def exports(package: str, modules: Mapping[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` giving each name in `modules` from the module it maps to."""

    def __getattr__(name: str) -> object:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
