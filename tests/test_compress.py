"""`git mgit compress --lossy` on real PyTorch models in real git repositories.

A base model and a fine-tune of it (recorded with its provenance edge by
commit_model), a second fine-tune that only mgit.toml relates to the base,
and registered tests (accuracy, and a loss that is better when lower). Every
command runs as a user runs it, `git mgit ...` in a subprocess, with its
worker processes.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load, load_file, save_file

from git_mgit import codecs, hashing
from git_mgit.codecs.objectformat import Codec
from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model, contents, notes, records
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.tensors import numerics
from tests.gitsandbox import clone, run_git
from tests.mgitrepo import init_mgit_repo, mgit
from tests.runtime_repo import ZOO, isolated_home, working_copy, write_user_code

CONFIG = """
[types.mlp]
architecture = "nets:MLP"

[models.base]
path = "models/base.safetensors"
type = "mlp"

[models.ft]
path = "models/ft.safetensors"
type = "mlp"
parents = ["base"]

[models.plain]
path = "models/plain.safetensors"
parents = ["base"]

[tests.accuracy]
function = "checks:accuracy"
types = "mlp"
pass = "accuracy >= 0.5"

[tests.loss]
function = "gate:loss"
types = "mlp"
pass = "loss < 100"
"""

GATE = """
import torch

from nets import task


def loss(model):
    x, y = task(seed=0)
    return {"loss": torch.nn.functional.cross_entropy(model(x), y).item()}
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """base, ft (a fine-tune with a provenance note) and plain (related by mgit.toml only)."""
    with isolated_home(tmp_path_factory.mktemp("template-home")):
        repo = init_mgit_repo(tmp_path_factory.mktemp("template") / "repo")
        write_user_code(repo, CONFIG)
        (repo / "gate.py").write_text(textwrap.dedent(GATE))
        run_git("add", "gate.py", cwd=repo)
        run_git("commit", "-q", "-m", "loss test", cwd=repo)
        sys.path.insert(0, str(ZOO))
        try:
            import nets  # type: ignore[import-not-found]

            torch.manual_seed(0)
            base = nets.fit(nets.MLP(), seed=0, steps=30)
            lin = Lineage(find_repo(repo))
            commit_model(base.state_dict(), repo / "models/base.safetensors", lineage=lin)
            ft = nets.fit(base, seed=0, steps=10).state_dict()
            commit_model(ft, repo / "models/ft.safetensors", parents=["base"], lineage=lin)
            plain = {k: v + 1e-3 * torch.randn_like(v) for k, v in ft.items()}
        finally:
            sys.path.remove(str(ZOO))
            sys.modules.pop("nets", None)
        save_file(plain, repo / "models/plain.safetensors")
        run_git("add", "models/plain.safetensors", cwd=repo)
        run_git("commit", "-q", "-m", "plain", cwd=repo)
        return repo


@pytest.fixture
def repo(template: Path, tmp_path: Path) -> Path:
    return working_copy(template, tmp_path)


def compress(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return mgit("compress", "--lossy", *args, cwd=repo, check=check)


def report(repo: Path, *args: str, code: int = 0) -> dict:
    proc = compress(repo, "--json", *args, check=False)
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout)


def objects(repo: Path, rev: str, path: str) -> dict[str, list]:
    """tensor -> [(codec, stored size)] of the version of `path` at `rev`."""
    store = ChunkStore(find_repo(repo))
    try:
        blob = run_git("rev-parse", f"{rev}:{path}", cwd=repo).stdout.strip()
        m = contents.manifests(store.repo, store.reader, blob, "file")[""]
        return {
            s.name or s.kind: [
                (store.level(h).header.codec, store.locate(h)[1])  # type: ignore[index]
                for h in s.hashes
            ]
            for s in m.segments
        }
    finally:
        store.close()


def stored(table: dict[str, list]) -> int:
    return sum(size for chunks in table.values() for _, size in chunks)


def test_compress_stores_qdelta_objects_that_every_clone_checks_out(
    repo: Path, tmp_path: Path
) -> None:
    model = repo / "models/ft.safetensors"
    original = model.read_bytes()
    out = report(repo, "ft")
    assert out["accepted"] and out["rejected"] is None
    assert out["parent_path"] == "models/base.safetensors" and out["compressed"] >= 2
    assert out["stored_after"] < out["stored_before"] < out["raw"]
    assert out["ratio"] == pytest.approx(out["stored_before"] / out["stored_after"])
    assert set(out["metrics_before"]) == {"accuracy", "loss"}
    assert out["drops"]["accuracy.accuracy"] <= 0.01 and out["drops"]["loss.loss"] <= 0.01

    recon = model.read_bytes()
    assert recon != original and len(recon) == len(original)
    before, after = load(original), load_file(model)
    for name, t in before.items():
        err = (after[name].double() - t.double()).abs().max().item()
        assert err <= out["step"] / 2 + 1e-7, name  # + float32 rounding at weights' scale

    run_git("add", "models/ft.safetensors", cwd=repo)
    run_git("commit", "-q", "-m", "compress ft", cwd=repo)
    version = run_git("rev-parse", "HEAD:models/ft.safetensors", cwd=repo).stdout.strip()
    assert version == out["version"]  # the id compress predicted is what git stored
    now = objects(repo, "HEAD", "models/ft.safetensors")
    for name in ("body.weight", "head.weight"):
        assert [c for c, _ in now[name]] == [Codec.QDELTA]
    assert stored(now) < stored(objects(repo, "HEAD~1", "models/ft.safetensors"))
    assert mgit("fsck", cwd=repo).returncode == 0

    # The compress record and the reconstruction's test results are on the new version.
    lin = Lineage(find_repo(repo))
    assert version in lin.graph.nodes  # loading the graph writes the held records
    note = notes.load(lin.repo).texts[version]
    recs = [r for r in map(records.parse_line, note.splitlines()) if r is not None]
    (rec,) = [r for r in recs if r.kind == "compress"]
    base_version = run_git("rev-parse", "HEAD:models/base.safetensors", cwd=repo).stdout.strip()
    assert rec.fields["parent"] == base_version and rec.fields["eps"] == 1e-4
    assert rec.fields["stored_after"] == out["stored_after"]
    assert rec.fields["metrics_after"] == out["metrics_after"]
    assert "(recorded)" in mgit("test", "ft", "--traversal", "versions", cwd=repo).stdout
    assert not list((lin.repo.mgit_dir / "pending").glob("*.json"))

    # A fresh clone checks out the reconstruction, the parent and the original, byte for byte.
    other = clone(str(repo), tmp_path / "other")
    assert (other / "models/ft.safetensors").read_bytes() == recon
    base = (repo / "models/base.safetensors").read_bytes()
    assert (other / "models/base.safetensors").read_bytes() == base
    run_git("checkout", "-q", "HEAD~1", cwd=other)
    assert (other / "models/ft.safetensors").read_bytes() == original
    assert mgit("fsck", cwd=other).returncode == 0


def anchors(repo: Path) -> list[str]:
    return run_git("for-each-ref", "--format=%(refname)", "refs/mgit/", cwd=repo).stdout.split()


def test_a_metric_that_gets_worse_than_max_drop_rejects_and_changes_nothing(repo: Path) -> None:
    model = repo / "models/ft.safetensors"
    original, refs = model.read_bytes(), anchors(repo)
    coarse = ("ft", "--eps", "0.05")  # steps of ~0.1: the loss must rise
    proc = compress(repo, *coarse, "--max-drop", "0", check=False)
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"rejected: loss\.loss got [\d.]+% worse \(limit 0\.00%\)", proc.stdout)
    assert model.read_bytes() == original and anchors(repo) == refs
    assert not list(model.parent.glob(".mgit-*"))  # the reconstruction on trial is gone
    assert run_git("status", "--porcelain", cwd=repo).stdout == ""
    # loss is lower-is-better (its pass condition bounds it from above): a rise is a drop
    out = report(repo, *coarse, "--max-drop", "1000", "--dry-run", "--parent", "base")
    assert out["accepted"] and out["version"] is None
    assert out["metrics_after"]["loss"]["loss"] > out["metrics_before"]["loss"]["loss"]
    assert out["drops"]["loss.loss"] > 0
    assert model.read_bytes() == original and anchors(repo) == refs


def test_a_test_that_fails_on_the_reconstruction_rejects(repo: Path) -> None:
    weights = load_file(repo / "models/ft.safetensors")["body.weight"].numpy().tobytes()
    (repo / "same.py").write_text(
        "import hashlib\n\n\ndef same(model):\n"
        "    data = model.body.weight.detach().numpy().tobytes()\n"
        f"    return {{'same': float(hashlib.sha256(data).hexdigest() == "
        f"'{hashlib.sha256(weights).hexdigest()}')}}\n"
    )
    config = repo / "mgit.toml"
    config.write_text(
        config.read_text()
        + '\n[tests.same]\nfunction = "same:same"\nmodels = "ft"\npass = "same == 1"\n'
    )
    original = (repo / "models/ft.safetensors").read_bytes()
    out = report(repo, "ft", "--max-drop", "1000", code=1)
    assert "test same fails on the reconstruction (same == 1)" in out["rejected"]
    assert out["metrics_before"]["same"] == {"same": 1.0}
    assert (repo / "models/ft.safetensors").read_bytes() == original


def error(repo: Path, *args: str) -> str:
    proc = mgit("compress", *args, cwd=repo, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("git-mgit: "), proc.stderr
    return lines[0]


def fake_parent(repo: Path, tensor: str, content_hash: bytes) -> str:
    """A manifest like the base's whose `tensor` is the chunk content_hash: a version id."""
    blob = run_git("rev-parse", "HEAD:models/base.safetensors", cwd=repo).stdout.strip()
    text = run_git("cat-file", "blob", blob, cwd=repo).stdout
    m = mf.parse(text.encode())
    m.segments = [
        mf.Segment(s.kind, s.offset, s.length, (content_hash,), s.name, s.dtype, s.shape)
        if s.name == tensor
        else s
        for s in m.segments
    ]
    out = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo, input=m.render(), capture_output=True
    )
    return out.stdout.decode().strip()


def corrupt_qdelta(repo: Path) -> bytes:
    """Store a `qdelta` object of a nudged base body.weight with one payload byte flipped."""
    from git_mgit.codecs import qdelta

    store = ChunkStore(find_repo(repo))
    try:
        blob = run_git("rev-parse", "HEAD:models/base.safetensors", cwd=repo).stdout.strip()
        seg = contents.manifests(store.repo, store.reader, blob, "file")[""].tensors()[
            "body.weight"
        ]
        parent = store.get_raw(seg.hashes[0])
        values = numerics.to_float64("F32", parent)
        child = numerics.from_float64("F32", values + 0.01)
        step = qdelta.step_for(1e-4)
        q = qdelta.quantize("F32", child, parent, step)
        assert q is not None
        target = hashing.digest(q.recon)
        enc = qdelta.encode("F32", q, step, target, codecs.Base(parent, seg.hashes[0], 0))
        body = bytearray(b"".join(bytes(p) for p in enc.parts[1:]))
        body[len(body) // 2] ^= 0xFF
        store.put(target, codecs.Encoded(enc.header, [enc.parts[0], body]))
        store.flush()
        return target
    finally:
        store.close()


def test_bad_input_is_one_line_naming_the_file_and_the_fix(repo: Path) -> None:
    assert "needs --lossy" in error(repo, "ft")
    assert "--eps must be a positive number" in error(repo, "--lossy", "ft", "--eps", "0")
    assert "models/nope.safetensors: no such file" in error(
        repo, "--lossy", "models/nope.safetensors"
    )
    assert "mgit.toml is not tracked by git-mgit" in error(repo, "--lossy", "mgit.toml")
    assert "models/base.safetensors has no lineage parent" in error(repo, "--lossy", "base")
    assert "no registered test applies to models/plain.safetensors" in error(
        repo, "--lossy", "plain"
    )
    missing = fake_parent(repo, "body.weight", b"\x01" * 32)
    message = error(repo, "--lossy", "ft", "--parent", missing)
    assert "1 tensor object(s) are not here and no remote has them" in message
    assert "parent" in message and "`git mgit fetch`" in message
    corrupt = fake_parent(repo, "body.weight", corrupt_qdelta(repo))
    line = error(repo, "--lossy", "ft", "--parent", corrupt)
    assert "a parent object cannot be read" in line and "git mgit fsck" in line
    assert mgit("fsck", cwd=repo, check=False).returncode == 1

    model = repo / "models/ft.safetensors"
    edited = {k: v * 1.01 for k, v in load_file(model).items()}
    save_file(edited, model)
    edited_bytes = model.read_bytes()
    assert "has changes that are not committed" in error(repo, "--lossy", "ft")
    assert model.read_bytes() == edited_bytes


def test_no_tests_is_explicit_and_the_parent_may_come_from_mgit_toml(repo: Path) -> None:
    model = repo / "models/plain.safetensors"
    original = model.read_bytes()
    out = report(repo, "plain", "--no-tests")
    assert out["accepted"] and out["metrics_before"] == {} and out["drops"] == {}
    assert out["parent_path"] == "models/base.safetensors"  # mgit.toml: parents = ["base"]
    recon = model.read_bytes()
    assert recon != original
    run_git("commit", "-q", "-am", "compress plain", cwd=repo)
    # The reconstruction quantizes to itself: compressing again changes nothing.
    again = report(repo, "plain", "--no-tests")
    assert again["version"] == out["version"] and model.read_bytes() == recon
    assert again["stored_after"] == out["stored_after"]  # the same objects, stored once


def test_the_gate_reads_each_metrics_direction_from_its_pass_condition() -> None:
    from git_mgit.repoconfig import TestDecl
    from git_mgit.runtime.compressing import gate, higher_is_better, relative_drop

    acc = TestDecl("acc", "m:f", condition="accuracy >= 0.9")
    err = TestDecl("err", "m:f", condition="error <= 0.2 and n > 3")
    assert higher_is_better(acc, "accuracy") and not higher_is_better(err, "error")
    assert higher_is_better(err, "n") and higher_is_better(TestDecl("x", "m:f"), "loss")
    assert relative_drop(0.90, 0.81, True) == pytest.approx(0.1)
    assert relative_drop(0.10, 0.11, False) == pytest.approx(0.1)
    assert relative_drop(0.10, 0.09, False) == pytest.approx(-0.1)  # better: a negative drop
    assert relative_drop(0.0, -0.5, True) == 0.5  # no scale to divide by: absolute
    assert relative_drop(1.0, float("nan"), True) == float("inf")
    assert relative_drop(float("nan"), float("nan"), True) == 0.0

    before = {"acc": {"accuracy": 0.95}, "err": {"error": 0.10, "n": 5}}
    drops, why = gate(
        [acc, err], before, {"acc": {"accuracy": 0.949}, "err": {"error": 0.1, "n": 5}}, 0.01
    )
    assert why is None and drops["acc.accuracy"] == pytest.approx(0.001 / 0.95)
    _, why = gate(
        [acc, err], before, {"acc": {"accuracy": 0.95}, "err": {"error": 0.25, "n": 5}}, 10
    )
    assert why == "test err fails on the reconstruction (error <= 0.2 and n > 3)"


def test_tensors_pair_by_name_then_by_a_common_subsequence_of_shapes() -> None:
    from git_mgit.lossy import pair
    from git_mgit.tensors.safetensors_format import TensorInfo

    def seg(name: str, shape: tuple[int, ...], dtype: str = "F32") -> mf.Segment:
        return mf.Segment("tensor", 0, 0, (), name, dtype, shape)

    def info(name: str, shape: tuple[int, ...], dtype: str = "F32") -> TensorInfo:
        return TensorInfo(name, dtype, shape, 0, 0)

    old = [("emb", (10, 4)), ("l0.w", (4, 4)), ("l0.b", (4,)), ("l1.w", (4, 4)), ("head", (2, 4))]
    new = [("emb", (10, 4)), ("block.0.w", (4, 4)), ("block.0.b", (4,)), ("block.1.w", (4, 4))]
    parents = {name: seg(name, shape) for name, shape in old} | {"x": seg("x", (3,), "F16")}
    children = [info(*t) for t in [*new, ("extra", (7,)), ("head", (2, 4)), ("x", (3,))]]
    got = {k: v.name for k, v in pair(children, parents).items()}
    renamed = {"block.0.w": "l0.w", "block.0.b": "l0.b", "block.1.w": "l1.w"}
    assert got == {"emb": "emb", "head": "head", **renamed}  # x: same name, another dtype
