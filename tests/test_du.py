"""`git mgit du`: storage by model, tensor, codec and chain depth, each object counted once."""

from __future__ import annotations

import json
from pathlib import Path

from tests.gitsandbox import commit_files
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes, tensors_of


def test_du_tables_add_up_and_show_deltas(tmp_path: Path) -> None:
    root = init_mgit_repo(tmp_path / "work")
    v1 = model_bytes(1, n=4096)
    v2 = model_bytes(2, n=4096, base=tensors_of(v1), step=1e-4)
    commit_files(root, {"a.safetensors": v1}, "v1")
    commit_files(root, {"a.safetensors": v2}, "v2")
    commit_files(root, {"b.safetensors": v1}, "the same bytes at another path")

    report = json.loads(mgit("du", "--json", cwd=root).stdout)
    models = {m["name"]: m for m in report["models"]}
    assert models["a.safetensors"]["count"] == 2
    assert models["a.safetensors"]["raw"] == len(v1) + len(v2)
    # the same bytes at another path are the same version (one manifest blob): no new storage
    assert set(models) == {"a.safetensors"}
    for table in ("models", "tensors", "codecs"):
        assert sum(r["stored"] for r in report[table]) == report["stored"] > 0
    codecs = {c["name"] for c in report["codecs"]}
    assert codecs & {"xor", "sub"}  # v2 is stored as deltas against v1
    assert report["depths"].get("1", 0) > 0 and report["missing"] == 0
    tensors = {(t["model"], t["tensor"]) for t in report["tensors"]}
    assert ("a.safetensors", "embed.weight") in tensors

    text = mgit("du", "--top", "3", cwd=root).stdout
    assert "top 3 tensors" in text and "a.safetensors" in text and "total:" in text
    only_first = json.loads(mgit("du", "--rev", "HEAD~2", "--json", cwd=root).stdout)
    assert [m["name"] for m in only_first["models"]] == ["a.safetensors"]
    assert only_first["models"][0]["count"] == 1
