"""The user's tests, creation functions and architectures: `module:callable` in their repository.

Only runtime commands import them (filters and hooks never run repository
code). The repository root goes first on sys.path, so `train.finetune`
means the repository's own train/finetune.py.

code_hash() says when a recorded test result is stale: the BLAKE3 of the
callable's name and of the source of its module and of every module of the
repository that module imports, transitively (found by reading the import
statements, not by running them). Editing the test or a helper it uses
makes a new hash; editing an unrelated file does not.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from git_mgit import hashing
from git_mgit.errors import MgitError


class CallableError(MgitError):
    """A `module:callable` reference that cannot be imported or is not callable."""


def _split(ref: str) -> tuple[str, str]:
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise CallableError(f"{ref!r} is not a 'module:callable' reference (e.g. train:finetune)")
    return module, attr


def load(ref: str, root: Path) -> Callable:
    module_name, attr = _split(ref)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CallableError(
            f"{ref}: no module {exc.name!r} in {root} (module names are relative to the "
            "repository root)"
        ) from exc
    except Exception as exc:
        raise CallableError(
            f"{ref}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CallableError(f"{ref}: {module_name} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CallableError(f"{ref}: {attr!r} is not callable")
    return obj


def _module_file(name: str, root: Path) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(file: Path, name: str) -> set[str]:
    """Module names a file imports (relative imports resolved against its package)."""
    try:
        tree = ast.parse(file.read_bytes(), str(file))
    except SyntaxError:
        return set()
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - node.level + 1] if node.level > 1 else parts
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import mod`
    return {n for n in out if n}


def code_hash(ref: str, root: Path) -> str:
    """b3:<hex> over the callable's name and the sources it depends on in the repository."""
    module, _ = _split(ref)
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        file = _module_file(name, root)
        if file is None:
            continue  # not the repository's: a library, whose version is not ours to hash
        seen[name] = file
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo.extend([*parents, *_imports(file, name)])
    parts = [ref.encode()]
    for name in sorted(seen):
        parts += [
            b"\0",
            seen[name].relative_to(root).as_posix().encode(),
            b"\0",
            seen[name].read_bytes(),
        ]
    return hashing.to_text(hashing.digest(b"".join(parts)))
