"""`git mgit lineage infer` recovers a known family: fine-tunes, a pruned variant, a scratch model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from git_mgit.cli import lineage_infer
from git_mgit.lineage import Lineage, infer
from tests.gitsandbox import rev_parse, run_git
from tests.mgitrepo import init_mgit_repo, mgit

TRUE_EDGES = {("base", "ft_a"), ("base", "ft_b"), ("ft_a", "pruned")}


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
    """Frozen tensors stay identical; the others move by small noise (zero biases too)."""
    rng = np.random.default_rng(seed)
    return {
        k: v
        if k in frozen
        else v + (rng.standard_normal(v.shape) * scale * (np.std(v) or 1)).astype(v.dtype)
        for k, v in base.items()
    }


def prune(model: dict, share: float = 0.5) -> dict:
    """The smallest `share` of each weight matrix's magnitudes set to zero."""
    out = {}
    for k, v in model.items():
        if v.ndim == 2:
            v = np.where(np.abs(v) < np.quantile(np.abs(v), share), 0, v).astype(v.dtype)
        out[k] = v
    return out


def family() -> dict[str, dict[str, np.ndarray]]:
    base = weights(0)
    ft_a = finetune(base, 1, frozen=("embed.weight", "layer.0.weight", "layer.0.bias"))
    ft_b = finetune(base, 2, frozen=("embed.weight",))
    ft_b["head.weight"] = np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32)
    return {
        "base": base,
        "ft_a": ft_a,
        "ft_b": ft_b,  # a new task: a head of another shape
        "pruned": prune(ft_a),
        "scratch": weights(99),  # same architecture, independent weights
    }


def commit_family(root: Path, one_commit: bool) -> dict[str, str]:
    """The family in one commit, or one commit per model in the order they were made.

    One `git add` either way (the filter runs once); the commit chain is built
    with plumbing, which is what makes five commits cheap.
    """
    files = {f"{name}.safetensors": save(t) for name, t in family().items()}
    for path, data in files.items():
        (root / path).write_bytes(data)
    run_git("add", *files, cwd=root)
    if one_commit:
        run_git("commit", "-q", "-m", "the whole family at once", cwd=root)
    else:
        staged = run_git("ls-files", "-s", cwd=root).stdout.splitlines()
        blobs = {line.split("\t")[1]: line.split()[1] for line in staged}
        parent: list[str] = []
        for i, path in enumerate(files):
            listing = "".join(f"100644 blob {blobs[p]}\t{p}\n" for p in list(files)[: i + 1])
            tree = run_git("mktree", input=listing, cwd=root).stdout.strip()
            commit = run_git("commit-tree", tree, *parent, "-m", path, cwd=root).stdout.strip()
            parent = ["-p", commit]
        run_git("update-ref", "HEAD", commit, cwd=root)
    return {Path(p).stem: rev_parse(root, f"HEAD:{p}") for p in files}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = init_mgit_repo(tmp_path / "work")
    monkeypatch.chdir(root)
    return root


def proposed(ids: dict[str, str], **kwargs) -> dict[str, infer.Proposal]:
    names = {oid: name for name, oid in ids.items()}
    return {names[p.child]: p for p in infer.propose(Lineage(), **kwargs)}


def edges(ids: dict[str, str], proposals: dict[str, infer.Proposal]) -> set[tuple[str, str]]:
    names = {oid: name for name, oid in ids.items()}
    return {(names[p.parent], child) for child, p in proposals.items() if p.parent}


@pytest.mark.parametrize(
    ("one_commit", "chunk_size"),
    [(False, None), (True, None), (False, "4096")],
    ids=["commit-by-commit", "one-commit", "4KiB-chunks"],
)
def test_recovers_every_true_edge_and_marks_roots(
    repo: Path, one_commit: bool, chunk_size: str | None
) -> None:
    if chunk_size:  # several chunks per tensor: samples come from the first that differs
        run_git("config", "mgit.chunkSize", chunk_size, cwd=repo)
    ids = commit_family(repo, one_commit)
    got = proposed(ids)
    assert set(got) == set(ids)
    assert edges(ids, got) == TRUE_EDGES
    assert got["base"].parent is None and got["scratch"].parent is None
    assert got["scratch"].contextual > 0.9  # independent weights: only the zero biases agree
    assert got["ft_b"].structural == pytest.approx(2 / 12)  # its head matches nothing
    assert got["ft_a"].structural == 0 == got["pruned"].structural
    assert got["ft_a"].contextual < got["pruned"].contextual < 0.5


def test_threshold_and_no_cycles_with_declared_edges(repo: Path) -> None:
    ids = commit_family(repo, one_commit=False)
    assert all(p.parent is None for p in proposed(ids, threshold=0.0).values())
    Lineage().add_edge("pruned.safetensors", "ft_a.safetensors")  # declared backwards
    got = proposed(ids)
    assert "ft_a" not in got  # it has a parent now
    assert got["pruned"].parent == ids["base"]  # ft_a descends from it: not a candidate
    assert infer.apply(Lineage(), got.values()) == 2


def test_apply_writes_the_edges_and_a_second_run_has_nothing_new(repo: Path) -> None:
    ids = commit_family(repo, one_commit=False)
    dry = mgit("lineage", "infer", cwd=repo).stdout
    assert "nothing written" in dry and "(trained from scratch)" in dry
    assert [line.split()[:2] for line in dry.splitlines()[1:3]] == [
        [f"base.safetensors@{ids['base'][:7]}", "root"],
        [f"ft_a.safetensors@{ids['ft_a'][:7]}", f"base.safetensors@{ids['base'][:7]}"],
    ]
    assert Lineage().graph.parents(ids["ft_a"]) == []
    parser = argparse.ArgumentParser()
    lineage_infer.add_arguments(parser)
    assert lineage_infer.run(parser.parse_args(["--apply"])) == 0
    g = Lineage().graph
    for parent, child in TRUE_EDGES:
        assert g.parents(ids[child]) == [ids[parent]]
        assert g.in_edges(ids[child])[0].info["function"] == "inferred"
    again = json.loads(mgit("lineage", "infer", "--json", cwd=repo).stdout)
    assert {p["child"] for p in again} == {ids["base"], ids["scratch"]}
    assert all(p["parent"] is None for p in again)
    assert "recorded 0 provenance edge(s)" in mgit("lineage", "infer", "--apply", cwd=repo).stdout
