"""The package layout DESIGN.md fixes: namespaced folders, a light filter start."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run_python(code: str, tmp_path) -> subprocess.CompletedProcess:
    # Run outside the checkout so only what is installed can be imported.
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True
    )


def test_filter_process_imports_neither_torch_nor_numpy(tmp_path) -> None:
    proc = run_python(
        "import sys, git_mgit.cli.filter_process, git_mgit.filters.mgit_filter, git_mgit.filters.process\n"
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_only_the_execution_layer_imports_the_cluster_engine(tmp_path) -> None:
    """Dask is an optional extra: the core, the filters, the hooks and the runtime's commands
    without --cluster never import it (the cluster backend imports it when it connects)."""
    proc = run_python(
        "import sys, git_mgit.cli, git_mgit.filters.mgit_filter, git_mgit.hooks, "
        "git_mgit.lineage.api, git_mgit.runtime.testing, git_mgit.runtime.cascade, "
        "git_mgit.runtime.bisecting, git_mgit.runtime.selection.driver, "
        "git_mgit.runtime.execution.cluster, git_mgit.runtime.execution.node\n"
        "print(sorted(m for m in ('distributed', 'dask') if m in sys.modules))",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_store_independent_transfer_code_imports_no_store(tmp_path) -> None:
    """Planning, layout, availability and history work the same for every store: they import
    none of stores/; the filter imports no blob store client until a checkout needs one."""
    proc = run_python(
        "import sys, git_mgit.transfer.layout, git_mgit.transfer.availability, "
        "git_mgit.transfer.history, git_mgit.transfer.versions, git_mgit.transfer.prune\n"
        "print(sorted(m for m in sys.modules if m.startswith('git_mgit.transfer.stores')))\n"
        "import git_mgit.filters.mgit_filter, git_mgit.transfer.fetch, git_mgit.transfer.push\n"
        "print(sorted(m for m in ('obstore', 'git_mgit.transfer.stores.lfs.connections', "
        "'git_mgit.transfer.stores.s3.store') if m in sys.modules))",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[]", "[]"]


@pytest.mark.parametrize("name", ["filters", "hooks", "runtime"])
def test_folders_are_only_importable_inside_the_namespace(tmp_path, name: str) -> None:
    assert run_python(f"import {name}", tmp_path).returncode != 0
    assert run_python(f"import git_mgit.{name}", tmp_path).returncode == 0


def test_console_script_runs(tmp_path) -> None:
    proc = subprocess.run(
        ["git", "mgit", "--version"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("git-mgit ")


def test_every_package_folder_is_in_the_wheel() -> None:
    from pathlib import Path

    import tomlkit

    root = Path(__file__).resolve().parents[1]
    listed = set(
        tomlkit.parse((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        "git_mgit": "git_mgit",
        "filters": "git_mgit.filters",
        "hooks": "git_mgit.hooks",
        "runtime": "git_mgit.runtime",
    }
    found = set()
    for folder, name in folders.items():
        for init in (root / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(root / folder).parts
            found.add(".".join((name, *rel)))
    assert found == listed
