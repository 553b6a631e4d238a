"""`git mgit lineage infer` recovers a known family: fine-tunes, a pruned variant, a scratch model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from git_mgit.lineage import Lineage, infer
from tests.gitsandbox import commit_files, rev_parse
from tests.mgitrepo import init_mgit_repo, mgit


def weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "embed.weight": rng.standard_normal((128, 32), dtype=np.float32),
        "layer.0.weight": rng.standard_normal((32, 32), dtype=np.float32) * 0.2,
        "layer.0.bias": np.zeros(32, np.float32),
        "layer.1.weight": rng.standard_normal((32, 32), dtype=np.float32) * 0.2,
        "layer.1.bias": np.zeros(32, np.float32),
        "head.weight": rng.standard_normal((10, 32), dtype=np.float32) * 0.2,
    }


def finetune(base: dict, seed: int, frozen: tuple[str, ...], scale: float = 0.02) -> dict:
    rng = np.random.default_rng(seed)
    return {
        k: v
        if k in frozen
        else v + (rng.standard_normal(v.shape) * scale * (np.std(v) or 1)).astype(v.dtype)
        for k, v in base.items()
    }


def prune(model: dict, share: float = 0.5) -> dict:
    out = {}
    for k, v in model.items():
        if v.ndim == 2:
            v = np.where(np.abs(v) < np.quantile(np.abs(v), share), 0, v).astype(v.dtype)
        out[k] = v
    return out


@pytest.fixture
def family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    root = init_mgit_repo(tmp_path / "work")
    base = weights(0)
    ft_a = finetune(base, 1, frozen=("embed.weight", "layer.0.weight", "layer.0.bias"))
    ft_b = finetune(base, 2, frozen=("embed.weight",))
    ft_b["head.weight"] = np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32)
    models = {
        "base": base,
        "ft_a": ft_a,
        "ft_b": ft_b,  # a new task: a head of another shape
        "pruned": prune(ft_a),
        "scratch": weights(99),
    }
    for name, tensors in models.items():  # committed in the order they were made
        commit_files(root, {f"{name}.safetensors": save(tensors)}, name)
    monkeypatch.chdir(root)
    return {name: rev_parse(root, f"HEAD:{name}.safetensors") for name in models}


TRUE_EDGES = {("base", "ft_a"), ("base", "ft_b"), ("ft_a", "pruned")}


def test_recovers_every_true_edge_and_marks_roots(family: dict[str, str]) -> None:
    names = {oid: name for name, oid in family.items()}
    proposals = {names[p.child]: p for p in infer.propose(Lineage())}
    assert set(proposals) == set(family)
    edges = {(names[p.parent], child) for child, p in proposals.items() if p.parent}
    assert edges == TRUE_EDGES
    assert proposals["base"].parent is None and proposals["scratch"].parent is None
    assert proposals["scratch"].contextual > 0.9  # independent weights: nothing shared
    assert proposals["ft_b"].structural > 0  # its new head matches nothing
    assert proposals["ft_a"].contextual < proposals["pruned"].contextual < 0.5


def test_apply_writes_the_edges_and_a_second_run_has_nothing_new(family: dict[str, str]) -> None:
    cwd = Path.cwd()
    dry = mgit("lineage", "infer", cwd=cwd).stdout
    assert "nothing written" in dry and "(root: trained from scratch)" in dry
    assert Lineage().graph.parents(family["ft_a"]) == []
    applied = mgit("lineage", "infer", "--apply", cwd=cwd).stdout
    assert "recorded 3 provenance edge(s)" in applied
    g = Lineage().graph
    for parent, child in TRUE_EDGES:
        assert g.parents(family[child]) == [family[parent]]
        assert g.in_edges(family[child])[0].info["function"] == "inferred"
    again = json.loads(mgit("lineage", "infer", "--json", cwd=cwd).stdout)
    assert {p["child"] for p in again} == {family["base"], family["scratch"]}
    assert all(p["parent"] is None for p in again)
