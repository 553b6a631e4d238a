"""The merge driver with the real git: plain merges, conflicts, resolve, strategies, rebase, lineage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes, status_porcelain, tensors_of

NO_INPUT = ""  # stdin closed and empty: a prompt would fail, not hang


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_mgit_repo(tmp_path / "work")


def commit(repo: Path, tensors: dict, message: str) -> None:
    (repo / "model.safetensors").write_bytes(save(tensors, metadata={"m": "1"}))
    run_git("add", "model.safetensors", cwd=repo)
    run_git("commit", "-q", "-m", message, cwd=repo)


def branches(repo: Path, a: dict, b: dict) -> dict:
    """base on main; branch a and branch b each change the base; b is checked out."""
    base = tensors_of(model_bytes(1))
    commit(repo, base, "base")
    run_git("checkout", "-q", "-b", "a", cwd=repo)
    commit(repo, {**base, **a}, "a")
    run_git("checkout", "-q", "-b", "b", "main", cwd=repo)
    commit(repo, {**base, **b}, "b")
    return base


def model(repo: Path) -> dict:
    return tensors_of((repo / "model.safetensors").read_bytes())


def blob(repo: Path, rev: str) -> str:
    return run_git("rev-parse", f"{rev}:model.safetensors", cwd=repo).stdout.strip()


def graph(repo: Path) -> dict:
    return json.loads(mgit("graph", "--format", "json", "--no-sizes", cwd=repo).stdout)


def parents_of(g: dict, version: str) -> set[tuple[str, str]]:
    return {
        (e["parent"], e.get("function", ""))
        for e in g["edges"]
        if e["child"] == version and e["kind"] == "provenance"
    }


def test_different_tensors_merge_with_plain_git_merge_and_both_parents_recorded(repo: Path) -> None:
    w0 = tensors_of(model_bytes(1))["layer.0.weight"]
    h0 = tensors_of(model_bytes(1))["head.weight"]
    branches(repo, {"layer.0.weight": w0 + np.float32(1)}, {"head.weight": h0 * np.float16(2)})
    ours, theirs = blob(repo, "b"), blob(repo, "a")
    merge = run_git("merge", "--no-edit", "a", cwd=repo, input=NO_INPUT)
    assert "possible conflict" in merge.stderr
    m = model(repo)
    assert (m["layer.0.weight"] == w0 + np.float32(1)).all()
    assert (m["head.weight"] == h0 * np.float16(2)).all()
    assert status_porcelain(repo) == ""
    merged = blob(repo, "HEAD")
    g = graph(repo)
    assert parents_of(g, merged) >= {(ours, "merge"), (theirs, "merge")}
    assert merged in [n["id"] for n in g["nodes"] if n.get("possible_conflict")]


def test_declared_independent_groups_are_no_possible_conflict(repo: Path) -> None:
    (repo / "mgit.toml").write_text(
        '[models.m]\npath = "model.safetensors"\nindependent = ["head.*"]\n'
    )
    run_git("add", "mgit.toml", cwd=repo)
    w0 = tensors_of(model_bytes(1))["layer.0.weight"]
    h0 = tensors_of(model_bytes(1))["head.weight"]
    branches(repo, {"layer.0.weight": w0 + np.float32(1)}, {"head.weight": h0 * np.float16(2)})
    merge = run_git("merge", "--no-edit", "a", cwd=repo, input=NO_INPUT)
    assert "possible conflict" not in merge.stderr
    assert not [n for n in graph(repo)["nodes"] if n.get("possible_conflict")]


def test_same_tensor_conflict_is_reported_then_resolved_by_average(repo: Path) -> None:
    b0 = tensors_of(model_bytes(1))["layer.0.bias"]
    rng = np.random.default_rng(5)
    up = (b0 + rng.standard_normal(64).astype(np.float32)).astype(np.float32)
    down = (b0 - rng.standard_normal(64).astype(np.float32)).astype(np.float32)
    branches(repo, {"layer.0.bias": up}, {"layer.0.bias": down})
    ours, theirs = blob(repo, "b"), blob(repo, "a")
    proc = run_git("merge", "--no-edit", "a", cwd=repo, check=False, input=NO_INPUT)
    assert proc.returncode != 0
    assert "layer.0.bias" in proc.stderr and "git mgit resolve model.safetensors" in proc.stderr
    assert status_porcelain(repo).startswith("UU model.safetensors")
    assert (model(repo)["layer.0.bias"] == down).all()  # ours meanwhile: a loadable model
    out = mgit("resolve", "model.safetensors", "--strategy", "average", cwd=repo).stdout
    assert "resolved model.safetensors" in out
    assert status_porcelain(repo).startswith("M  model.safetensors")
    exact = ((down.astype(np.float64) + up.astype(np.float64)) / 2).astype(np.float32)
    assert (model(repo)["layer.0.bias"] == exact).all()
    run_git("commit", "-q", "--no-edit", cwd=repo)
    assert status_porcelain(repo) == ""
    assert parents_of(graph(repo), blob(repo, "HEAD")) >= {(ours, "merge"), (theirs, "merge")}


def test_resolve_refuses_what_its_strategy_cannot_settle(repo: Path) -> None:
    h0 = tensors_of(model_bytes(1))["head.weight"]
    branches(repo, {"head.weight": h0.astype(np.float32)}, {"head.weight": h0 * np.float16(2)})
    run_git("merge", "--no-edit", "a", cwd=repo, check=False, input=NO_INPUT)
    before = status_porcelain(repo)
    proc = mgit("resolve", "--strategy", "average", cwd=repo, check=False)
    assert proc.returncode != 0
    assert "head.weight" in proc.stderr and "one dtype and shape" in proc.stderr
    assert status_porcelain(repo) == before and before.startswith("UU")  # nothing touched
    mgit("resolve", "--theirs", cwd=repo)
    assert model(repo)["head.weight"].dtype == np.float32


def test_git_mgit_merge_passes_strategies_to_the_driver(repo: Path) -> None:
    base = tensors_of(model_bytes(1))["layer.0.weight"]
    a, b = base + np.float32(0.5), base - np.float32(0.25)
    branches(repo, {"layer.0.weight": a}, {"layer.0.weight": b})
    mgit("merge", "--strategy", "task-arithmetic", "--", "--no-edit", "a", cwd=repo)
    b64, o64, t64 = (x.astype(np.float64) for x in (base, b, a))
    want = (b64 + (o64 - b64) + (t64 - b64)).astype(np.float32)
    assert (model(repo)["layer.0.weight"] == want).all()
    assert status_porcelain(repo) == ""


def test_mgit_toml_rules_settle_conflicts_in_a_plain_merge(repo: Path) -> None:
    (repo / "mgit.toml").write_text('[merge]\n"layer.*" = "theirs"\n')
    run_git("add", "mgit.toml", cwd=repo)
    b0 = tensors_of(model_bytes(1))["layer.0.bias"]
    branches(repo, {"layer.0.bias": b0 + np.float32(1)}, {"layer.0.bias": b0 - np.float32(1)})
    proc = run_git("merge", "--no-edit", "a", cwd=repo, input=NO_INPUT)
    assert "layer.0.bias (theirs)" in proc.stderr
    assert (model(repo)["layer.0.bias"] == b0 + np.float32(1)).all()


def test_rebase_and_cherry_pick_across_model_changes(repo: Path) -> None:
    w0 = tensors_of(model_bytes(1))["layer.0.weight"]
    h0 = tensors_of(model_bytes(1))["head.weight"]
    branches(repo, {"layer.0.weight": w0 + np.float32(1)}, {"head.weight": h0 * np.float16(2)})
    run_git("rebase", "-q", "a", cwd=repo, input=NO_INPUT)
    m = model(repo)
    assert (m["layer.0.weight"] == w0 + np.float32(1)).all() and (m["head.weight"] == h0 * 2).all()
    assert status_porcelain(repo) == ""
    run_git("checkout", "-q", "-b", "c", "main", cwd=repo)
    run_git("cherry-pick", "a", cwd=repo, input=NO_INPUT)
    assert (model(repo)["layer.0.weight"] == w0 + np.float32(1)).all()
    assert (model(repo)["head.weight"] == h0).all()
    assert status_porcelain(repo) == ""


def test_an_aborted_merge_leaves_no_lineage(repo: Path) -> None:
    w0 = tensors_of(model_bytes(1))["layer.0.weight"]
    h0 = tensors_of(model_bytes(1))["head.weight"]
    branches(repo, {"layer.0.weight": w0 + np.float32(1)}, {"head.weight": h0 * np.float16(2)})
    run_git("merge", "--no-commit", "--no-ff", "a", cwd=repo, input=NO_INPUT)
    staged = run_git("rev-parse", ":model.safetensors", cwd=repo).stdout.strip()
    run_git("merge", "--abort", cwd=repo)
    g = graph(repo)
    assert staged not in {n["id"] for n in g["nodes"]}
    assert all(e["child"] != staged for e in g["edges"])
