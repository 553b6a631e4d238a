"""Tensor objects where hosts want them: Git LFS and S3 stores against real servers.

giftless (Git LFS, beside git http-backend, behind HTTP Basic auth) and
SeaweedFS (S3) run on 127.0.0.1; a fault-injecting proxy goes in front of
either; a bare remote applies the Hugging Face Hub's rules in a pre-receive
hook. The workflows every store must pass (clone, on-demand checkout, merge,
rebase, prune, pushes from partial clones...) are in test_transfer.py, run
once per store; this file holds what is particular to the stores.
"""

from __future__ import annotations

import base64
import collections
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from git_mgit.gitcmd import find_repo, remote_file_name
from git_mgit.modelfile import manifest as mf
from git_mgit.transfer.stores.choice import Choice
from git_mgit.transfer.stores.choice import choose as choose_store
from tests.gitsandbox import clone, init_bare_remote, run_git
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes, status_porcelain, tensors_of
from tests.servers.hub import enforce_hub_rules

MODEL = "model.safetensors"


def commit_versions(root: Path, versions: list[bytes], path: str = MODEL) -> list[str]:
    commits = []
    for i, data in enumerate(versions):
        (root / path).write_bytes(data)
        run_git("add", path, cwd=root)
        run_git("commit", "-q", "-m", f"v{i}", cwd=root)
        commits.append(run_git("rev-parse", "HEAD", cwd=root).stdout.strip())
    return commits


def series(n: int, seed: int = 1, size: int = 256) -> list[bytes]:
    out = [model_bytes(seed, n=size)]
    for i in range(1, n):
        out.append(model_bytes(seed + i, n=size, base=tensors_of(out[-1]), step=1e-4))
    return out


def git_blobs(bare: Path) -> dict[str, int]:
    """Every blob in a repository, with its size."""
    out = run_git(
        "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype) %(objectsize)",
        cwd=bare,
    ).stdout  # fmt: skip
    return {
        o: int(n) for o, kind, n in (line.split() for line in out.splitlines()) if kind == "blob"
    }


def pointer_refs_only(bare: Path) -> bool:
    """Whether every version ref on `bare` files pointers (.lfs), none of them an object."""
    refs = run_git("for-each-ref", "--format=%(objectname)", "refs/mgit/v/", cwd=bare).stdout
    names = [
        line.rsplit("/", 1)[-1]
        for ref in refs.split()
        for line in run_git("ls-tree", "-r", ref, cwd=bare).stdout.splitlines()
    ]
    return bool(names) and all(n.endswith(".lfs") for n in names)


def test_the_hubs_rules_refuse_version_refs_and_accept_lfs(lfs_server, tmp_path: Path) -> None:
    """A 3 MB model: the refs store's push is refused by the Hub's hook, whose own words and
    the one-line fix reach the user; with `mgit.store lfs` the push succeeds and a fresh
    clone is byte-exact."""
    url = lfs_server.repo_url()
    bare = lfs_server.git_root / "org" / "repo.git"
    enforce_hub_rules(bare)
    root = init_mgit_repo(tmp_path / "src")
    data = model_bytes(5, n=12000)
    commit_versions(root, [data])
    run_git("remote", "add", "origin", url, cwd=root)
    refused = run_git("push", "origin", "main", cwd=root, check=False)
    assert refused.returncode != 0
    assert "remote: Your push was rejected because it contains binary files" in refused.stderr
    assert "git config mgit.store lfs" in refused.stderr
    assert not run_git("ls-remote", url, cwd=root).stdout  # nothing landed

    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    assert pointer_refs_only(bare)
    assert max(git_blobs(bare).values()) < 1000 * 1000  # what git holds: text, small
    assert lfs_server.uploads()  # the bytes went to LFS
    fresh = clone(url, tmp_path / "fresh")  # needs nothing: the remote records its store
    assert (fresh / MODEL).read_bytes() == data and status_porcelain(fresh) == ""
    store = mgit("store", cwd=fresh).stdout
    assert f"origin: Git LFS at {lfs_server.lfs_url()}" in store
    assert "the remote records it" in store


def test_which_store_a_remote_uses_and_why(tmp_path: Path) -> None:
    root = init_mgit_repo(tmp_path / "src")
    bare = init_bare_remote(tmp_path / "remote.git")
    run_git("remote", "add", "origin", bare.url, cwd=root)
    for name, url in (
        ("hub", "https://huggingface.co/org/model"),
        ("gh", "git@github.com:org/model.git"),
        ("corp", "https://git.example.invalid/org/model.git"),
    ):
        run_git("remote", "add", name, url, cwd=root)

    def choose(remote: str, recorded: str | None = None) -> Choice:
        """As a new git-mgit process chooses: it reads git config once."""
        return choose_store(find_repo(root), remote, recorded)

    assert (choose("origin").kind, choose("corp").kind) == ("refs", "refs")
    assert choose("hub").kind == choose("gh").kind == "lfs"
    assert "huggingface.co runs Git LFS" in choose("hub").reason
    # this repository's own use of git-lfs: every remote git-lfs could push to has an endpoint
    attributes = root / ".gitattributes"
    tracked = attributes.read_text()
    attributes.write_text(
        tracked + "# *.bin filter=lfs\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
    )
    assert choose("corp").kind == "lfs" and "tracks files with git-lfs" in choose("corp").reason
    kept = choose_store(find_repo(root), "corp", None, holds_versions=True)
    assert kept.kind == "refs" and "holds version refs already" in kept.reason
    assert choose("origin").kind == "refs"  # file://: git-lfs's standalone adapter, no endpoint
    attributes.write_text(tracked + "# *.bin filter=lfs\n")
    assert choose("corp").kind == "refs"
    info = root / ".git" / "info" / "attributes"
    info.parent.mkdir(exist_ok=True)
    info.write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
    assert "filter=lfs in attributes" in choose("corp").reason
    info.unlink()
    kept = root / ".git" / "lfs" / "objects" / "ab" / "cd" / ("abcd" + "0" * 60)
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"an object git-lfs smudged")
    assert "keeps objects" in choose("corp").reason and choose("origin").kind == "refs"
    shutil.rmtree(root / ".git" / "lfs")
    assert choose("corp").kind == "refs"
    access = "lfs.https://git.example.invalid/org/model.git/info/lfs.access"
    run_git("config", access, "basic", cwd=root)
    assert choose("corp").kind == "lfs" and access in choose("corp").reason
    run_git("config", "--unset", access, cwd=root)
    run_git("config", "remote.corp.lfsurl", "https://lfs.example.invalid/org/model", cwd=root)
    assert choose("corp").kind == "lfs" and "configured" in choose("corp").reason
    run_git("config", "mgit.store", "s3://team-models/base", cwd=root)
    run_git("config", "mgit.s3Endpoint", "http://127.0.0.1:9", cwd=root)
    s3 = choose("hub")
    assert s3.kind == "s3" and s3.url == "s3://team-models/base?endpoint=http://127.0.0.1:9"
    run_git("config", "remote.hub.mgitStore", "lfs", cwd=root)
    assert choose("hub").kind == "lfs" and "remote.hub.mgitStore" in choose("hub").reason
    assert choose("origin", recorded="lfs").kind == "s3"  # configured beats recorded
    run_git("config", "mgit.store", "nonsense", cwd=root)
    with pytest.raises(Exception, match="not a store; use auto, refs, lfs or s3://"):
        choose("origin")
    run_git("config", "--unset", "mgit.store", cwd=root)
    for name in ("hub", "gh", "corp"):  # no network here: keep the remotes it can ask
        run_git("remote", "remove", name, cwd=root)
    out = mgit("store", cwd=root).stdout  # asks only the reachable file:// remote for a record
    assert "origin: version refs in its git repository" in out


@pytest.mark.parametrize("target", ["lfs", "s3"])
def test_migrate_from_refs_keeps_every_clone_working(
    target: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """20 versions in version refs, migrated: a clone made before still checks out every
    version, a fresh clone after does too (with nothing configured), and pushes from either
    go to the new store; migrated back to version refs from the clone that pushed last, a
    fresh clone checks out every version again."""
    versions = series(20)
    if target == "lfs":
        server = request.getfixturevalue("lfs_server")
        url, bare, to = server.repo_url(), server.git_root / "org" / "repo.git", "lfs"
    else:
        bucket = request.getfixturevalue("s3_bucket")
        remote = init_bare_remote(tmp_path / "remote.git")
        url, bare, to = remote.url, remote.path, bucket.url()
    run_git("config", "--global", "mgit.chunkSize", "8192", cwd=tmp_path)
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions)
    run_git("remote", "add", "origin", url, cwd=root)
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    assert not pointer_refs_only(bare)  # version refs first
    before = clone(url, tmp_path / "before")
    assert local_objects(before) < local_objects(root)  # a partial clone: HEAD's objects

    moved = mgit("store", "migrate", "--to", to, cwd=root)
    assert "20 of 20 version(s) republished" in moved.stderr, moved.stderr
    assert pointer_refs_only(bare)
    run_git("gc", "-q", "--prune=now", cwd=bare)  # the old objects in git: gone
    assert max(git_blobs(bare).values()) < 4096

    for work in (before, clone(url, tmp_path / "after")):
        mgit("fetch", "--all", cwd=work)  # every version's objects, in one batch
        checks_out_every_version(work, commits, versions)
        run_git("checkout", "-q", "main", cwd=work)
        mgit("fsck", cwd=work)
    newer = model_bytes(99, base=tensors_of(versions[-1]), step=1e-4)
    commit_versions(before, [newer])
    run_git("push", "-q", "origin", "main", cwd=before)  # auto: the recorded store
    assert pointer_refs_only(bare)
    fresh = clone(url, tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == newer
    # from a partial clone, too: the one that pushed the newest version, which holds it as
    # `git add` stored it, not as the store has it (it fetches those objects to send them)
    back = mgit("store", "migrate", "--to", "refs", cwd=before)
    assert "21 of 21 version(s) republished" in back.stderr, back.stderr
    assert not pointer_refs_only(bare)
    again = clone(url, tmp_path / "again")
    mgit("fetch", "--all", cwd=again)
    checks_out_every_version(again, commits, versions)


def checks_out_every_version(work: Path, commits: list[str], versions: list[bytes]) -> None:
    for commit, data in zip(commits, versions, strict=True):
        run_git("checkout", "-q", commit, cwd=work)
        assert (work / MODEL).read_bytes() == data


def local_objects(work: Path) -> int:
    return len(git_blobs(work / ".git"))


def test_a_push_setting_never_breaks_git_add(tmp_path: Path, bare_remote) -> None:
    """mgit.maxPushSize below mgit.maxObjectSize on its own: objects follow the smaller."""
    root = init_mgit_repo(tmp_path / "src")
    run_git("config", "mgit.maxPushSize", "100k", cwd=root)
    data = model_bytes(3, n=1200)  # a 300 KiB tensor
    commit_versions(root, [data])
    assert max(git_blobs(root / ".git").values()) <= 100 * 1024
    run_git("remote", "add", "origin", bare_remote.url, cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    assert (clone(bare_remote.url, tmp_path / "c") / MODEL).read_bytes() == data


def test_credentials_never_appear_in_output_or_traces(lfs_server, tmp_path: Path) -> None:
    """Every stream and GIT_TRACE=1 trace of a push and a clone through Git LFS, grepped for
    the password (plain, URL-quoted and inside a Basic header)."""
    root = init_mgit_repo(tmp_path / "src")
    run_git("config", "--global", "mgit.store", "lfs", cwd=tmp_path)
    commit_versions(root, series(2))
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    env = {
        **os.environ,
        "GIT_TRACE": "1",
        "GIT_TRACE_PACKET": "1",
        "GIT_CURL_VERBOSE": "1",
        "GIT_TRACE_CURL": "1",
        "GIT_TRACE2_EVENT": str(tmp_path / "trace2.json"),
    }
    outputs = []
    for args, cwd in (
        (["push", "-u", "origin", "main"], root),
        (["clone", lfs_server.repo_url(), str(tmp_path / "c")], tmp_path),
    ):
        proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        outputs += [proc.stdout, proc.stderr]
    outputs.append((tmp_path / "trace2.json").read_text())
    assert lfs_server.uploads() and (tmp_path / "c" / MODEL).exists()
    secret = lfs_server.password
    basic = base64.b64encode(f"{lfs_server.username}:{secret}".encode()).decode()
    for text in outputs:
        assert secret not in text and basic not in text


def test_a_password_in_the_pushed_url_stays_out_of_every_file_and_ref(
    lfs_server, tmp_path: Path
) -> None:
    """`git push https://user:token@host/repo` (as the Hub's docs show it): what git-mgit
    keeps of the remote (its listing, the store it records) is filed under the URL without
    the password, and no file it writes holds it."""
    root = init_mgit_repo(tmp_path / "src")
    run_git("config", "--global", "mgit.store", "lfs", cwd=tmp_path)
    commit_versions(root, series(2))
    secret = lfs_server.password
    url = lfs_server.repo_url().replace("://", f"://{lfs_server.username}:{secret}@", 1)
    run_git("push", "-q", url, "main", cwd=root)

    assert lfs_server.uploads()
    assert (root / ".git" / "mgit" / "remotes" / remote_file_name(lfs_server.repo_url())).is_file()
    refs = run_git("for-each-ref", "--format=%(refname)", cwd=root).stdout.split()
    paths = [p for p in (root / ".git").rglob("*")]
    assert not [name for name in refs + [str(p) for p in paths] if secret in name]
    written = [p for p in (root / ".git" / "mgit").rglob("*") if p.is_file()]
    assert written and not [p for p in written if secret.encode() in p.read_bytes()]


@pytest.mark.parametrize("kind", ["lfs", "s3"])
def test_a_corrupt_object_is_one_line_and_writes_nothing(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = init_mgit_repo(tmp_path / "src")
    data = model_bytes(11, n=2000)
    commit_versions(root, [data])
    if kind == "lfs":
        server = request.getfixturevalue("lfs_server")
        url, where = server.repo_url(), "Git LFS at"
        run_git("config", "--global", "mgit.store", "lfs", cwd=tmp_path)
    else:
        bucket = request.getfixturevalue("s3_bucket")
        url, where = init_bare_remote(tmp_path / "remote.git").url, f"s3://{bucket.name}/"
        run_git("config", "--global", "mgit.store", bucket.url(), cwd=tmp_path)
    run_git("remote", "add", "origin", url, cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    corrupt_largest(kind, request, tmp_path)
    proc = run_git("clone", url, str(tmp_path / "c"), cwd=tmp_path, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("git-mgit:")]
    assert len(lines) == 1, proc.stderr
    assert MODEL in lines[0] and where in lines[0] and "corrupt" in lines[0]
    assert not (tmp_path / "c" / MODEL).exists()


def corrupt_largest(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Flip a byte of the largest stored object, in place on the server."""
    if kind == "lfs":
        storage = request.getfixturevalue("lfs_server").storage
        path = max((p for p in storage.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        path.chmod(0o644)
        path.write_bytes(bytes(raw))
        return
    import obstore
    from obstore.store import S3Store

    bucket = request.getfixturevalue("s3_bucket")
    store = S3Store(
        bucket.name,
        endpoint=bucket.endpoint,
        region="us-east-1",
        client_options={"allow_http": True},
    )
    listing = obstore.list(store, prefix="models/").collect()
    largest = max(listing, key=lambda m: m["size"])
    raw = bytearray(bytes(obstore.get(store, largest["path"]).bytes()))
    raw[len(raw) // 2] ^= 0xFF
    obstore.put(store, largest["path"], bytes(raw))


def test_the_quick_start_on_a_repository_the_hub_made_with_git_lfs(
    lfs_server, tmp_path: Path
) -> None:
    """README's quick start where every Hub model repository starts: git-lfs's history
    (*.safetensors in git-lfs's attributes, v1 a pointer). A clone, `git mgit install`,
    `git mgit track "*.safetensors"`, v2 committed and pushed to a remote with the Hub's
    rules; a fresh clone has v2 byte for byte, and v1 still checks out through git-lfs."""
    if shutil.which("git-lfs") is None:
        pytest.fail("git-lfs is not installed: scripts/test installs it (apt-get install git-lfs)")
    run_git("lfs", "install", "--skip-repo", cwd=tmp_path)  # as a user of the Hub has it
    url = lfs_server.repo_url()
    enforce_hub_rules(lfs_server.git_root / "org" / "repo.git")
    hub = tmp_path / "hub"
    run_git("init", "-q", str(hub), cwd=tmp_path)
    (hub / ".gitattributes").write_text(
        "*.bin filter=lfs diff=lfs merge=lfs -text\n"
        "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
    )
    v1, v2 = series(2, size=6000)  # 1.6 MB each: the Hub's rules refuse them outside LFS
    (hub / MODEL).write_bytes(v1)
    run_git("add", ".gitattributes", MODEL, cwd=hub)
    run_git("commit", "-q", "-m", "v1, by git-lfs", cwd=hub)
    run_git("remote", "add", "origin", url, cwd=hub)
    run_git("push", "-q", "origin", "main", cwd=hub)

    work = clone(url, tmp_path / "work")
    assert (work / MODEL).read_bytes() == v1  # git-lfs's smudge
    mgit("install", cwd=work)
    assert "in place of git-lfs" in mgit("track", "*.safetensors", cwd=work).stdout
    (work / MODEL).write_bytes(v2)
    run_git("add", ".gitattributes", MODEL, cwd=work)
    run_git("commit", "-q", "-m", "v2", cwd=work)
    # not on huggingface.co, whose host says it: the repository's own use of git-lfs says it
    assert "Git LFS at" in mgit("store", cwd=work).stdout
    run_git("push", "-q", "origin", "main", cwd=work)

    fresh = clone(url, tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == v2 and status_porcelain(fresh) == ""
    stored = run_git("cat-file", "-p", f"HEAD:{MODEL}", cwd=fresh).stdout
    assert stored.startswith("mgit-manifest")
    run_git("checkout", "-q", "HEAD~1", cwd=fresh)
    assert (fresh / MODEL).read_bytes() == v1 and status_porcelain(fresh) == ""
    assert run_git("cat-file", "-p", f"HEAD:{MODEL}", cwd=fresh).stdout.startswith(
        "version https://git-lfs.github.com/spec/v1"
    )


def test_a_guessed_lfs_store_that_is_not_there_says_how_to_keep_version_refs(
    http_remote, tmp_path: Path
) -> None:
    """A repository that tracks files with git-lfs, pushed to a plain git server over HTTP:
    `mgit.store auto` takes git-lfs's use as a sign of an endpoint, the server has none,
    and the push stops with one line that says why that store was chosen and the setting
    that keeps the tensors in git; with it, the push and a fresh clone work."""
    root = init_mgit_repo(tmp_path / "src")
    attributes = root / ".gitattributes"
    attributes.write_text(attributes.read_text() + "*.bin filter=lfs diff=lfs merge=lfs -text\n")
    versions = series(2)
    commits = commit_versions(root, versions)
    run_git("remote", "add", "origin", http_remote.url, cwd=root)
    refused = run_git("push", "-q", "origin", "main", cwd=root, check=False)
    assert refused.returncode != 0
    said = [line for line in refused.stderr.splitlines() if line.startswith("git-mgit:")]
    assert len(said) == 1 and "HTTP 404" in said[0], refused.stderr
    assert "`git config remote.origin.mgitStore refs`" in said[0]
    assert "tracks files with git-lfs" in said[0]
    assert run_git("ls-remote", http_remote.url, cwd=root).stdout == ""  # nothing sent
    run_git("config", "remote.origin.mgitStore", "refs", cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    fresh = clone(http_remote.url, tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == versions[-1]
    assert run_git("rev-parse", "HEAD", cwd=fresh).stdout.strip() == commits[-1]


def test_a_remote_holding_version_refs_keeps_them_when_the_repository_takes_up_git_lfs(
    http_remote, tmp_path: Path
) -> None:
    """`auto` keeps a remote's store: one that holds version refs already stays the refs
    store after the repository starts tracking other files with git-lfs (a sign of an LFS
    endpoint only for a remote git-mgit has not pushed to yet)."""
    root = init_mgit_repo(tmp_path / "src")
    run_git("remote", "add", "origin", http_remote.url, cwd=root)
    versions = series(2)
    commit_versions(root, versions[:1])
    run_git("push", "-q", "origin", "main", cwd=root)
    attributes = root / ".gitattributes"
    attributes.write_text(attributes.read_text() + "*.bin filter=lfs diff=lfs merge=lfs -text\n")
    commit_versions(root, versions[1:])
    assert "holds version refs already" in mgit("store", cwd=root).stdout
    run_git("push", "-q", "origin", "main", cwd=root)  # no LFS endpoint asked: it has none
    refs = run_git("ls-remote", "origin", "refs/mgit/v/*", cwd=root).stdout.splitlines()
    assert len(refs) == 2
    fresh = clone(http_remote.url, tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == versions[-1]


def test_git_lfs_and_git_mgit_side_by_side(lfs_server, tmp_path: Path) -> None:
    """git-lfs tracks *.bin, git-mgit *.safetensors, in one repository on one LFS server:
    both filters and both pre-push hooks work, and a fresh clone has both files."""
    if shutil.which("git-lfs") is None:
        pytest.fail("git-lfs is not installed: scripts/test installs it (apt-get install git-lfs)")
    run_git("lfs", "install", "--skip-repo", cwd=tmp_path)  # both filters, for every clone
    root = tmp_path / "src"
    root.mkdir()
    run_git("init", "-q", cwd=root)
    run_git("lfs", "install", "--local", cwd=root)
    init_mgit_repo(root)  # git mgit install + track, after git-lfs: its hooks are chained
    run_git("lfs", "track", "*.bin", cwd=root)  # mgit.store auto: git-lfs's remote has LFS
    blob = os.urandom(300_000)
    (root / "data.bin").write_bytes(blob)
    versions = series(2)
    run_git("add", ".gitattributes", "data.bin", cwd=root)
    commit_versions(root, versions)
    pre_push = (root / ".git" / "hooks" / "pre-push").read_text()
    assert "mgit" in pre_push
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    assert len(lfs_server.uploads()) >= 2  # git-lfs's object and git-mgit's
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh")
    assert (fresh / "data.bin").read_bytes() == blob
    assert (fresh / MODEL).read_bytes() == versions[-1]
    assert status_porcelain(fresh) == ""
    run_git("checkout", "-q", "HEAD~1", cwd=fresh)
    assert (fresh / MODEL).read_bytes() == versions[0]


@pytest.mark.parametrize("kind", ["lfs", "s3"])
def test_push_and_clone_through_faults_complete_byte_exact(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A proxy in front of the store answers 500 and 429 and drops connections mid-object,
    both ways: the push and a fresh clone still complete, byte for byte."""
    from tests.servers.faults import FaultProxy

    versions = series(3, size=4000)  # 1 MB tensors: objects long enough to cut in the middle
    run_git("config", "--global", "lfs.transfer.maxretrydelay", "1", cwd=tmp_path)
    if kind == "lfs":
        server = request.getfixturevalue("lfs_server")
        url, upstream = server.repo_url(), server.url
    else:
        bucket = request.getfixturevalue("s3_bucket")
        url, upstream = init_bare_remote(tmp_path / "remote.git").url, bucket.endpoint
    with FaultProxy(upstream) as proxy:
        if kind == "lfs":  # the LFS API through the proxy; git itself goes straight
            server.store_credentials(tmp_path / "creds", also=(proxy.url,))
            run_git(
                "config", "--global", "lfs.url", f"{proxy.url}/org/repo.git/info/lfs", cwd=tmp_path
            )
            run_git("config", "--global", "mgit.store", "lfs", cwd=tmp_path)
            put, get = r"/objects/storage/", r"/objects/storage/"
        else:
            run_git(
                "config", "--global", "mgit.store", bucket.url(endpoint=proxy.url), cwd=tmp_path
            )
            put, get = r"/models/", r"/models/"
        root = init_mgit_repo(tmp_path / "src")
        commit_versions(root, versions)
        run_git("remote", "add", "origin", url, cwd=root)
        proxy.fail("PUT", put, status=500)
        proxy.fail("PUT", put, status=429, headers={"Retry-After": "1"})
        proxy.drop_request("PUT", put, after=300_000)
        run_git("push", "-q", "origin", "main", cwd=root)
        assert proxy.armed == 0
        proxy.fail("GET", get, status=503)
        proxy.fail("GET", get, status=429, headers={"Retry-After": "1"})
        proxy.drop_response("GET", get, after=300_000)
        fresh = clone(url, tmp_path / "fresh")
        assert proxy.armed == 0
        assert (fresh / MODEL).read_bytes() == versions[-1]
        run_git("checkout", "-q", "HEAD~2", cwd=fresh)
        assert (fresh / MODEL).read_bytes() == versions[0]


def test_a_push_and_a_clone_cut_off_midway_resume_without_sending_anything_twice(
    lfs_server, tmp_path: Path
) -> None:
    """The store fails for good after a few objects (retries run out): the push stops with
    no version ref published, the clone's checkout with no file written. Run again, each
    completes, and no object crosses the wire twice, either way."""
    from tests.servers.faults import FaultProxy

    versions = series(4)
    for key, value in (
        ("mgit.chunkSize", "8192"),
        ("mgit.store", "lfs"),
        ("lfs.concurrenttransfers", "1"),
        ("lfs.transfer.maxretries", "1"),  # git-lfs's least: one retry, at once
        ("lfs.transfer.maxretrydelay", "0"),
    ):
        run_git("config", "--global", key, value, cwd=tmp_path)
    url = lfs_server.repo_url()
    storage = r"/objects/storage/"
    with FaultProxy(lfs_server.url) as proxy:
        lfs_server.store_credentials(tmp_path / "creds", also=(proxy.url,))
        run_git("config", "--global", "lfs.url", f"{proxy.url}/org/repo.git/info/lfs", cwd=tmp_path)
        root = init_mgit_repo(tmp_path / "src")
        commits = commit_versions(root, versions)
        run_git("remote", "add", "origin", url, cwd=root)
        proxy.fail("PUT", storage, status=500, times=10_000, skip=3)
        cut = run_git("push", "origin", "main", cwd=root, check=False)
        assert cut.returncode != 0 and "git-mgit:" in cut.stderr
        assert len(lfs_server.uploads()) == 3
        assert not run_git("ls-remote", url, cwd=root).stdout  # no ref names a missing object
        proxy.clear()
        run_git("push", "-q", "origin", "main", cwd=root)
        uploads = lfs_server.uploads()
        assert len(uploads) == len(set(uploads)) > 3  # each object sent once

        proxy.fail("GET", storage, status=500, times=10_000, skip=2)
        work = tmp_path / "clone"
        failed = run_git("clone", url, str(work), cwd=tmp_path, check=False)
        assert failed.returncode != 0 and "could not be fetched" in failed.stderr
        assert not (work / MODEL).exists()
        proxy.clear()
        run_git("checkout", "-q", "-f", "HEAD", cwd=work)
        assert (work / MODEL).read_bytes() == versions[-1]
        checks_out_every_version(work, commits, versions)
        gets = [
            r.target.split("?")[0]
            for r in proxy.requests
            if r.method == "GET" and storage in r.target and r.status == 200
        ]
        assert len(gets) == len(set(gets))  # what was verified before the cut was kept


def _uploads_begun(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each object of a push asked about in a batch request of its own; returns the
    uploads the push begins."""
    from git_mgit.transfer.stores import upload
    from git_mgit.transfer.stores.lfs import store

    monkeypatch.setattr(store, "_CHUNK_BYTES", 1)
    begun: list[upload.Upload] = []
    init = upload.Upload.__init__

    def recorded(self: upload.Upload, *args: object) -> None:
        init(self, *args)
        begun.append(self)

    monkeypatch.setattr(upload.Upload, "__init__", recorded)
    return begun


def _hold_write(
    monkeypatch: pytest.MonkeyPatch, at: int, until: Callable[[], bool], what: str
) -> collections.Counter[str]:
    """The push's `at`-th new object is written only once `until()` holds (60 s at most, then
    the test fails with `what`); returns counts of the objects it began to write, in all
    and once `until()` held."""
    from git_mgit.transfer import publish

    add = publish._Objects._add
    counts: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def held(self: publish._Objects, enc: object) -> tuple[str, int]:
        with lock:
            counts["written"] += 1
            now = counts["written"]
        if now == at:
            deadline = time.monotonic() + 60
            while not until():
                if time.monotonic() > deadline:
                    pytest.fail(what)
                time.sleep(0.02)
        elif until():
            with lock:
                counts["after"] += 1
        return add(self, enc)

    monkeypatch.setattr(publish._Objects, "_add", held)
    return counts


@pytest.mark.parametrize("hold", [None, 1], ids=["default", "one-object-at-a-time"])
def test_objects_are_uploaded_from_memory_as_they_are_encoded(
    lfs_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold: int | None
) -> None:
    """The push's third new object waits until the server holds one: objects go from
    memory as they are encoded, and nothing the push encodes is written here (no pack, no
    anchor: the objects `git add` wrote keep every chunk). Held bytes are bounded: with
    room for one object, each waits for the one before to be sent, and the push still
    completes. Each object is sent once; a fresh clone is byte-exact at every version."""
    from git_mgit.transfer.push import push_versions
    from git_mgit.transfer.stores import objectbytes

    versions = series(4, size=4000)
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions)
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("config", "mgit.maxChainDepth", "0", cwd=root)  # versions published whole, encoded
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    if hold is not None:
        monkeypatch.setattr(objectbytes, "HOLD", hold)
    _uploads_begun(monkeypatch)
    packs = sorted((root / ".git" / "objects" / "pack").iterdir())
    anchored = run_git("for-each-ref", "refs/mgit/objects/", cwd=root).stdout
    written = _hold_write(
        monkeypatch, 3, lambda: bool(lfs_server.uploads()), "nothing was uploaded while encoding"
    )
    report = push_versions(find_repo(root), "origin", [commits[-1]], [], {"refs/heads/main"})
    uploads = lfs_server.uploads()
    assert len(uploads) == len(set(uploads)) == report.uploaded >= written["written"] > 3
    new = set((root / ".git" / "objects" / "pack").iterdir()) - set(packs)
    assert sum(p.stat().st_size for p in new) < 64 * 1024  # pointers and commits only
    assert run_git("for-each-ref", "refs/mgit/objects/", cwd=root).stdout == anchored
    run_git("push", "-q", "origin", "main", cwd=root)
    assert len(lfs_server.uploads()) == len(uploads)  # the hook found it all published
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh")
    checks_out_every_version(fresh, commits, versions)
    checks_out_every_version(root, commits, versions)  # and the clone that pushed, too


def test_a_push_sends_what_git_add_hashed_without_reading_it_first(
    lfs_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git add` hashes each object it writes with SHA-256, as git-lfs does: the push of a
    history hashes only what it encodes (the tip), and every object it sends has the name
    the server checks it by; a fresh clone is byte-exact at every version."""
    from git_mgit.transfer.push import push_versions
    from git_mgit.transfer.stores import blobs

    versions = series(4, size=4000)
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions)
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    hashed: list[int] = []
    of = blobs.Pointer.of.__func__  # type: ignore[attr-defined]

    def counted(cls: type, data: object) -> blobs.Pointer:
        hashed.append(len(data))  # type: ignore[arg-type]
        return of(cls, data)

    monkeypatch.setattr(blobs.Pointer, "of", classmethod(counted))
    report = push_versions(find_repo(root), "origin", [commits[-1]], [], {"refs/heads/main"})
    version = run_git("rev-parse", f"HEAD:{MODEL}", cwd=root).stdout.strip()
    (tip,) = [w for w in report.published if w.ref.version == version]
    assert report.uploaded > len(hashed) > 0
    assert len(hashed) <= len(tip.objects)  # the tip's objects, which the push encoded
    run_git("push", "-q", "origin", "main", cwd=root)
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh")
    checks_out_every_version(fresh, commits, versions)


def test_a_new_tip_on_a_blob_store_leaves_the_old_one_whole(lfs_server, tmp_path: Path) -> None:
    """A Git LFS store keeps every object it was sent: re-publishing the previous tip as a
    delta of the new one would add bytes, not replace any, so the old tip's ref stays
    whole and the push uploads the new tip's objects only."""
    versions = series(3, size=4000)
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions[:2])
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    old = run_git("rev-parse", f"HEAD:{MODEL}", cwd=root).stdout.strip()
    before = len(lfs_server.uploads())
    commits += commit_versions(root, versions[2:])
    run_git("push", "-q", "origin", "main", cwd=root)
    names = run_git("ls-remote", lfs_server.repo_url(), "refs/mgit/v/*", cwd=root).stdout
    names = {r.removeprefix("refs/mgit/v/") for r in names.split()[1::2]}
    new = run_git("rev-parse", f"HEAD:{MODEL}", cwd=root).stdout.strip()
    assert old in names and not any(n.startswith(old + ".") for n in names) and new in names
    own = len(chunks_of(root, "HEAD") - chunks_of(root, "HEAD~1"))
    assert 0 < len(lfs_server.uploads()) - before <= own
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh")
    checks_out_every_version(fresh, commits, versions)


def test_pointer_refs_file_pointers_flat_and_fanned_out_ones_still_resolve(
    lfs_server, tmp_path: Path
) -> None:
    """A pointer ref's tree files every pointer in its root: its push sends a blob a chunk,
    one tree and the commit (three objects a chunk, fanned out). A ref pushed before,
    filing them as ab/cd/<hash>.lfs, still checks out in a fresh clone."""
    from git_mgit.store import anchors
    from git_mgit.store.packwriter import PackWriter

    versions = series(2, size=4000)
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions)
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    bare = lfs_server.git_root / "org/repo.git"
    listed = run_git("for-each-ref", "--format=%(refname) %(objectname)", "refs/mgit/v/", cwd=bare)
    refs = dict(line.split() for line in listed.stdout.splitlines())
    assert refs
    for commit in refs.values():
        top = run_git("ls-tree", commit, cwd=bare).stdout.splitlines()
        assert top and all(line.split()[1] == "blob" and line.endswith(".lfs") for line in top)
    # each ref as an earlier git-mgit pushed it: the same pointers, fanned out
    with PackWriter(bare / "objects") as pack:
        for name, commit in refs.items():
            message = run_git("log", "-1", "--format=%B", commit, cwd=bare).stdout.strip() + "\n"
            files = [
                line.split() for line in run_git("ls-tree", commit, cwd=bare).stdout.splitlines()
            ]
            entries = sorted(
                (bytes.fromhex(f[3].removesuffix(".lfs")), bytes.fromhex(f[2])) for f in files
            )
            refs[name] = anchors.write_anchor(
                pack, entries, timestamp=0, message=message, suffix=".lfs"
            )
        pack.finish()
    for name, commit in refs.items():
        run_git("update-ref", name, commit, cwd=bare)
        nested = run_git("ls-tree", "-r", "--name-only", commit, cwd=bare).stdout.split()
        assert nested and all(n.count("/") == 2 and n.endswith(".lfs") for n in nested)
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh")
    checks_out_every_version(fresh, commits, versions)


def test_a_pointer_tree_entry_of_a_later_format_asks_for_an_upgrade(tmp_path: Path) -> None:
    """A version ref filing a chunk in a way this git-mgit does not know (a later one's
    format) stops with one line naming the ref and the entry, and saying to upgrade: read
    as absent, the chunk would surface later as "no remote has them"."""
    from git_mgit.errors import MgitError
    from git_mgit.transfer.stores import pointer
    from git_mgit.transfer.stores.blobs import Pointer
    from git_mgit.transfer.stores.pointers import pointed
    from git_mgit.transfer.versions import VersionRef

    root = init_mgit_repo(tmp_path / "src")

    def blob(text: str) -> str:
        return run_git("hash-object", "-w", "--stdin", cwd=root, input=text).stdout.strip()

    def ref(listing: str) -> VersionRef:
        tree = run_git("mktree", cwd=root, input=listing).stdout.strip()
        message = "git-mgit version " + "a" * 40 + "\nstore lfs\n"
        return VersionRef(
            "a" * 40, (), run_git("commit-tree", tree, "-m", message, cwd=root).stdout.strip()
        )

    known = f"100644 blob {blob(pointer.render(Pointer('b' * 64, 3)).decode())}\t{'a' * 64}.lfs\n"
    assert [dict(f) for f in pointed(find_repo(root), [ref(known)]).values()] == [
        {bytes.fromhex("a" * 64): Pointer("b" * 64, 3)}
    ]
    later = "c" * 64 + ".zst"
    mixed = ref(known + f"100644 blob {blob('x')}\t{later}\n")
    with pytest.raises(MgitError, match=rf"version ref {mixed.name} files '{later}'.*upgrade"):
        pointed(find_repo(root), [mixed])
    # a pointer of another spec, or not a pointer at all: neither reads as an absent chunk
    v2 = pointer.render(Pointer("b" * 64, 3)).decode().replace("spec/v1", "spec/v2")
    spec = ref(f"100644 blob {blob(v2)}\t{'d' * 64}.lfs\n")
    with pytest.raises(MgitError, match=rf"{spec.name} files a pointer of .*spec/v2.*upgrade"):
        pointed(find_repo(root), [spec])
    damaged = ref(f"100644 blob {blob('oid sha256:0')}\t{'e' * 64}.lfs\n")
    with pytest.raises(MgitError, match=rf"{damaged.name}: the pointer .* is damaged.*git fsck"):
        pointed(find_repo(root), [damaged])
    deeper = run_git("mktree", cwd=root, input=known).stdout.strip()
    nested = ref(f"040000 tree {deeper}\tab\n")  # ab/ holds files, not cd/ folders: fine
    assert pointed(find_repo(root), [nested])
    for _ in range(2):  # folders under ab/cd/: a layout no git-mgit wrote yet
        deeper = run_git("mktree", cwd=root, input=f"040000 tree {deeper}\tef\n").stdout.strip()
    too_deep = ref(f"040000 tree {deeper}\tab\n")
    with pytest.raises(MgitError, match=rf"{too_deep.name} files folders below ab/cd/.*upgrade"):
        pointed(find_repo(root), [too_deep])


def test_a_damaged_pointer_tree_is_one_line_naming_the_ref(tmp_path: Path) -> None:
    """git fetches without checking objects (transfer.fsckObjects is off): a pointer ref whose
    tree a remote sent damaged stops with one line naming the ref, not a traceback."""
    from git_mgit.errors import MgitError
    from git_mgit.transfer.stores.pointers import pointed
    from git_mgit.transfer.versions import VersionRef

    root = init_mgit_repo(tmp_path / "src")
    bad = run_git("hash-object", "-t", "tree", "--literally", "-w", "--stdin", cwd=root, input="no")
    tree = bad.stdout.strip()
    message = "git-mgit version " + "a" * 40 + "\nstore lfs\n"
    commit = run_git("commit-tree", tree, "-m", message, cwd=root).stdout.strip()
    ref = VersionRef("a" * 40, (), commit)
    with pytest.raises(MgitError, match=f"version ref {ref.name}: its tree {tree} is damaged"):
        pointed(find_repo(root), [ref])


def test_small_objects_travel_in_the_version_ref_as_text(lfs_server, tmp_path: Path) -> None:
    """mgit.inlineSize (16k unless set; the suite sets 0): a bias, a small weight, a step
    counter are filed in the pointer ref as base64 text, which the Hub's rules accept, and
    the LFS store receives the large objects only. A fresh clone checks out every version,
    the older ones on demand; after a prune, a checkout brings the small objects back from
    the refs here, with no request; a migration to S3 and back to refs keeps them."""
    from git_mgit.transfer.stores import pointer

    url = lfs_server.repo_url()
    bare = lfs_server.git_root / "org" / "repo.git"
    enforce_hub_rules(bare)
    versions = series(3, size=4000)  # a 1 MB embedding and four small tensors
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions[:2])
    run_git("config", "mgit.inlineSize", "16k", cwd=root)
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("remote", "add", "origin", url, cwd=root)
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    commits += commit_versions(root, versions[2:])  # one more, beside the refs pushed
    run_git("push", "-q", "origin", "main", cwd=root)

    uploaded = lfs_server.uploads()
    assert uploaded and all(lfs_server.stored(o).stat().st_size > 16 * 1024 for o in uploaded)
    texts = [
        line.split()[2]
        for ref in run_git(
            "for-each-ref", "--format=%(objectname)", "refs/mgit/v/", cwd=bare
        ).stdout.split()
        for line in run_git("ls-tree", ref, cwd=bare).stdout.splitlines()
        if line.endswith(pointer.INLINE_SUFFIX)
    ]
    assert len(texts) >= 4 * len(versions)  # every small tensor of every version
    for oid in texts:
        text = run_git("cat-file", "blob", oid, cwd=bare, text=False).stdout
        data = pointer.parse_inline(text)
        assert b"\0" not in text and data is not None and len(data) <= 16 * 1024

    fresh = clone(url, tmp_path / "fresh")
    checks_out_every_version(fresh, commits, versions)
    mgit("prune", "--keep", "now", cwd=fresh)
    before = len(lfs_server.requests)
    run_git("checkout", "-q", commits[0], cwd=fresh)
    assert (fresh / MODEL).read_bytes() == versions[0]
    gets = [h for h in lfs_server.requests[before:] if h.method == "GET" and h.lfs]
    assert 0 < len(gets) <= 2  # the embedding (and a delta base), not the small objects
    assert ": 0 problems" in mgit("fsck", cwd=fresh).stdout

    (bare / "hooks" / "pre-receive").unlink()  # version refs hold binary objects
    mgit("store", "migrate", "--to", "refs", cwd=root)
    again = clone(bare.as_uri(), tmp_path / "after")
    checks_out_every_version(again, commits, versions)


def test_small_objects_travel_in_the_version_ref_to_a_bucket_too(s3_bucket, tmp_path: Path) -> None:
    """The same on S3: the bucket holds the large objects only, a fresh clone is exact."""
    import obstore
    import obstore.store

    versions = series(2, size=4000)
    remote = init_bare_remote(tmp_path / "remote.git")
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions)
    run_git("config", "mgit.inlineSize", "16k", cwd=root)
    run_git("config", "mgit.store", s3_bucket.url(), cwd=root)
    run_git("remote", "add", "origin", remote.url, cwd=root)
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    raw = obstore.store.S3Store(
        s3_bucket.name,
        endpoint=s3_bucket.endpoint,
        region="us-east-1",
        client_options={"allow_http": True},
    )
    sizes = [m["size"] for m in obstore.list(raw).collect()]
    assert sizes and min(sizes) > 16 * 1024
    fresh = clone(remote.url, tmp_path / "fresh")
    checks_out_every_version(fresh, commits, versions)


def small_steps(n: int) -> list[bytes]:
    """n versions of a 1 MB model, each moving four weights of every tensor a little."""
    from safetensors.numpy import save

    versions = [model_bytes(7, n=4000)]
    for _ in range(n - 1):
        step = {k: v.copy() for k, v in tensors_of(versions[-1]).items()}
        for t in step.values():
            if t.dtype.kind == "f":
                t.flat[:4] += t.dtype.type(1e-3)
        versions.append(save(step))
    return versions


def test_a_small_step_on_a_blob_store_goes_out_as_the_delta_git_add_stored(
    lfs_server, tmp_path: Path
) -> None:
    """The store keeps the previous tip whole anyway: a new tip that `git add` stored as a
    small delta of it goes out as that delta (the store and a pull grow by it, not by another
    whole version), and a fresh clone fetches both, under 90% of the file; the tip after
    it finds no whole base on the remote and goes out whole."""
    versions = small_steps(3)
    root = init_mgit_repo(tmp_path / "src")
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    commits = commit_versions(root, versions[:1])
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    other = clone(lfs_server.repo_url(), tmp_path / "other")

    def names() -> set[str]:
        listing = run_git("ls-remote", lfs_server.repo_url(), "refs/mgit/v/*", cwd=root).stdout
        return {r.removeprefix("refs/mgit/v/") for r in listing.split()[1::2]}

    def storage_gets() -> list[str]:
        hits = lfs_server.requests
        return [h.path for h in hits if h.method == "GET" and "/objects/storage/" in h.path]

    before = len(lfs_server.uploads())
    commits += commit_versions(root, versions[1:2])
    run_git("push", "-q", "origin", "main", cwd=root)
    old, new = (run_git("rev-parse", f"{c}:{MODEL}", cwd=root).stdout.strip() for c in commits)
    assert f"{new}.{old}" in names() and new not in names()  # a delta of the whole old tip
    sent = lfs_server.uploads()[before:]
    assert sent and sum(lfs_server.stored(o).stat().st_size for o in sent) < len(versions[1]) / 10
    gets = len(storage_gets())
    run_git("pull", "-q", cwd=other)
    assert (other / MODEL).read_bytes() == versions[1] and status_porcelain(other) == ""
    assert sorted(p.rsplit("/", 1)[1] for p in storage_gets()[gets:]) == sorted(sent)
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh")  # the delta, then its base
    assert (fresh / MODEL).read_bytes() == versions[1] and status_porcelain(fresh) == ""

    commits += commit_versions(root, versions[2:])
    run_git("push", "-q", "origin", "main", cwd=root)
    newest = run_git("rev-parse", f"HEAD:{MODEL}", cwd=root).stdout.strip()
    assert newest in names()  # whole: its base is a delta on the remote
    run_git("tag", "v1", commits[1], cwd=root)
    run_git("push", "-q", "origin", "v1", cwd=root)  # an old commit at a new tip
    assert {new, f"{new}.{old}"} <= names()  # a whole ref beside the delta, as on every store
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh2")
    checks_out_every_version(fresh, commits, versions)
    for work in (fresh, root):  # the pusher's clone too: the remote holds it all
        held = local_objects(work)
        mgit("prune", "--keep", "now", cwd=work)
        run_git("gc", "-q", "--prune=now", cwd=work)
        assert local_objects(work) < held
        checks_out_every_version(work, commits, versions)  # fetched again


def test_a_small_step_goes_out_as_its_delta_to_a_bucket_too(s3_bucket, tmp_path: Path) -> None:
    """The same rule on S3, which keeps every object too: the delta ref, and clones that
    pull it or start from it, byte-exact."""
    versions = small_steps(2)
    remote = init_bare_remote(tmp_path / "remote.git")
    root = init_mgit_repo(tmp_path / "src")
    run_git("config", "mgit.store", s3_bucket.url(), cwd=root)
    run_git("remote", "add", "origin", remote.url, cwd=root)
    commits = commit_versions(root, versions[:1])
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    other = clone(remote.url, tmp_path / "other")
    commits += commit_versions(root, versions[1:])
    run_git("push", "-q", "origin", "main", cwd=root)
    old, new = (run_git("rev-parse", f"{c}:{MODEL}", cwd=root).stdout.strip() for c in commits)
    listing = run_git("ls-remote", remote.url, "refs/mgit/v/*", cwd=root).stdout
    assert {r.removeprefix("refs/mgit/v/") for r in listing.split()[1::2]} == {old, f"{new}.{old}"}
    run_git("pull", "-q", cwd=other)
    assert (other / MODEL).read_bytes() == versions[1] and status_porcelain(other) == ""
    fresh = clone(remote.url, tmp_path / "fresh")
    checks_out_every_version(fresh, commits, versions)


def test_a_checkpoints_frozen_layers_are_neither_encoded_nor_sent_again(
    lfs_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new tip whose frozen layers the remote holds whole (the previous tip, pushed from
    here: this clone keeps them as `git add` stored them, deltas) encodes and sends only
    what changed: the rest is filed under the pointers the remote's ref names."""
    from safetensors.numpy import save

    from git_mgit import codecs
    from git_mgit.transfer.push import push_versions

    first = series(2, size=4000)
    frozen = tensors_of(first[-1])
    frozen["embed.weight"] = frozen["embed.weight"].copy()
    frozen["embed.weight"][0, :8] += np.float32(1e-3)  # a few weights: stored as a delta
    versions = [*first, save(frozen)]
    root = init_mgit_repo(tmp_path / "src")
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    commits = commit_versions(root, versions[:2])
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    commits += commit_versions(root, versions[2:])
    encoded: list[bytes] = []
    encode = codecs.encode

    def counted(raw: object, dtype: str, h: bytes, *args: object, **kw: object) -> object:
        encoded.append(h)
        return encode(raw, dtype, h, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(codecs, "encode", counted)
    before = len(lfs_server.uploads())
    push_versions(find_repo(root), "origin", [commits[-1]], [commits[-2]], {"refs/heads/main"})
    changed = chunks_of(root, "HEAD") - chunks_of(root, "HEAD~1")
    assert changed and not set(encoded) - changed  # none of the frozen ones
    assert len(lfs_server.uploads()) - before == len(changed)
    run_git("push", "-q", "origin", "main", cwd=root)
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh")
    checks_out_every_version(fresh, commits, versions)


def chunks_of(root: Path, rev: str) -> set[bytes]:
    blob = run_git("cat-file", "blob", f"{rev}:{MODEL}", cwd=root, text=False).stdout
    return {c.content_hash for c in mf.parse(blob).chunks()}


def test_a_push_whose_uploads_fail_stops_writing_and_leaves_nothing_behind(
    lfs_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refuses every upload: the push stops encoding at its next object with the
    store's one-line error; nothing was written here, and no version ref is made here or
    on the remote."""
    from git_mgit.transfer import publish
    from git_mgit.transfer.push import push_versions
    from git_mgit.transfer.stores.blobs import BlobStoreError
    from tests.servers.faults import FaultProxy

    for key, value in (("lfs.transfer.maxretries", "1"), ("lfs.transfer.maxretrydelay", "0")):
        run_git("config", "--global", key, value, cwd=tmp_path)
    root = init_mgit_repo(tmp_path / "src")
    # five versions encoded whole, 2 objects each: more than the at most 6 written before
    # the push stops (the held one, the one before, and 2 per tensor thread after)
    commits = commit_versions(root, series(6, size=4000))
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("config", "mgit.maxChainDepth", "0", cwd=root)  # versions encoded whole
    url = lfs_server.repo_url()
    run_git("remote", "add", "origin", url, cwd=root)
    packs = root / ".git" / "objects" / "pack"
    before = sorted(packs.iterdir())
    with FaultProxy(lfs_server.url) as proxy:
        lfs_server.store_credentials(tmp_path / "creds", also=(proxy.url,))
        run_git("config", "lfs.url", f"{proxy.url}/org/repo.git/info/lfs", cwd=root)
        proxy.fail("PUT", "/objects/storage/", status=500, times=10_000)
        begun = _uploads_begun(monkeypatch)
        written = _hold_write(
            monkeypatch,
            2,
            lambda: bool(begun) and begun[0]._error is not None,
            "the uploads never failed",
        )
        with pytest.raises(BlobStoreError) as failed:
            push_versions(find_repo(root), "origin", [commits[-1]], [], {"refs/heads/main"})
        message = str(failed.value)
        assert "\n" not in message and "Git LFS" in message and "500" in message
        # a tensor's thread stops at its next object; one that took another tensor before
        # the pool was told, at that one's first
        assert written["after"] <= 2 * publish._TENSORS_AT_ONCE
        assert sorted(packs.iterdir()) == before
        assert not run_git("for-each-ref", "refs/mgit/v/", cwd=root).stdout
        assert not lfs_server.uploads()
        assert not run_git("ls-remote", url, cwd=root).stdout
        stopped_at = written["written"]
        proxy.clear()
        report = push_versions(find_repo(root), "origin", [commits[-1]], [], {"refs/heads/main"})
    assert stopped_at < written["written"] - stopped_at <= report.uploaded
    assert report.uploaded == len(set(lfs_server.uploads())) == len(lfs_server.uploads())


def _ended_within(seconds: float, begun: list, run: Callable[[], object]) -> BaseException | None:
    """What `run()` (a push, or part of one) raised, if anything, run on a thread of its own;
    the test fails if it runs `seconds` on (the uploads `begun` are cancelled first, so that
    no thread is left waiting)."""
    outcome: list[BaseException] = []

    def push() -> None:
        try:
            run()
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=push, name="test-push", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for upload in begun:
            upload.cancel()
        thread.join(seconds)
        pytest.fail(f"the push still waited after {seconds} s")
    return outcome[0] if outcome else None


@pytest.mark.parametrize("kind", ["lfs", "s3"])
def test_a_push_whose_uploads_are_refused_while_it_waits_for_room_ends_with_the_stores_error(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The store answers but refuses every upload (read-only credentials, a quota) while the
    push holds all it may (one object) and has nothing else to send: the refused object is
    never let go, and the push used to wait for room forever (its upload thread for the
    next object). It ends at once with the store's one-line refusal, and none of its
    threads is left running."""
    from git_mgit.transfer.push import push_versions
    from git_mgit.transfer.stores import objectbytes
    from git_mgit.transfer.stores.blobs import BlobStoreError
    from tests.servers.faults import FaultProxy

    versions = small_steps(3)  # `git add` stores the steps as deltas
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions[:1])
    if kind == "lfs":
        server = request.getfixturevalue("lfs_server")
        upstream, said = server.url, "HTTP 403"
    else:
        bucket = request.getfixturevalue("s3_bucket")
        upstream, said = bucket.endpoint, "AccessDenied"
    with FaultProxy(upstream) as proxy:
        if kind == "lfs":
            server.store_credentials(tmp_path / "creds", also=(proxy.url,))
            run_git("config", "mgit.store", "lfs", cwd=root)
            run_git("config", "lfs.url", f"{proxy.url}/org/repo.git/info/lfs", cwd=root)
            run_git("remote", "add", "origin", server.repo_url(), cwd=root)
        else:
            run_git("config", "mgit.store", bucket.url(endpoint=proxy.url), cwd=root)
            run_git("remote", "add", "origin", init_bare_remote(tmp_path / "r.git").url, cwd=root)
        run_git("push", "-q", "-u", "origin", "main", cwd=root)  # as `git add` wrote it
        # the steps published whole: encoded, held one object at a time, nothing else to send
        commits += commit_versions(root, versions[1:])
        run_git("config", "mgit.maxChainDepth", "0", cwd=root)
        monkeypatch.setattr(objectbytes, "HOLD", 1)
        begun = _uploads_begun(monkeypatch)
        denied = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        # the first tries answered 500 and retried (a struggling server), so the refusals
        # come once the push handed over all it could, and waits
        proxy.fail("PUT", status=500, times=8)
        pushed = len(proxy.requests)
        proxy.fail("PUT", status=403, times=10_000, body=denied)
        failed = _ended_within(
            60,
            begun,
            lambda: push_versions(
                find_repo(root), "origin", [commits[-1]], [commits[0]], {"refs/heads/main"}
            ),
        )
        puts = [r for r in proxy.requests[pushed:] if r.method == "PUT"]
        assert puts and all(r.fault for r in puts) and puts[-1].status == 403
    assert isinstance(failed, BlobStoreError), repr(failed)
    message = str(failed)
    assert "\n" not in message and said in message
    assert begun and not begun[0]._thread.is_alive()
    left = [t.name for t in threading.enumerate() if t.name.startswith(("mgit-", f"{kind}-"))]
    assert not [n for n in left if "upload" in n or "publish" in n], left


def test_an_object_held_again_once_let_go_takes_no_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same object handed over twice (one chunk encoded on two threads at once, two
    chunks encoded alike), the second time once the store held it: it is not held again,
    so the room stays free for the next object."""
    from git_mgit.transfer.stores import objectbytes

    monkeypatch.setattr(objectbytes, "HOLD", 100)
    read = objectbytes.ObjectBytes(store=None)  # type: ignore[arg-type] - holds, never reads

    def waited() -> BaseException:
        return AssertionError("hold() waited for room")

    first = read.hold([b"x" * 100], waited)
    read.release([first.oid])
    assert read.hold([b"x" * 100], waited) == first
    read.hold([b"y" * 100], waited)


def test_a_push_that_encodes_an_object_again_once_it_was_sent_does_not_wait_for_it(
    s3_bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object the store took, handed over again: the upload takes each object once, so
    nothing would let a second copy go, and held it kept its room until the push ended
    (the push waited for room forever). The next object is held at once, and each object
    goes to the bucket once."""
    from git_mgit.store.chunkstore import ChunkStore
    from git_mgit.transfer.stores import objectbytes
    from git_mgit.transfer.stores.upload import Upload

    size = 1 << 20
    again, after = os.urandom(size), os.urandom(size)
    monkeypatch.setattr(objectbytes, "HOLD", size)  # room for one
    repo = find_repo(init_mgit_repo(tmp_path / "src"))
    upload = Upload(repo, "origin", s3_bucket.url(), ChunkStore(repo))
    try:
        upload.hold([again])
        deadline = time.monotonic() + 30
        while upload.read._held:  # until the bucket holds it, and it was let go
            assert time.monotonic() < deadline, "the object was never sent"
            time.sleep(0.02)
        held = _ended_within(60, [upload], lambda: (upload.hold([again]), upload.hold([after])))
        assert held is None, repr(held)
        upload.hand_over([])
        assert upload.wait().uploaded == 2
    finally:
        upload.cancel()


def _to_lfs(lfs_server, tmp_path: Path) -> tuple[Path, list[str], list[bytes]]:
    """A repository of three 1 MB versions, committed, pushing to the LFS server's store:
    (its root, the commits, the versions)."""
    versions = series(3, size=4000)
    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, versions)
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=root)
    return root, commits, versions


def _at(hits: list, wanted: Callable[[Any], bool]) -> list[int]:
    """Where in the server's request log the requests `wanted` picks are."""
    return [i for i, h in enumerate(hits) if wanted(h)]


def test_the_pointer_refs_push_lists_while_objects_upload_and_sends_after(
    lfs_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version refs' `git push` connects and lists the remote while the objects still
    upload (the push's wait for its uploads is held here until git listed), and sends only
    once the store holds every object: the remote's git receives them after the last
    upload, and the version checks out from a fresh clone."""
    from git_mgit.transfer.push import push_versions
    from git_mgit.transfer.stores import upload

    root, commits, versions = _to_lfs(lfs_server, tmp_path)

    def listings() -> int:
        return sum(h.path.endswith("/info/refs") and h.status == 200 for h in lfs_server.requests)

    hashed, wait = upload.Upload.hashed, upload.Upload.wait
    seen: dict[str, int] = {}

    def hashed_counted(self: upload.Upload) -> None:
        hashed(self)
        seen["before"] = listings()

    def wait_for_listing(self: upload.Upload):
        for _ in range(3000):
            if listings() > seen["before"]:
                break
            time.sleep(0.01)
        seen["during"] = listings()
        return wait(self)

    monkeypatch.setattr(upload.Upload, "hashed", hashed_counted)
    monkeypatch.setattr(upload.Upload, "wait", wait_for_listing)
    report = push_versions(find_repo(root), "origin", [commits[-1]], [], {"refs/heads/main"})
    assert report.uploaded > 1
    assert seen["during"] == seen["before"] + 1, "the refs' push did not list the remote early"
    hits = lfs_server.requests
    uploads = _at(hits, lambda h: "/objects/storage/" in h.path)
    received = _at(hits, lambda h: h.path.endswith("/git-receive-pack"))
    assert uploads and received and max(uploads) < min(received)
    run_git("push", "-q", "origin", "main", cwd=root)
    fresh = clone(lfs_server.repo_url(), tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == versions[-1]


def test_the_pointer_refs_push_lists_while_the_store_is_still_asked(
    lfs_server, tmp_path: Path
) -> None:
    """A push's objects are hashed as they are encoded, so the version refs' push begins
    once they are all written, not once the uploads have taken the last of them: with the
    store's first batch request held a second (429, Retry-After: 1), git has listed the
    remote for the refs' push before that request is answered, and sends the refs after
    the last upload."""
    from git_mgit.transfer.push import push_versions
    from tests.servers.faults import FaultProxy

    root, commits, _ = _to_lfs(lfs_server, tmp_path)
    with FaultProxy(lfs_server.url) as proxy:
        lfs_server.store_credentials(tmp_path / "creds", also=(proxy.url,))
        run_git("config", "lfs.url", f"{proxy.url}/org/repo.git/info/lfs", cwd=root)
        proxy.fail("POST", "/objects/batch", status=429, headers={"Retry-After": "1"})
        report = push_versions(find_repo(root), "origin", [commits[-1]], [], {"refs/heads/main"})
        assert proxy.armed == 0  # the batch request was held
    hits = lfs_server.requests
    asked = _at(hits, lambda h: h.path.endswith("/objects/batch") and h.status == 200)
    listings = _at(hits, lambda h: h.path.endswith("/info/refs") and h.status == 200)
    uploads = _at(hits, lambda h: "/objects/storage/" in h.path and h.method == "PUT")
    received = _at(hits, lambda h: h.path.endswith("/git-receive-pack"))
    assert len(uploads) == report.uploaded > 1
    assert len(listings) == 2 and listings[-1] < asked[0]
    assert max(uploads) < min(received)


def test_a_push_whose_refs_cannot_be_set_here_stops_its_gated_push(
    lfs_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The objects are in the store but the version refs cannot be written here (a locked
    ref): the refs' push, begun and waiting at its gate, ends with the error; the remote gets
    no version ref."""
    from git_mgit.gitcmd import GitError, Repo
    from git_mgit.transfer.push import push_versions

    root = init_mgit_repo(tmp_path / "src")
    commits = commit_versions(root, series(2, size=4000))
    run_git("config", "mgit.store", "lfs", cwd=root)
    url = lfs_server.repo_url()
    run_git("remote", "add", "origin", url, cwd=root)
    git = Repo.git

    def refused(self: Repo, *args: str, **kwargs) -> str:
        if args[:2] == ("update-ref", "--stdin") and b"refs/mgit/v/" in kwargs["input"]:
            raise GitError("git update-ref failed: cannot lock ref", "")
        return git(self, *args, **kwargs)

    monkeypatch.setattr(Repo, "git", refused)
    with pytest.raises(GitError, match="cannot lock ref"):
        push_versions(find_repo(root), "origin", [commits[-1]], [], {"refs/heads/main"})
    assert lfs_server.uploads()  # the gate was begun: the objects had gone up
    hooks = f"core.hooksPath={root / '.git' / 'mgit' / 'gate-hooks'}"
    assert not subprocess.run(["pgrep", "-f", hooks], capture_output=True).stdout
    assert not run_git("ls-remote", url, "refs/mgit/*", cwd=root).stdout


def test_a_push_loads_its_stores_client_while_the_remote_lists(tmp_path: Path) -> None:
    """The client of the store a push will likely use is imported on a thread of its own
    (the push lists the remote's refs meanwhile); a version-refs remote imports none."""
    root = init_mgit_repo(tmp_path / "src")
    run_git("remote", "add", "origin", (tmp_path / "remote.git").as_uri(), cwd=root)
    clients = ("git_mgit.transfer.stores.lfs.store", "obstore.store")
    code = (
        "import sys\n"
        "from git_mgit.gitcmd import find_repo\n"
        "from git_mgit.transfer.stores.registry import Opening\n"
        "Opening(find_repo(), 'origin', 'upload').take('')\n"
        f"print(*[m for m in {clients!r} if m in sys.modules])\n"
    )
    for setting, loaded in (("refs", ""), ("lfs", clients[0]), ("s3://bucket/models", clients[1])):
        run_git("config", "mgit.store", setting, cwd=root)
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == loaded, setting


def test_trace_lines_go_where_git_trace_says_stamped_as_gits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An absolute GIT_TRACE path gets the lines appended, 1 sends them to stderr, 0 or unset
    nothing; each is stamped to the microsecond, as git stamps its own."""
    import re

    from git_mgit.transfer.trace import tracer

    trace = tracer("push")
    monkeypatch.delenv("GIT_TRACE", raising=False)
    trace("silent")
    monkeypatch.setenv("GIT_TRACE", "0")
    trace("silent")
    target = tmp_path / "trace.txt"
    monkeypatch.setenv("GIT_TRACE", str(target))
    trace("one")
    trace("two")
    monkeypatch.setenv("GIT_TRACE", "1")
    trace("three")
    line = r"\d\d:\d\d:\d\d\.\d{6} trace git-mgit push: %s\n"
    assert re.fullmatch(line % "one" + line % "two", target.read_text())
    assert re.fullmatch(line % "three", capsys.readouterr().err)
