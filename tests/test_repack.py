"""`git mgit repack`: global re-planning of delta bases, checked through the real git binary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_mgit.codecs import codec
from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo
from git_mgit.modelfile import manifest as mf
from git_mgit.planning.graph import Scheme
from git_mgit.repack import rewrite
from git_mgit.repack.costs import Budgets
from git_mgit.repack.estimate import estimate
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import ANCHOR_PREFIX
from tests.gitsandbox import Remote, clone, commit_files, run_git
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes, tensors_of

VERSIONS = 6


def _series(root: Path) -> list[tuple[str, bytes]]:
    """A checkpoint series added with delta chains capped at one level (the default's weak spot)."""
    run_git("config", "mgit.maxChainDepth", "1", cwd=root)
    data = model_bytes(1, n=2048)
    out = []
    for i in range(VERSIONS):
        if i:
            data = model_bytes(i + 1, base=tensors_of(data), step=1e-4)
        out.append((commit_files(root, {"a.safetensors": data}, f"step {i}"), data))
    run_git("config", "--unset", "mgit.maxChainDepth", cwd=root)
    return out


def _stored(root: Path) -> int:
    return json.loads(mgit("du", "--json", "--no-plan", cwd=root).stdout)["stored"]


def _anchors(root: Path) -> list[str]:
    return run_git("for-each-ref", "--format=%(refname)", ANCHOR_PREFIX, cwd=root).stdout.split()


def _depths(root: Path, rev: str, path: str = "a.safetensors") -> list[int]:
    """Chain depth of every chunk object of the model file at `rev`."""
    blob = run_git("rev-parse", f"{rev}:{path}", cwd=root).stdout.strip()
    store = ChunkStore(find_repo(root))
    try:
        m = mf.parse(bytes(store.reader.read(blob)))
        return [store.level(c.content_hash).header.depth for c in m.chunks()]
    finally:
        store.close()


def test_repack_stores_less_and_every_version_still_checks_out(
    tmp_path: Path, bare_remote: Remote
) -> None:
    root = init_mgit_repo(tmp_path / "work")
    series = _series(root)
    before, anchors = _stored(root), _anchors(root)

    plan = mgit("repack", "--plan-only", cwd=root).stdout
    assert "best" in plan and "mst (least storage)" in plan
    assert _anchors(root) == anchors and _stored(root) == before  # --plan-only writes nothing

    done = mgit("repack", cwd=root).stdout
    assert "re-encoded" in done
    after = _stored(root)
    assert after < before
    assert len(_anchors(root)) == 1
    mgit("gc", "--prune=now", cwd=root)
    run_git("gc", "-q", "--prune=now", cwd=root)
    mgit("fsck", cwd=root)
    for commit, data in series:
        run_git("checkout", "-q", commit, cwd=root)
        assert (root / "a.safetensors").read_bytes() == data
    run_git("checkout", "-q", "main", cwd=root)
    assert "nothing to do" in mgit("repack", cwd=root).stdout  # a second run finds the plan done

    run_git("remote", "add", "origin", bare_remote.url, cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    other = clone(bare_remote.url, tmp_path / "other")
    assert (other / "a.safetensors").read_bytes() == series[-1][1]
    mgit("fsck", cwd=other)


def test_head_budget_of_one_stores_the_tip_whole(tmp_path: Path) -> None:
    root = init_mgit_repo(tmp_path / "work")
    run_git("config", "mgit.maxChainDepth", "8", cwd=root)
    series = _series(root)
    assert max(_depths(root, "HEAD")) > 0  # the tip is a delta of its predecessor
    mgit("repack", "--head-budget", "1", cwd=root)
    assert _depths(root, "HEAD") == [0] * len(_depths(root, "HEAD"))
    assert max(_depths(root, "HEAD~1")) > 0  # older versions became deltas of newer ones
    run_git("checkout", "-q", series[0][0], cwd=root)
    assert (root / "a.safetensors").read_bytes() == series[0][1]


def test_fine_tune_family_gets_deltas_of_its_declared_parent(tmp_path: Path) -> None:
    root = init_mgit_repo(tmp_path / "work")
    base = model_bytes(1, n=2048)
    commit_files(root, {"base.safetensors": base}, "base")
    tune = model_bytes(7, base=tensors_of(base), step=1e-4)
    commit_files(root, {"tune.safetensors": tune}, "a fine-tune, added before its lineage was")
    assert set(_depths(root, "HEAD", "tune.safetensors")) == {0}  # no base known at add time
    mgit("lineage", "add-edge", "HEAD:base.safetensors", "HEAD:tune.safetensors", cwd=root)
    before = _stored(root)
    mgit("repack", cwd=root)
    assert _stored(root) < before  # the fine-tune is now a delta of its parent
    assert max(_depths(root, "HEAD", "tune.safetensors")) == 1
    mgit("gc", "--prune=now", cwd=root)
    run_git("checkout", "-q", "HEAD", "--", ".", cwd=root)
    (root / "tune.safetensors").unlink()
    run_git("checkout", "-q", "HEAD", "--", "tune.safetensors", cwd=root)
    assert (root / "tune.safetensors").read_bytes() == tune


def test_interrupted_repack_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = init_mgit_repo(tmp_path / "work")
    series = _series(root)
    anchors, before = _anchors(root), _stored(root)
    repo = find_repo(root)
    store = ChunkStore(repo)
    real, calls = codec.encode, []

    def dies_on_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    try:
        est = estimate(repo, store, [], Budgets(), "pas-mt", Scheme.INDEPENDENT)
        assert est.worthwhile
        monkeypatch.setattr(codec, "encode", dies_on_third)
        with pytest.raises(KeyboardInterrupt):
            rewrite.apply(store, est.survey, est.costed, est.plan)
    finally:
        store.close()
    assert not (repo.mgit_dir / "repack.lock").exists()
    assert _anchors(root) == anchors and _stored(root) == before
    run_git("gc", "-q", "--prune=now", cwd=root)  # the half-written pack was never referenced
    mgit("fsck", cwd=root)
    (root / "a.safetensors").unlink()
    run_git("checkout", "-q", "--", "a.safetensors", cwd=root)
    assert (root / "a.safetensors").read_bytes() == series[-1][1]


def test_a_second_repack_at_once_is_refused(tmp_path: Path) -> None:
    root = init_mgit_repo(tmp_path / "work")
    _series(root)
    repo = find_repo(root)
    (repo.mgit_dir / "repack.lock").write_text("")
    proc = mgit("repack", cwd=root, check=False)
    assert proc.returncode != 0 and "another repack is running" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    with pytest.raises(MgitError):
        store = ChunkStore(repo)
        try:
            est = estimate(repo, store, [], Budgets(), "pas-mt", Scheme.INDEPENDENT)
            rewrite.apply(store, est.survey, est.costed, est.plan)
        finally:
            store.close()
