"""The lineage API (MGit's Table 4) against real repositories: Python and CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import PROVENANCE, VERSION, Lineage, LineageError, commit_model, traversal
from git_mgit.lineage.resolve import UnknownModel
from git_mgit.repoconfig import ConfigError
from tests.gitsandbox import commit_files, rev_parse, run_git
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes, status_porcelain, tensors_of


@pytest.fixture
def family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """base v1, a fine-tune of it, then base v2; cwd is the repo."""
    root = init_mgit_repo(tmp_path / "work")
    b1 = model_bytes(1)
    commit_files(root, {"base.safetensors": b1}, "base")
    commit_files(root, {"ft.safetensors": model_bytes(2, base=tensors_of(b1), step=1e-3)}, "ft")
    commit_files(root, {"base.safetensors": model_bytes(3, base=tensors_of(b1), step=1e-2)}, "v2")
    monkeypatch.chdir(root)
    return {
        "root": str(root),
        "base1": rev_parse(root, "HEAD~2:base.safetensors"),
        "ft": rev_parse(root, "HEAD:ft.safetensors"),
        "base2": rev_parse(root, "HEAD:base.safetensors"),
    }


def note_lines(oid: str) -> list[str]:
    return run_git("notes", "--ref=mgit", "show", oid, cwd=Path.cwd()).stdout.splitlines()


def test_history_gives_versions_and_implicit_version_edges(family) -> None:
    g = Lineage().graph
    assert {family["base1"], family["ft"], family["base2"]} <= set(g.nodes)
    assert g.nodes[family["base1"]].path == "base.safetensors"
    assert g.children(family["base1"], (VERSION,)) == [family["base2"]]
    assert Lineage().get_next_version(family["base1"]) == family["base2"]
    assert Lineage().get_next_version(family["base2"]) is None


def test_add_node_writes_a_sorted_note_that_git_reads(family) -> None:
    lin = Lineage()
    v = lin.add_node("HEAD~2:base.safetensors", name="base-v1", type="mlp")
    assert v.id == family["base1"]
    lines = note_lines(v.id)
    assert lines == sorted(set(lines))
    record = json.loads(lines[0])
    assert record["name"] == "base-v1" and record["type"] == "mlp"
    fresh = Lineage()
    assert fresh.resolve("base-v1").id == family["base1"]
    assert fresh.graph.nodes[family["base1"]].type == "mlp"


def test_names_are_unique(family) -> None:
    lin = Lineage()
    lin.add_node(family["base1"], name="base")
    with pytest.raises(LineageError, match="already names"):
        lin.add_node(family["base2"], name="base")


def test_a_name_and_a_declared_model_for_different_files_is_an_error(family) -> None:
    Path("mgit.toml").write_text('[models.base]\npath = "base.safetensors"\n')
    lin = Lineage()
    lin.add_node(family["base1"], name="base")  # a version of the same file: the name wins
    assert lin.resolve("base").id == family["base1"]
    lin.add_node(family["ft"], name="tuned")
    Path("mgit.toml").write_text('[models.tuned]\npath = "other.safetensors"\n')
    with pytest.raises(UnknownModel, match=r"both the name of a version of ft\.safetensors"):
        Lineage().resolve("tuned")


def test_add_edge_records_function_and_code_commit(family) -> None:
    lin = Lineage()
    lin.add_node(family["base1"], name="base")
    edge = lin.add_edge("base", "ft.safetensors", function="train:finetune")
    assert edge.info["function"] == "train:finetune"
    assert edge.info["code"] == rev_parse(Path.cwd(), "HEAD")
    g = Lineage().graph
    assert g.parents(family["ft"]) == [family["base1"]]
    assert g.children(family["base1"]) == [family["ft"]]


def test_cli_uses_mgit_names_with_dashes_and_underscores(family) -> None:
    cwd = Path.cwd()
    mgit("lineage", "add-node", family["base1"], "--name", "base", cwd=cwd)
    mgit("lineage", "add_edge", "base", "ft.safetensors", "--function", "t:f", cwd=cwd)
    out = mgit("lineage", "get-next-version", "base", "--json", cwd=cwd).stdout
    assert json.loads(out)["id"] == family["base2"]
    order = mgit("lineage", "traverse", "bfs", "base", cwd=cwd).stdout.split()
    assert order[0] == family["base1"][:10]
    assert {family["ft"][:10], family["base2"][:10]} <= set(order)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no-such-model", "unknown model 'no-such-model'"),
        ("HEAD:missing.safetensors", "no missing.safetensors in HEAD"),
        ("HEAD", "not a model version"),
        ("HEAD:.gitattributes", "not a model version"),
    ],
)
def test_bad_references_get_a_clear_one_line_error(family, ref: str, message: str) -> None:
    with pytest.raises(UnknownModel, match=message):
        Lineage().add_edge(ref, "ft.safetensors")
    proc = mgit("lineage", "add-edge", ref, "ft.safetensors", cwd=Path.cwd(), check=False)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cycles_are_refused(family) -> None:
    lin = Lineage()
    lin.add_edge(family["base1"], family["ft"])
    lin.add_edge(family["ft"], family["base2"])
    with pytest.raises(LineageError, match="cycle"):
        lin.add_edge(family["base2"], family["base1"])
    with pytest.raises(LineageError, match="cycle"):
        lin.add_version_edge(family["base2"], family["base1"])  # history has base1 -> base2
    with pytest.raises(LineageError, match="two different versions"):
        lin.add_edge(family["ft"], family["ft"])
    lin.add_edge(family["base1"], family["ft"])  # re-adding an existing edge changes nothing
    lin.add_edge(family["base1"], family["base2"])  # a second path to a descendant is no cycle
    g = Lineage().graph
    assert g.parents(family["ft"]) == [family["base1"]]
    assert sorted(g.parents(family["base2"])) == sorted([family["ft"], family["base1"]])


def test_remove_edge_is_a_tombstone_and_can_be_undone(family) -> None:
    lin = Lineage()
    lin.add_edge(family["base1"], family["ft"], function="a:b")
    lin.remove_edge(family["base1"], family["ft"])
    assert Lineage().graph.parents(family["ft"]) == []
    assert len(note_lines(family["ft"])) == 2  # the edge and its tombstone: nothing deleted
    with pytest.raises(LineageError, match="no provenance edge"):
        Lineage().remove_edge(family["base1"], family["ft"])
    Lineage().add_edge(family["base1"], family["ft"], function="a:b")
    assert Lineage().graph.parents(family["ft"]) == [family["base1"]]


def test_remove_node_with_subtree(family) -> None:
    lin = Lineage()
    lin.add_edge(family["base1"], family["ft"])
    gone = lin.remove_node(family["base1"], subtree=True)
    assert set(gone) == {family["base1"], family["ft"]}
    g = Lineage().graph
    assert family["base1"] not in g and family["ft"] not in g and family["base2"] in g
    Lineage().add_node(family["ft"], name="back")  # re-adding revives it
    assert "back" in {n.name for n in Lineage().graph.nodes.values()}


def test_version_edges_across_paths(family) -> None:
    lin = Lineage()
    lin.add_node(family["ft"], type="small")
    lin.add_node(family["base2"], type="big")
    with pytest.raises(LineageError, match="one type"):
        lin.add_version_edge(family["ft"], family["base2"])
    commit_files(Path.cwd(), {"resnet101.safetensors": model_bytes(9, n=300)}, "from scratch")
    edge = Lineage().add_version_edge(family["ft"], "resnet101.safetensors")
    g = Lineage().graph
    assert family["ft"] in g.parents(edge.child, (VERSION,))
    assert g.parents(edge.child, (PROVENANCE,)) == []  # a replacement, not a derivation
    with pytest.raises(LineageError, match="from git history"):
        Lineage().remove_edge(family["base1"], family["base2"], VERSION)
    Lineage().remove_edge(family["ft"], "resnet101.safetensors", VERSION)
    assert Lineage().graph.parents(edge.child, (VERSION,)) == []


def test_register_functions_edit_mgit_toml_and_keep_comments(family) -> None:
    toml = Path("mgit.toml")
    toml.write_text('# our models\n[models.base]\npath = "base.safetensors"  # the root\n')
    lin = Lineage()
    lin.register_creation_function("base", "train.pretrain:run")
    lin.register_test_function("acc", "checks:accuracy", types="mlp", condition="accuracy >= 0.9")
    lin.register_creation_function("ft.safetensors", "train:finetune")  # declares the model
    text = toml.read_text()
    assert "# our models" in text and "# the root" in text
    cfg = Lineage().config
    assert cfg.models["base"].creation == "train.pretrain:run"
    assert cfg.models["ft.safetensors"].path == "ft.safetensors"
    assert cfg.tests["acc"].applies_to("x", "mlp") and not cfg.tests["acc"].applies_to("x", "cnn")
    with pytest.raises(ConfigError, match="module:callable"):
        lin.register_creation_function("base", "not a callable")
    with pytest.raises(ConfigError, match="comparisons"):
        lin.register_test_function("bad", "checks:f", condition="__import__('os')")
    lin.deregister_test_function("acc")
    assert "acc" not in Lineage().config.tests
    with pytest.raises(ConfigError, match="no test named"):
        lin.deregister_test_function("acc")


def test_traversals_on_a_diamond(family) -> None:
    root = Path.cwd()
    b1 = model_bytes(4)
    commit_files(root, {"a.safetensors": b1, "b.safetensors": model_bytes(5)}, "two")
    commit_files(root, {"m.safetensors": model_bytes(6)}, "merged")
    lin = Lineage()
    for p, c in [("base.safetensors", "a.safetensors"), ("base.safetensors", "b.safetensors")]:
        lin.add_edge(p, c)
    lin.add_edge("a.safetensors", "m.safetensors")
    lin.add_edge("b.safetensors", "m.safetensors")
    g = Lineage().graph
    ids = {p: lin.resolve(p).id for p in ("base.safetensors", "a.safetensors", "b.safetensors")}
    m = lin.resolve("m.safetensors").id
    base2 = ids["base.safetensors"]
    topo = list(traversal.all_parents_first(g, base2))
    assert topo[0] == base2 and topo[-1] == m and len(topo) == 4
    assert list(traversal.bfs(g, base2, (PROVENANCE,)))[-1] == m
    dfs = list(traversal.dfs(g, base2, (PROVENANCE,)))
    assert dfs[0] == base2 and set(dfs) == {base2, ids["a.safetensors"], ids["b.safetensors"], m}
    assert list(traversal.provenance(g, base2, stop=lambda o: o == ids["a.safetensors"])) == [
        base2,
        ids["a.safetensors"],
        ids["b.safetensors"],
        m,
    ]
    skipped = list(traversal.bfs(g, base2, skip=lambda o: o == ids["a.safetensors"]))
    assert ids["a.safetensors"] not in skipped and m in skipped
    assert list(traversal.versions(g, family["base1"])) == [family["base1"], base2]


def test_bisect_generator_finds_the_boundary_in_log_steps() -> None:
    chain = [f"v{i}" for i in range(100)]
    search = traversal.bisect(chain)
    asked = 0
    version = next(search)
    try:
        while True:
            asked += 1
            version = search.send(int(version[1:]) < 37)
    except StopIteration as done:
        assert done.value == "v37"
    assert asked <= 7


def test_two_clones_edit_concurrently_and_nothing_is_lost(family, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    run_git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    root = Path(family["root"])
    run_git("remote", "add", "origin", remote.as_uri(), cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    other = tmp_path / "other"
    run_git("clone", "-q", remote.as_uri(), str(other), cwd=tmp_path)
    Lineage(find_repo(root)).add_edge(family["base1"], family["ft"], function="mine:f")
    Lineage(find_repo(other)).add_node(family["base2"], name="theirs")
    Lineage(find_repo(other)).add_edge(family["ft"], family["base2"], function="theirs:g")
    commit_files(root, {"README": "models\n"}, "readme")
    run_git("push", "-q", "origin", "main", cwd=root)  # the pre-push hook sends the notes
    mgit("push", "origin", cwd=other)  # rejected at first: fetches, merges, retries
    for clone in (root, other):
        mgit("fetch", "origin", cwd=clone)
        g = Lineage(find_repo(clone)).graph
        assert g.parents(family["ft"]) == [family["base1"]], clone
        assert g.parents(family["base2"]) == [family["ft"]], clone
        assert g.nodes[family["base2"]].name == "theirs", clone


def test_rebase_and_cherry_pick_keep_the_graph(family) -> None:
    root = Path.cwd()
    run_git("checkout", "-q", "-b", "exp", "HEAD~1", cwd=root)
    commit_files(root, {"exp.safetensors": model_bytes(7)}, "experiment")
    exp = rev_parse(root, "HEAD:exp.safetensors")
    Lineage().add_edge(family["ft"], "exp.safetensors", function="e:x")
    run_git("rebase", "-q", "main", cwd=root)
    assert status_porcelain(root) == ""
    assert Lineage().graph.parents(exp) == [family["ft"]]
    run_git("checkout", "-q", "main", cwd=root)
    run_git("cherry-pick", "exp", cwd=root)
    g = Lineage().graph
    assert g.parents(lin_id := Lineage().resolve("exp.safetensors").id) == [family["ft"]]
    assert lin_id == exp


def test_folder_models_are_versions_of_a_tree(tmp_path: Path, monkeypatch) -> None:
    root = init_mgit_repo(tmp_path / "work")
    index = json.dumps({"weight_map": {"embed.weight": "a.safetensors"}})
    shards = {"llm/a.safetensors": model_bytes(1), "llm/b.safetensors": model_bytes(2)}
    commit_files(root, {**shards, "llm/model.safetensors.index.json": index}, "llm v1")
    commit_files(root, {"llm/b.safetensors": model_bytes(3)}, "llm v2")
    monkeypatch.chdir(root)
    lin = Lineage()
    g = lin.graph
    folders = [n for n in g.nodes.values() if n.kind == "folder"]
    assert [n.path for n in folders] == ["llm", "llm"]
    assert all(n.kind == "folder" for n in g.nodes.values())  # shards are not models of their own
    v1, v2 = rev_parse(root, "HEAD~1:llm"), rev_parse(root, "HEAD:llm")
    assert g.children(v1, (VERSION,)) == [v2]
    assert lin.resolve("llm").id == v2 and lin.resolve("llm/").id == v2
    lin.add_node("HEAD:llm", name="llm-v2")
    assert Lineage().resolve("llm-v2").kind == "folder"


def test_commit_model_writes_once_and_records_lineage(tmp_path: Path, monkeypatch) -> None:
    root = init_mgit_repo(tmp_path / "work")
    monkeypatch.chdir(root)
    rng = np.random.default_rng(0)
    sd = {"w": rng.standard_normal((128, 64)).astype(np.float32), "n": np.arange(5)}
    base = commit_model(sd, "models/base.safetensors", name="base", type="mlp")
    sd["w"] = sd["w"] + np.float32(1e-3)
    (root / "notes.txt").write_text("staged but not part of the save\n")
    run_git("add", "notes.txt", cwd=root)
    ft = commit_model(sd, "models/ft.safetensors", parents=["base"], function="train:ft")
    assert (
        tensors_of((root / "models/ft.safetensors").read_bytes())["w"].tobytes()
        == sd["w"].tobytes()
    )
    assert run_git("show", "--name-only", "--format=", ft.commit, cwd=root).stdout.split() == [
        "models/ft.safetensors"
    ]
    assert status_porcelain(root) == "A  notes.txt\n"  # the user's staged file is untouched
    # The index carries the file's stat: git does not read it again (it cannot: no permission).
    os.utime(root / ".git/index", (os.stat(root / ".git/index").st_mtime + 5,) * 2)
    (root / "models/ft.safetensors").chmod(0)
    try:
        assert status_porcelain(root) == "A  notes.txt\n"
    finally:
        (root / "models/ft.safetensors").chmod(0o644)
    g = Lineage().graph
    assert g.parents(ft.version) == [base.version]
    assert g.in_edges(ft.version)[0].info["function"] == "train:ft"
    assert g.nodes[base.version].name == "base"
    (root / "models/ft.safetensors").unlink()
    run_git("checkout", "--", "models/ft.safetensors", cwd=root)
    assert (
        tensors_of((root / "models/ft.safetensors").read_bytes())["w"].tobytes()
        == sd["w"].tobytes()
    )


def test_commit_model_refuses_untracked_paths(tmp_path: Path, monkeypatch) -> None:
    root = init_mgit_repo(tmp_path / "work")
    monkeypatch.chdir(root)
    with pytest.raises(Exception, match="not tracked by git-mgit"):
        commit_model({"w": np.zeros(3, np.float32)}, "model.bin")


def test_declared_parent_is_the_delta_base_of_a_new_path(tmp_path: Path, monkeypatch) -> None:
    root = init_mgit_repo(tmp_path / "work")
    monkeypatch.chdir(root)
    base = model_bytes(1)
    (root / "mgit.toml").write_text(
        '[models.base]\npath = "base.safetensors"\n\n'
        '[models.ft]\npath = "ft.safetensors"\nparents = ["base"]\n'
    )
    commit_files(
        root, {"base.safetensors": base, "mgit.toml": (root / "mgit.toml").read_text()}, "b"
    )
    commit_files(root, {"ft.safetensors": model_bytes(2, base=tensors_of(base), step=1e-4)}, "ft")
    rows = {r["path"]: r for r in json.loads(mgit("status", "--json", cwd=root).stdout)}
    assert rows["ft.safetensors"]["max_depth"] == 1  # stored as deltas against base
    assert rows["base.safetensors"]["max_depth"] == 0
    assert rows["ft.safetensors"]["stored"] < rows["base.safetensors"]["stored"]


def test_graph_and_log_commands(family, tmp_path: Path) -> None:
    cwd = Path.cwd()
    mgit("lineage", "add-node", family["base1"], "--name", "base", cwd=cwd)
    mgit("lineage", "add-edge", "base", "ft.safetensors", "--function", "train:ft", cwd=cwd)
    tree = mgit("graph", cwd=cwd).stdout.splitlines()
    assert tree[0].startswith(f"base  {family['base1'][:10]}  base.safetensors  ")
    assert any(f"derived (train:ft): ft.safetensors@{family['ft'][:7]}" in ln for ln in tree)
    assert any(f"version: base.safetensors@{family['base2'][:7]}" in ln for ln in tree)
    doc = json.loads(mgit("graph", "--format", "json", "--no-sizes", cwd=cwd).stdout)
    assert {n["id"] for n in doc["nodes"]} == {family["base1"], family["ft"], family["base2"]}
    only = json.loads(mgit("graph", "ft.safetensors", "--format", "json", cwd=cwd).stdout)
    assert all(n["stored"] > 0 for n in only["nodes"])
    page = tmp_path / "lineage.html"
    proc = mgit("graph", "--format", "html", "-o", str(page), cwd=cwd)
    assert "wrote" in proc.stderr and family["ft"] in page.read_text()
    log = json.loads(mgit("log", "base.safetensors", "--json", cwd=cwd).stdout)
    assert [r["id"] for r in log] == [family["base2"], family["base1"]]
    assert log[0]["subject"] == "v2" and log[1]["subject"] == "base"
    ft_log = mgit("log", "ft.safetensors", cwd=cwd).stdout
    assert f"derived from base ({family['base1'][:10]}) by train:ft" in ft_log
