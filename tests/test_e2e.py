"""End to end with the real git binary: every everyday git operation on model files."""

from __future__ import annotations

import argparse
import os
import threading
import types
from pathlib import Path

import pytest

from git_mgit.gitcmd import find_repo
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import LookupCache
from tests.gitsandbox import Remote, clone, run_git
from tests.mgitrepo import (
    drop_unreferenced,
    init_mgit_repo,
    mgit,
    model_bytes,
    status_porcelain,
    tensors_of,
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_mgit_repo(tmp_path / "work")


def commit_model(repo: Path, data: bytes, message: str, name: str = "model.safetensors") -> str:
    (repo / name).write_bytes(data)
    run_git("add", name, cwd=repo)
    run_git("commit", "-q", "-m", message, cwd=repo)
    return run_git("rev-parse", "HEAD", cwd=repo).stdout.strip()


def stored_manifest(repo: Path, rev: str, name: str = "model.safetensors") -> mf.Manifest:
    return mf.parse(run_git("cat-file", "blob", f"{rev}:{name}", cwd=repo, text=False).stdout)


def test_add_commit_stores_manifest_and_checkout_restores_bytes(repo: Path) -> None:
    v1 = model_bytes(1)
    c1 = commit_model(repo, v1, "v1")
    m = stored_manifest(repo, c1)
    assert m.kind == "safetensors" and m.size == len(v1)
    assert set(m.tensors()) == {
        "embed.weight",
        "layer.0.weight",
        "layer.0.bias",
        "head.weight",
        "step",
    }
    assert status_porcelain(repo) == ""
    (repo / "model.safetensors").unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1
    assert status_porcelain(repo) == ""


def test_history_checkout_branch_merge_rebase_cherry_pick(repo: Path) -> None:
    v1 = model_bytes(1)
    v2 = model_bytes(2, base=tensors_of(v1), step=1e-4)
    c1 = commit_model(repo, v1, "v1")
    c2 = commit_model(repo, v2, "v2")
    # second version is stored as deltas against the first
    assert any(
        line.split()[-1] != "0" for line in mgit("status", cwd=repo).stdout.splitlines()[1:]
    ), "expected a delta chain depth > 0"
    run_git("checkout", "-q", c1, cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1
    assert status_porcelain(repo) == ""
    run_git("checkout", "-q", "-b", "feature", c2, cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v2
    # merge of non-model changes on both sides keeps the model intact
    (repo / "notes.txt").write_text("feature\n")
    run_git("add", "notes.txt", cwd=repo)
    run_git("commit", "-q", "-m", "feature notes", cwd=repo)
    run_git("checkout", "-q", "main", cwd=repo)
    (repo / "README").write_text("main\n")
    run_git("add", "README", cwd=repo)
    run_git("commit", "-q", "-m", "main readme", cwd=repo)
    run_git("merge", "-q", "--no-edit", "feature", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v2
    assert (repo / "notes.txt").exists() and status_porcelain(repo) == ""
    # rebase and cherry-pick replay model commits byte-exactly
    run_git("checkout", "-q", "-b", "side", c1, cwd=repo)
    v3 = model_bytes(3, base=tensors_of(v1), step=1e-3)
    c3 = commit_model(repo, v3, "v3 on side", name="other.safetensors")
    run_git("rebase", "-q", "main", cwd=repo)
    assert (repo / "other.safetensors").read_bytes() == v3
    assert (repo / "model.safetensors").read_bytes() == v2
    run_git("checkout", "-q", "main", cwd=repo)
    run_git("cherry-pick", c3, cwd=repo)
    assert (repo / "other.safetensors").read_bytes() == v3
    assert status_porcelain(repo) == ""


def test_stash_reset_and_touch_keep_status_clean(repo: Path) -> None:
    v1, v2 = model_bytes(1), model_bytes(2)
    commit_model(repo, v1, "v1")
    (repo / "model.safetensors").write_bytes(v2)
    assert status_porcelain(repo).strip() == "M model.safetensors"
    run_git("stash", "-q", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1
    run_git("stash", "pop", "-q", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v2
    run_git("reset", "-q", "--hard", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1
    assert status_porcelain(repo) == ""
    os.utime(repo / "model.safetensors", (1, 1))  # stat change forces a re-clean
    assert status_porcelain(repo) == ""
    run_git("diff", "--exit-code", cwd=repo)


def push_pull_clone(repo: Path, remote: Remote, tmp_path: Path) -> None:
    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    run_git("remote", "add", "origin", remote.url, cwd=repo)
    run_git("push", "-q", "-u", "origin", "main", cwd=repo)
    refs = run_git("ls-remote", remote.url, cwd=repo).stdout
    assert "refs/mgit/v/" in refs and "refs/mgit/objects/" not in refs
    other = clone(remote.url, tmp_path / "other")
    assert (other / "model.safetensors").read_bytes() == v1
    assert status_porcelain(other) == ""
    # a new version pushed from the clone arrives with pull
    v2 = model_bytes(2, base=tensors_of(v1), step=1e-4)
    commit_model(other, v2, "v2 from clone")
    run_git("push", "-q", "origin", "main", cwd=other)
    run_git("pull", "-q", "--no-rebase", "origin", "main", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v2
    run_git("fetch", "-q", "origin", cwd=other)
    mgit("fsck", cwd=other)


def test_push_pull_clone_over_file_remote(repo: Path, bare_remote: Remote, tmp_path: Path) -> None:
    push_pull_clone(repo, bare_remote, tmp_path)


def test_push_pull_clone_over_smart_http(repo: Path, http_remote: Remote, tmp_path: Path) -> None:
    push_pull_clone(repo, http_remote, tmp_path)


def two_clones(repo: Path, remote: Remote, tmp_path: Path) -> tuple[Path, Path]:
    """Publish a first model version to `remote` and clone it twice."""
    commit_model(repo, model_bytes(1), "v1")
    run_git("remote", "add", "origin", remote.url, cwd=repo)
    run_git("push", "-q", "origin", "main", cwd=repo)
    return clone(remote.url, tmp_path / "a"), clone(remote.url, tmp_path / "b")


def push_at_once(*pushes: tuple[Path, str]) -> None:
    """`git push origin BRANCH` from several clones, released together; all must succeed."""
    barrier = threading.Barrier(len(pushes))
    errors: list[BaseException] = []

    def push(clone_dir: Path, branch: str) -> None:
        try:
            barrier.wait()
            run_git("push", "-q", "origin", branch, cwd=clone_dir)
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=push, args=p) for p in pushes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, str(errors[0])


def test_concurrent_pushes_from_two_clones_both_complete(
    repo: Path, bare_remote: Remote, tmp_path: Path
) -> None:
    a, b = two_clones(repo, bare_remote, tmp_path)
    data = {a: model_bytes(10), b: model_bytes(20)}
    for clone_dir, branch in ((a, "alice"), (b, "bob")):
        run_git("checkout", "-q", "-b", branch, cwd=clone_dir)
        commit_model(clone_dir, data[clone_dir], branch, name=f"{branch}.safetensors")
    push_at_once((a, "alice"), (b, "bob"))
    fresh = clone(bare_remote.url, tmp_path / "fresh")
    for branch, src in (("alice", a), ("bob", b)):
        run_git("checkout", "-q", branch, cwd=fresh)
        assert (fresh / f"{branch}.safetensors").read_bytes() == data[src]


def test_git_gc_prune_now_keeps_everything_needed(repo: Path) -> None:
    versions = [model_bytes(1)]
    for i in range(3):
        versions.append(model_bytes(2 + i, base=tensors_of(versions[-1]), step=1e-4))
    commits = [commit_model(repo, v, f"v{i}") for i, v in enumerate(versions)]
    run_git("gc", "-q", "--prune=now", cwd=repo)
    run_git("fsck", "--strict", cwd=repo)
    for c, v in zip(commits, versions, strict=True):
        run_git("checkout", "-q", c, cwd=repo)
        assert (repo / "model.safetensors").read_bytes() == v
    mgit("fsck", cwd=repo)


def test_git_gc_auto_leaves_the_tensor_packs_to_mgit_gc(repo: Path) -> None:
    """`git gc --auto` (git commit, fetch, merge and pull run it) repacks every pack into
    one once more than gc.autoPackLimit (50) are not kept: every `git add` of a model
    writes one, so git would rewrite the whole tensor store in the background. git-mgit's
    packs are kept; `git mgit gc` repacks them, and keeps what it leaves."""
    versions = [model_bytes(1)]
    for i in range(3):
        versions.append(model_bytes(2 + i, base=tensors_of(versions[-1]), step=1e-4))
    commits = [commit_model(repo, v, f"v{i}") for i, v in enumerate(versions)]
    folder = repo / ".git" / "objects" / "pack"
    ours = sorted(p.name for p in folder.glob("*.pack"))
    assert len(ours) >= len(versions)
    assert all(folder.joinpath(n).with_suffix(".keep").exists() for n in ours)
    auto = run_git(
        "-c", "gc.autoPackLimit=1", "-c", "gc.autoDetach=false", "gc", "--auto", cwd=repo
    )
    assert "Auto packing" not in auto.stderr
    assert sorted(p.name for p in folder.glob("*.pack")) == ours  # not one rewritten
    mgit("gc", "--prune=now", cwd=repo)
    left = [p for p in folder.glob("*.pack") if not p.with_suffix(".mtimes").exists()]
    assert len(left) == 1 and left[0].name not in ours  # git repacked them, then
    assert left[0].with_suffix(".keep").exists()  # they are kept again
    run_git("fsck", "--strict", cwd=repo)
    for c, v in zip(commits, versions, strict=True):
        run_git("checkout", "-q", c, cwd=repo)
        assert (repo / "model.safetensors").read_bytes() == v
    mgit("fsck", cwd=repo)


def test_mgit_gc_drops_unreachable_versions_only(repo: Path) -> None:
    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    commit_model(repo, model_bytes(99), "unrelated v2")
    run_git("reset", "-q", "--hard", "HEAD~1", cwd=repo)
    run_git("reflog", "expire", "--expire=now", "--all", cwd=repo)
    before = mgit("gc", "--dry-run", "--prune=now", cwd=repo).stdout
    assert "would drop" in before and not before.startswith("would drop 0 ")
    mgit("gc", "--prune=now", cwd=repo)
    again = mgit("gc", "--dry-run", "--prune=now", cwd=repo).stdout
    assert again.startswith("would drop 0 ") or "nothing to drop" in again
    (repo / "model.safetensors").unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1
    mgit("fsck", cwd=repo)


def test_mgit_gc_keeps_an_anchor_its_fold_writes_again(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Anchor commits carry their time: a fold of exactly one old anchor's objects, in the
    second `git add` wrote it, is that very commit. Its ref is set, then must not be deleted
    with the old ones (it was, and `git gc` then dropped every object of HEAD's version)."""
    from git_mgit.cli import gc
    from git_mgit.store import anchors

    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    ((ref, written),) = anchor_refs(repo).items()
    commit_model(repo, model_bytes(99), "unrelated, then dropped")
    run_git("reset", "-q", "--hard", "HEAD~1", cwd=repo)
    run_git("reflog", "expire", "--expire=now", "--all", cwd=repo)
    last = max(int(t) for t in anchor_refs(repo).values())
    # the fold in the second v1's anchor was written; `now` a second after the last anchor
    monkeypatch.setattr(anchors, "time", _clock(int(written)))
    monkeypatch.setattr("git_mgit.gitcmd.time", _clock(last))
    monkeypatch.chdir(repo)
    assert gc.run(argparse.Namespace(prune="now", dry_run=False)) == 0
    assert not capsys.readouterr().out.startswith("dropped 0 ")  # the unrelated ones went
    assert list(anchor_refs(repo)) == [ref]
    (repo / "model.safetensors").unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1


def _clock(seconds: int) -> types.SimpleNamespace:
    """A stand-in for the time module whose time() stays at `seconds`."""
    return types.SimpleNamespace(time=lambda: float(seconds))


def anchor_refs(repo: Path) -> dict[str, str]:
    """Anchor ref -> its commit's time (unix seconds)."""
    out = run_git(
        "for-each-ref", "--format=%(refname) %(committerdate:unix)", "refs/mgit/objects/", cwd=repo
    ).stdout
    return dict(line.split() for line in out.splitlines())


def corrupt_one_object(repo: Path) -> None:
    """Flip a payload byte of one tensor object inside its pack (bypassing git's checks)."""
    for pack in (repo / ".git" / "objects" / "pack").glob("*.pack"):
        data = bytearray(pack.read_bytes())
        pos = data.rfind(b"MGOB")
        if pos > 0:
            data[pos + 400] ^= 0xFF  # inside a stored (uncompressed) frame of the object
            pack.chmod(0o644)
            pack.write_bytes(bytes(data))
            return
    raise AssertionError("no object found to corrupt")


def test_corrupt_object_reported_by_fsck_and_smudge(repo: Path) -> None:
    commit_model(repo, model_bytes(1, n=4096), "v1")
    corrupt_one_object(repo)
    fsck = mgit("fsck", cwd=repo, check=False)
    assert fsck.returncode == 1
    assert "model.safetensors" in fsck.stderr and "b3:" in fsck.stderr
    (repo / "model.safetensors").unlink()
    co = run_git("checkout", "--", "model.safetensors", cwd=repo, check=False)
    assert co.returncode != 0
    assert "model.safetensors" in co.stderr and "fsck" in co.stderr
    assert not (repo / "model.safetensors").exists()


def test_corruption_found_after_output_began_still_writes_no_file(repo: Path) -> None:
    commit_model(repo, model_bytes(1, n=3 << 14), "v1")  # a 12 MiB tensor: three blocks
    m = stored_manifest(repo, "HEAD")
    (chunk,) = m.tensors()["embed.weight"].hashes
    store = ChunkStore(find_repo(repo))
    source = store.source(chunk)
    tail = bytes(source.view(source.size - 4096, 4096))  # the last frame: a plane stored raw
    store.close()
    (pack,) = (repo / ".git" / "objects" / "pack").glob("*.pack")
    data = bytearray(pack.read_bytes())
    # the last 16 bytes of the object that lie whole inside one stored block of the pack
    at = next(data.find(tail[i - 16 : i]) for i in range(4096, 16, -1) if tail[i - 16 : i] in data)
    data[at + 15] ^= 0x01  # the format cannot notice; only the BLAKE3 can
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    (repo / "model.safetensors").unlink()
    co = run_git("checkout", "--", "model.safetensors", cwd=repo, check=False)
    assert co.returncode != 0
    assert "model.safetensors" in co.stderr and "does not decode" in co.stderr
    assert not (repo / "model.safetensors").exists()


def test_missing_object_without_remote_is_a_clear_error(
    repo: Path, bare_remote: Remote, tmp_path: Path
) -> None:
    commit_model(repo, model_bytes(1), "v1")
    run_git("remote", "add", "origin", bare_remote.url, cwd=repo)
    # push the branch but not the objects: the remote lacks them
    run_git("push", "-q", "--no-verify", "origin", "main", cwd=repo)
    proc = run_git("clone", "-q", bare_remote.url, str(tmp_path / "c"), cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "model.safetensors" in proc.stderr and "no remote has them" in proc.stderr
    assert not (tmp_path / "c" / "model.safetensors").exists()


def test_not_safetensors_is_stored_opaque_and_round_trips(repo: Path) -> None:
    junk = os.urandom(100_000) + b"not a model"
    (repo / "junk.safetensors").write_bytes(junk)
    add = run_git("add", "junk.safetensors", cwd=repo)
    assert "storing it as opaque" in add.stderr
    refused = run_git("commit", "-q", "-m", "junk", cwd=repo, check=False)
    assert refused.returncode != 0 and "not a valid safetensors file" in refused.stderr
    run_git("commit", "-q", "--no-verify", "-m", "junk", cwd=repo)  # stored all the same
    assert stored_manifest(repo, "HEAD", "junk.safetensors").kind == "opaque"
    (repo / "junk.safetensors").unlink()
    run_git("checkout", "--", "junk.safetensors", cwd=repo)
    assert (repo / "junk.safetensors").read_bytes() == junk


def test_plain_blob_committed_before_tracking_passes_through(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    run_git("init", "-q", str(repo), cwd=tmp_path)
    data = model_bytes(5)
    (repo / "model.safetensors").write_bytes(data)
    run_git("add", "model.safetensors", cwd=repo)
    run_git("commit", "-q", "-m", "before tracking", cwd=repo)
    init_mgit_repo_in_place(repo)
    (repo / "model.safetensors").unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == data


def init_mgit_repo_in_place(repo: Path) -> None:
    mgit("install", cwd=repo)
    mgit("track", "*.safetensors", cwd=repo)


def test_single_shot_filters_work_without_the_process_protocol(repo: Path) -> None:
    run_git("config", "--global", "--unset", "filter.mgit.process", cwd=repo)
    v1 = model_bytes(1)
    c1 = commit_model(repo, v1, "v1")
    assert stored_manifest(repo, c1).kind == "safetensors"
    (repo / "model.safetensors").unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1


def test_chain_depth_is_capped(repo: Path) -> None:
    run_git("config", "mgit.maxChainDepth", "2", cwd=repo)
    versions = [model_bytes(1)]
    for i in range(5):
        versions.append(model_bytes(10 + i, base=tensors_of(versions[-1]), step=1e-5))
    commits = [commit_model(repo, v, f"v{i}") for i, v in enumerate(versions)]
    depths = [int(line.split()[-1]) for line in mgit("status", cwd=repo).stdout.splitlines()[1:]]
    assert depths and max(depths) <= 2
    run_git("checkout", "-q", commits[3], cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == versions[3]


def test_lookup_cache_is_rebuilt_from_refs(repo: Path) -> None:
    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    for f in (repo / ".git" / "mgit").glob("lookup.sqlite*"):
        f.unlink()
    (repo / "model.safetensors").unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1


def test_status_and_ls_files_report_tracked_models(repo: Path) -> None:
    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    status = mgit("status", "--json", cwd=repo).stdout
    import json

    (row,) = json.loads(status)
    assert row["path"] == "model.safetensors" and row["raw"] == len(v1)
    assert 0 < row["stored"] < len(v1) and row["objects"] == 6 and row["missing"] == 0
    listing = mgit("ls-files", cwd=repo).stdout.split()
    assert listing[1:] == ["*", "model.safetensors"]
    text = mgit("status", cwd=repo).stdout
    assert "model.safetensors" in text and "safetensors" in text


def test_git_diff_shows_tensor_listing(repo: Path) -> None:
    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    (repo / "model.safetensors").write_bytes(model_bytes(2, base=tensors_of(v1), step=1e-3))
    diff = run_git("diff", cwd=repo).stdout
    assert "layer.0.weight  F32[64x64]" in diff


def test_push_sends_only_objects_the_pushed_commits_need(repo: Path, bare_remote: Remote) -> None:
    experiment = model_bytes(77, n=2048)
    (repo / "model.safetensors").write_bytes(experiment)
    run_git("add", "model.safetensors", cwd=repo)  # stored locally, never committed
    exp = mf.parse(run_git("cat-file", "blob", ":model.safetensors", cwd=repo, text=False).stdout)
    run_git("reset", "-q", "--hard", cwd=repo)
    commit_model(repo, model_bytes(1), "v1")
    run_git("remote", "add", "origin", bare_remote.url, cwd=repo)
    run_git("push", "-q", "origin", "main", cwd=repo)
    cache = LookupCache(find_repo(repo))
    exp_oids = {
        o for c in exp.chunks() if c.length > 100_000 for o, _ in cache.candidates(c.content_hash)
    }
    cache.close()
    remote_objects = run_git(
        "cat-file", "--batch-all-objects", "--batch-check=%(objectname)", cwd=bare_remote.path
    ).stdout
    assert exp_oids and not exp_oids & set(remote_objects.split())


def test_push_is_refused_when_objects_are_missing_locally(repo: Path, bare_remote: Remote) -> None:
    commit_model(repo, model_bytes(1), "v1")
    refs = run_git("for-each-ref", "--format=delete %(refname)", "refs/mgit/", cwd=repo).stdout
    run_git("update-ref", "--stdin", cwd=repo, input=refs)
    drop_unreferenced(repo)
    for f in (repo / ".git" / "mgit").glob("lookup.sqlite*"):
        f.unlink()
    run_git("remote", "add", "origin", bare_remote.url, cwd=repo)
    proc = run_git("push", "origin", "main", cwd=repo, check=False)
    assert proc.returncode != 0
    assert "cannot push" in proc.stderr and "git mgit fetch" in proc.stderr
    assert "refs/heads/main" not in run_git("ls-remote", bare_remote.url, cwd=repo).stdout


def test_concurrent_lineage_notes_pushes_are_merged(
    repo: Path, bare_remote: Remote, tmp_path: Path
) -> None:
    a, b = two_clones(repo, bare_remote, tmp_path)
    blob = run_git("rev-parse", "HEAD:model.safetensors", cwd=a).stdout.strip()
    for clone_dir, record in ((a, '{"name":"alice"}'), (b, '{"name":"bob"}')):
        run_git("notes", "--ref=mgit", "add", "-m", record, blob, cwd=clone_dir)
        commit_model(clone_dir, model_bytes(5), "more", name=f"{clone_dir.name}.safetensors")
        run_git("checkout", "-q", "-b", clone_dir.name, cwd=clone_dir)
    push_at_once((a, a.name), (b, b.name))
    notes = run_git("notes", "--ref=mgit", "show", blob, cwd=bare_remote.path).stdout
    assert '{"name":"alice"}' in notes and '{"name":"bob"}' in notes


def test_a_refused_notes_push_stops_the_push_after_the_versions_went_out(
    repo: Path, bare_remote: Remote
) -> None:
    """The notes are pushed while the versions are published: when the remote refuses them
    for good, the push stops with git's reason and what to do, once the versions are out."""
    commit_model(repo, model_bytes(1), "v1")
    blob = run_git("rev-parse", "HEAD:model.safetensors", cwd=repo).stdout.strip()
    run_git("notes", "--ref=mgit", "add", "-m", '{"name":"base"}', blob, cwd=repo)
    hook = bare_remote.path / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\nwhile read old new ref; do case $ref in refs/notes/*)"
        " echo 'no notes here' >&2; exit 1;; esac; done\n"
    )
    hook.chmod(0o755)
    run_git("remote", "add", "origin", bare_remote.url, cwd=repo)
    proc = run_git("push", "origin", "main", cwd=repo, check=False)
    assert proc.returncode != 0
    assert "could not push refs/notes/mgit" in proc.stderr and "git mgit push" in proc.stderr
    listed = run_git("ls-remote", bare_remote.url, cwd=repo).stdout
    assert "refs/mgit/v/" in listed  # published beside the notes' attempts
    assert "refs/heads/main" not in listed and "refs/notes/mgit" not in listed


def test_explicit_fetch_and_push_commands(repo: Path, bare_remote: Remote, tmp_path: Path) -> None:
    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    run_git("remote", "add", "origin", bare_remote.url, cwd=repo)
    run_git("push", "-q", "--no-verify", "origin", "main", cwd=repo)
    mgit("push", cwd=repo)
    other = tmp_path / "other"
    run_git("clone", "-q", "--no-checkout", bare_remote.url, str(other), cwd=tmp_path)
    mgit("fetch", cwd=other)
    assert run_git("for-each-ref", "refs/mgit/v/", cwd=other).stdout
    run_git("remote", "set-url", "origin", str(tmp_path / "gone"), cwd=other)  # offline now
    run_git("checkout", "-q", "main", cwd=other)
    assert (other / "model.safetensors").read_bytes() == v1


def test_deleted_anchor_refs_are_noticed_and_objects_rewritten(repo: Path) -> None:
    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    refs = run_git("for-each-ref", "--format=delete %(refname)", "refs/mgit/", cwd=repo).stdout
    run_git("update-ref", "--stdin", cwd=repo, input=refs)
    drop_unreferenced(repo)  # objects are gone, the cache still lists them
    (repo / "model.safetensors").write_bytes(v1)
    run_git("add", "--renormalize", "model.safetensors", cwd=repo)
    run_git("commit", "-q", "--allow-empty", "-m", "re-add", cwd=repo)
    mgit("fsck", cwd=repo)
    (repo / "model.safetensors").unlink()
    run_git("checkout", "--", "model.safetensors", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v1


def test_paths_with_spaces_and_unicode_and_delta_bases(repo: Path) -> None:
    name = "models/my model ü.safetensors"
    (repo / "models").mkdir()
    v1 = model_bytes(1)
    v2 = model_bytes(2, base=tensors_of(v1), step=1e-5)
    commit_model(repo, v1, "v1", name=name)
    c2 = commit_model(repo, v2, "v2", name=name)
    depths = [line for line in mgit("status", cwd=repo).stdout.splitlines() if "my model" in line]
    assert depths and depths[0].split()[-1] != "0", (
        "the previous version at that path is the delta base"
    )
    (repo / name).unlink()
    run_git("checkout", c2, "--", name, cwd=repo)
    assert (repo / name).read_bytes() == v2


def test_linked_worktree_shares_objects(repo: Path, tmp_path: Path) -> None:
    v1 = model_bytes(1)
    commit_model(repo, v1, "v1")
    run_git("worktree", "add", "-q", str(tmp_path / "wt"), "-b", "wt", cwd=repo)
    wt = tmp_path / "wt"
    assert (wt / "model.safetensors").read_bytes() == v1
    v2 = model_bytes(2, base=tensors_of(v1), step=1e-4)
    commit_model(wt, v2, "v2 in worktree")
    run_git("merge", "-q", "--ff-only", "wt", cwd=repo)
    assert (repo / "model.safetensors").read_bytes() == v2
    assert status_porcelain(wt) == "" and status_porcelain(repo) == ""
