"""Transfer follows the checkout: clones, checkouts, pulls and pushes with the real git.

Every test runs over a plain bare repository through file:// and over smart
HTTP served by `git http-backend` on 127.0.0.1, both with git's default
server configuration. A series of model versions is pushed; clones must hold
only what their checkouts need, fetch older versions in one batch, and never
lose a byte.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from git_mgit.gitcmd import find_repo
from git_mgit.modelfile import manifest as mf
from git_mgit.store.lookup import LookupCache
from git_mgit.transfer import guess
from git_mgit.transfer.remotes import recorded_versions
from tests.gitsandbox import (
    GitHttpServer,
    Remote,
    clone,
    commands_run,
    init_bare_remote,
    init_http_remote,
    ls_remote,
    one_batch,
    run_git,
    transfers,
)
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes, status_porcelain, tensors_of

MODEL = "model.safetensors"
VERSIONS = 5


def series(n: int = VERSIONS, seed: int = 1, step: float = 1e-4) -> list[bytes]:
    """Consecutive checkpoints of one model: each a small training step from the last."""
    out = [model_bytes(seed)]
    for i in range(1, n):
        out.append(model_bytes(seed + i, base=tensors_of(out[-1]), step=step))
    return out


def source(
    tmp_path: Path, remote: Remote, versions: list[bytes], each: bool = False
) -> tuple[Path, list[str]]:
    """A repository with one commit per version, pushed to `remote` at the end (its history:
    older versions go as `git add` stored them) or, `each`, after every commit (each push
    re-publishes the tip before as a delta of the new one); the commit ids."""
    # Several chunks per tensor; global, so that clones cut files the same way.
    run_git("config", "--global", "mgit.chunkSize", "8192", cwd=tmp_path)
    root = init_mgit_repo(tmp_path / "src")
    run_git("remote", "add", "origin", remote.url, cwd=root)
    commits = []
    for i, data in enumerate(versions):
        (root / MODEL).write_bytes(data)
        run_git("add", MODEL, cwd=root)
        run_git("commit", "-q", "-m", f"v{i}", cwd=root)
        commits.append(run_git("rev-parse", "HEAD", cwd=root).stdout.strip())
        if each and i < len(versions) - 1:
            run_git("push", "-q", "-u", "origin", "main", cwd=root)
    blob = run_git("rev-parse", f"HEAD:{MODEL}", cwd=root).stdout.strip()
    run_git("notes", "--ref=mgit", "add", "-m", '{"name":"tip"}', blob, cwd=root)
    run_git("push", "-q", "-u", "origin", "main", cwd=root)
    return root, commits


def test_a_guess_no_fetch_took_still_merges_the_lineage_notes(
    tmp_path: Path, http_remote: Remote
) -> None:
    """A fresh checkout's guess can bring a version's objects before the file asks for
    them: no fetch takes it then, and the notes it brought are merged when the filter
    drops it (a clone then lacked its lineage, now and then, on a fast machine)."""
    source(tmp_path, http_remote, series()[:1])
    clone = tmp_path / "clone"
    run_git("clone", "-q", "--no-checkout", http_remote.url, clone, cwd=tmp_path)
    ahead = guess.Ahead()
    ahead.begin(find_repo(clone))
    ahead.drop()
    brought = run_git("for-each-ref", "--format=%(refname)", "refs/mgit/v/", cwd=clone).stdout
    assert brought  # what the guess brought
    note = run_git("notes", "--ref=mgit", "show", f"HEAD:{MODEL}", cwd=clone).stdout
    assert note.strip() == '{"name":"tip"}'
    # and what the listing found, for commands that stay offline (`git mgit ls-files`)
    recorded = recorded_versions(find_repo(clone), "origin")
    assert recorded is not None and set(brought.split()) <= set(recorded)


def chunks_at(repo: Path, rev: str, path: str = MODEL) -> set[bytes]:
    blob = run_git("cat-file", "blob", f"{rev}:{path}", cwd=repo, text=False).stdout
    return {c.content_hash for c in mf.parse(blob).chunks()}


def local_chunks(repo: Path) -> set[bytes]:
    cache = LookupCache(find_repo(repo))
    try:
        cache.refresh()
        return set(cache.all())
    finally:
        cache.close()


def unkept_packs(repo: Path) -> set[str]:
    """The packs git's own gc may repack: those without a .keep file."""
    folder = repo / ".git" / "objects" / "pack"
    return {p.name for p in folder.glob("*.pack") if not p.with_suffix(".keep").exists()}


def listings(remote: Remote) -> int | None:
    """Ref listings (v2's ls-refs, v0's advertisement) the HTTP server has answered (None over
    file://)."""
    if remote.server is None:
        return None
    return sum(r.lists_refs for r in remote.server.requests)


def filed(repo: Path, prefix: str) -> dict[str, set[str]]:
    """Content hash -> the objects the refs under `prefix` file for it."""
    out: dict[str, set[str]] = {}
    refs = run_git("for-each-ref", "--format=%(objectname)", prefix, cwd=repo).stdout.split()
    for ref in refs:
        for line in run_git("ls-tree", "-r", ref, cwd=repo).stdout.splitlines():
            out.setdefault(line.rsplit("/", 1)[-1], set()).add(line.split()[2])
    return out


def objects_in(git_dir: Path) -> dict[str, int]:
    out = run_git(
        "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objectsize)", cwd=git_dir
    ).stdout
    return {oid: int(size) for oid, size in (line.split() for line in out.splitlines())}


def test_clone_holds_only_the_checkout_and_older_versions_come_in_one_fetch_each(
    tmp_path: Path, store_remote: Remote
) -> None:
    versions = series()
    _src, commits = source(tmp_path, store_remote, versions)
    names = filed(store_remote.path, "refs/mgit/v/")
    pointers_only = all(name.endswith((".lfs", ".b64")) for name in names)  # or objects as text
    assert names and pointers_only == (store_remote.store != "refs")  # bytes in LFS or S3
    inline = run_git("config", "--global", "mgit.inlineSize", cwd=tmp_path, check=False).stdout
    texts = any(name.endswith(".b64") for name in names)  # the suite pins 0; *-inline unset it
    assert texts == (store_remote.store != "refs" and inline.strip() != "0")
    other = tmp_path / "clone"
    # the objects: one batch for HEAD's version, after the clone's own transfer
    clone_args = ("clone", "-q", store_remote.url, str(other))
    assert transfers(tmp_path, store_remote, *clone_args, cwd=tmp_path) == one_batch(store_remote)
    # git-mgit's fetches inside git's clone leave housekeeping to git's own commands
    started = [json.loads(e).get("name") for e in (tmp_path / "trace2.json").open()]
    assert "maintenance" not in started
    assert (other / MODEL).read_bytes() == versions[-1]
    assert status_porcelain(other) == ""
    assert local_chunks(other) == chunks_at(other, "HEAD")  # the tip's objects, nothing else
    cloned = unkept_packs(other)
    assert len(cloned) == 1  # git clone's own: what git-mgit fetched (a guess too) is kept
    note = run_git("notes", "--ref=mgit", "show", f"HEAD:{MODEL}", cwd=other).stdout
    assert note.strip() == '{"name":"tip"}'  # lineage came with the objects' fetch
    fsck = mgit("fsck", cwd=other)
    remote_only = len(set().union(*(chunks_at(other, c) for c in commits)) - local_chunks(other))
    assert f"{remote_only} object(s) are on origin only" in fsck.stdout and remote_only
    status = mgit("status", "--rev", commits[0], cwd=other).stdout
    assert "on origin, not fetched" in status
    fetched = 0
    for commit, data in reversed(list(zip(commits, versions, strict=True))[:-1]):
        before, here = listings(store_remote), local_chunks(other)
        moved = transfers(tmp_path, store_remote, "checkout", "-q", commit, cwd=other)
        # one batch, or none where the chain of a version fetched before brought them all
        assert moved == (one_batch(store_remote) if chunks_at(other, commit) - here else (0, 0))
        fetched += moved != (0, 0)
        assert (other / MODEL).read_bytes() == data
        assert status_porcelain(other) == ""
        if before is not None:  # one ls-remote per batch; the fetch names object ids
            assert listings(store_remote) - before == (moved != (0, 0))
    assert fetched
    assert local_chunks(other) >= set().union(*(chunks_at(other, c) for c in commits))
    assert unkept_packs(other) == cloned  # what the checkouts brought, out of git gc --auto's way
    mgit("fsck", cwd=other)


def test_git_operations_in_a_partial_clone_fetch_what_they_check_out(
    tmp_path: Path, store_remote: Remote
) -> None:
    versions = series(4)
    src, commits = source(tmp_path, store_remote, versions)
    b_first, b_next = model_bytes(60), model_bytes(61, base=tensors_of(model_bytes(60)), step=1e-3)
    run_git("checkout", "-q", "-b", "feat", commits[1], cwd=src)
    for message, data in (("feat: add b", b_first), ("feat: change b", b_next)):
        (src / "b.safetensors").write_bytes(data)
        run_git("add", "b.safetensors", cwd=src)
        run_git("commit", "-q", "-m", message, cwd=src)
    run_git("push", "-q", "origin", "feat", cwd=src)

    work = clone(store_remote.url, tmp_path / "clone")
    run_git("switch", "-q", "feat", cwd=work)  # an older model version, and b
    assert (work / MODEL).read_bytes() == versions[1]
    assert (work / "b.safetensors").read_bytes() == b_next
    run_git("reset", "-q", "--hard", "HEAD~1", cwd=work)
    assert (work / "b.safetensors").read_bytes() == b_first
    run_git("reset", "-q", "--hard", "origin/feat", cwd=work)
    run_git("switch", "-q", "main", cwd=work)
    assert (work / MODEL).read_bytes() == versions[-1] and not (work / "b.safetensors").exists()
    run_git("cherry-pick", "origin/feat~1", cwd=work)
    assert (work / "b.safetensors").read_bytes() == b_first
    run_git("reset", "-q", "--hard", "origin/main", cwd=work)
    run_git("switch", "-q", "-c", "rebased", "origin/feat", cwd=work)
    run_git("rebase", "-q", "main", cwd=work)
    assert (work / MODEL).read_bytes() == versions[-1]
    assert (work / "b.safetensors").read_bytes() == b_next
    run_git("switch", "-q", "main", cwd=work)
    run_git("merge", "-q", "--no-ff", "--no-edit", "rebased", cwd=work)
    assert (work / "b.safetensors").read_bytes() == b_next
    edited = model_bytes(70, base=tensors_of(versions[-1]), step=1e-3)
    (work / MODEL).write_bytes(edited)
    run_git("stash", "-q", cwd=work)
    assert (work / MODEL).read_bytes() == versions[-1]
    run_git("checkout", "-q", commits[0], cwd=work)
    assert (work / MODEL).read_bytes() == versions[0]
    run_git("checkout", "-q", "main", cwd=work)
    run_git("stash", "pop", "-q", cwd=work)
    assert (work / MODEL).read_bytes() == edited
    assert status_porcelain(work) == " M model.safetensors\n"
    mgit("fsck", cwd=work)


def test_prefetch_then_offline_then_prune_then_fetch_again(
    tmp_path: Path, store_remote: Remote
) -> None:
    versions = series()
    # pushed a checkpoint at a time: each older version a delta of the next, so the last
    # two need none of the versions before them
    _src, commits = source(tmp_path, store_remote, versions, each=True)
    work = clone(store_remote.url, tmp_path / "clone")
    url = store_remote.url
    mgit("fetch", "--recent", "2", cwd=work)
    assert local_chunks(work) >= chunks_at(work, "HEAD~1")
    assert not local_chunks(work) >= chunks_at(work, "HEAD~2")
    run_git("remote", "set-url", "origin", str(tmp_path / "offline"), cwd=work)
    run_git("checkout", "-q", "HEAD~1", cwd=work)  # offline: already here
    assert (work / MODEL).read_bytes() == versions[-2]
    run_git("remote", "set-url", "origin", url, cwd=work)
    mgit("fetch", "--all", cwd=work)
    run_git("remote", "set-url", "origin", str(tmp_path / "offline"), cwd=work)
    for commit, data in zip(commits, versions, strict=True):
        run_git("checkout", "-q", commit, cwd=work)
        assert (work / MODEL).read_bytes() == data
    run_git("checkout", "-q", "main", cwd=work)
    run_git("remote", "set-url", "origin", url, cwd=work)
    every = local_chunks(work)
    dry = mgit("prune", "--dry-run", "--keep", "now", cwd=work).stdout
    assert "would drop" in dry and local_chunks(work) == every
    mgit("prune", "--keep", "now", cwd=work)
    assert local_chunks(work) == chunks_at(work, "HEAD")
    run_git("gc", "-q", "--prune=now", cwd=work)
    assert (work / MODEL).read_bytes() == versions[-1] and status_porcelain(work) == ""
    run_git("checkout", "-q", commits[0], cwd=work)  # pruned: fetched again
    assert (work / MODEL).read_bytes() == versions[0]


def test_prune_keeps_what_no_remote_holds(tmp_path: Path, bare_remote: Remote) -> None:
    versions = series(3)
    src, commits = source(tmp_path, bare_remote, versions)
    local = model_bytes(99, base=tensors_of(versions[-1]), step=1e-3)
    (src / MODEL).write_bytes(local)
    run_git("commit", "-q", "-am", "not pushed", cwd=src)
    run_git("checkout", "-q", commits[0], cwd=src)
    mgit("prune", "--keep", "now", cwd=src)
    chunks = local_chunks(src)
    assert chunks >= chunks_at(src, "main") and chunks >= chunks_at(src, "HEAD")
    assert not chunks >= chunks_at(src, commits[1])  # on the remote, not checked out
    run_git("remote", "set-url", "origin", str(tmp_path / "offline"), cwd=src)
    run_git("checkout", "-q", "main", cwd=src)
    assert (src / MODEL).read_bytes() == local


def test_push_from_a_partial_clone_and_gc_on_both_sides(
    tmp_path: Path, store_remote: Remote
) -> None:
    versions = series()
    _src, _commits = source(tmp_path, store_remote, versions)
    work = clone(store_remote.url, tmp_path / "clone")
    newer = [model_bytes(80, base=tensors_of(versions[-1]), step=1e-4)]
    newer.append(model_bytes(81, base=tensors_of(newer[-1]), step=1e-4))
    for i, data in enumerate(newer):
        (work / MODEL).write_bytes(data)
        run_git("commit", "-q", "-am", f"partial v{i}", cwd=work)
    run_git("push", "-q", "origin", "main", cwd=work)
    bare = store_remote.path
    run_git("gc", "-q", "--prune=now", cwd=bare)
    run_git("gc", "-q", "--prune=now", cwd=work)
    fresh = clone(store_remote.url, tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == newer[-1]
    every = [*versions, *newer]
    log = run_git("rev-list", "--reverse", "HEAD", "--", MODEL, cwd=fresh).stdout.split()
    for commit, data in zip(log, every, strict=True):
        run_git("checkout", "-q", commit, cwd=fresh)
        assert (fresh / MODEL).read_bytes() == data
    mgit("fsck", "--all", cwd=fresh)


def test_two_partial_clones_pushing_at_once(tmp_path: Path, store_remote: Remote) -> None:
    versions = series(3)
    _src, _ = source(tmp_path, store_remote, versions)
    a, b = clone(store_remote.url, tmp_path / "a"), clone(store_remote.url, tmp_path / "b")
    data = {}
    for work, branch, seed in ((a, "alice", 90), (b, "bob", 91)):
        data[branch] = model_bytes(seed, base=tensors_of(versions[-1]), step=2e-4)
        run_git("switch", "-q", "-c", branch, cwd=work)
        (work / MODEL).write_bytes(data[branch])
        run_git("commit", "-q", "-am", branch, cwd=work)
    barrier, errors = threading.Barrier(2), []

    def push(work: Path, branch: str) -> None:
        barrier.wait()
        try:
            run_git("push", "-q", "origin", branch, cwd=work)
        except AssertionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=push, args=p) for p in ((a, "alice"), (b, "bob"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    fresh = clone(store_remote.url, tmp_path / "fresh")
    for branch in ("alice", "bob"):
        run_git("checkout", "-q", branch, cwd=fresh)
        assert (fresh / MODEL).read_bytes() == data[branch]
    run_git("checkout", "-q", "main~2", cwd=fresh)
    assert (fresh / MODEL).read_bytes() == versions[0]
    mgit("fsck", "--all", cwd=fresh)


def test_offline_checkout_of_a_remote_only_version_is_one_line_and_writes_nothing(
    tmp_path: Path, store_remote: Remote
) -> None:
    versions = series(3)
    _src, commits = source(tmp_path, store_remote, versions)
    work = clone(store_remote.url, tmp_path / "clone")
    run_git("remote", "set-url", "origin", str(tmp_path / "offline"), cwd=work)
    proc = run_git("checkout", "-q", commits[0], cwd=work, check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("git-mgit:")]
    assert len(lines) == 1 and MODEL in lines[0]
    assert "origin could not be reached" in lines[0] and "git mgit fetch" in lines[0]
    assert not (work / MODEL).exists()  # nothing half-written
    assert run_git("rev-parse", "HEAD", cwd=work).stdout.strip() == commits[-1]
    status = mgit("status", cwd=work).stdout
    assert "on origin, not fetched" not in status  # HEAD's version is here
    ls = mgit("ls-files", commits[0], cwd=work).stdout
    assert ls.split()[1] == "-"  # on a remote only


def test_a_notes_ref_locked_elsewhere_fails_no_checkout(tmp_path: Path, remote: Remote) -> None:
    """The objects came; merging the remote's lineage notes then found refs/notes/mgit
    locked (a concurrent `git notes`). That is a warning: the files are checked out, and
    the next fetch merges the notes. It failed every file the fetch was for, in a line
    naming none, while `git checkout` itself exited 0 with the files gone."""
    versions = series(2)
    src, commits = source(tmp_path, remote, versions)
    work = clone(remote.url, tmp_path / "clone")
    old = run_git("rev-parse", f"{commits[0]}:{MODEL}", cwd=src).stdout.strip()
    run_git("notes", "--ref=mgit", "add", "-m", '{"name":"old"}', old, cwd=src)
    run_git("push", "-q", "origin", "main", cwd=src)  # notes the clone has not seen yet
    lock = work / ".git" / "refs" / "notes" / "mgit.lock"
    lock.write_text("")
    proc = run_git("checkout", "-q", commits[0], cwd=work)
    assert (work / MODEL).read_bytes() == versions[0]
    assert "lineage notes were not merged" in proc.stderr and "git mgit fetch" in proc.stderr
    assert status_porcelain(work) == ""
    lock.unlink()
    mgit("fetch", cwd=work)
    note = run_git("notes", "--ref=mgit", "show", f"{commits[0]}:{MODEL}", cwd=work).stdout
    assert note.strip() == '{"name":"old"}'


def test_a_delta_whose_base_did_not_come_is_fetched_for_again(
    tmp_path: Path, http_remote: Remote
) -> None:
    """git fetch sets refs one at a time: a delta's version ref can land while its base's
    fails (here a lock another process holds). The delta alone cannot be read, so the
    version counts as missing and the next checkout fetches the base; it counted as here
    (an object filed its chunks), and every later checkout failed for good."""
    versions = series(5)
    _src, commits = source(tmp_path, http_remote, versions)
    work = clone(http_remote.url, tmp_path / "clone")
    old = run_git("rev-parse", f"{commits[1]}:{MODEL}", cwd=work).stdout.strip()
    (delta,) = [r for r in ls_remote(work, http_remote.url, "refs/mgit/v/*") if f"/{old}." in r]
    base = delta.split(".", 1)[1].split(".")[0]
    lock = work / ".git" / "refs" / "mgit" / "v" / f"{base}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    failed = run_git("checkout", "-q", commits[1], cwd=work, check=False)
    assert failed.returncode != 0 and MODEL in failed.stderr
    lock.unlink()
    run_git("checkout", "-q", commits[1], cwd=work)
    assert (work / MODEL).read_bytes() == versions[1]


def test_a_ref_republished_between_listing_and_fetch_is_fetched_again_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A push re-published the version ref (same tree, a new commit) and the old commit was
    collected between the listing and the fetch: git's `not our ref`. The fetch lists again
    and takes the new commit, also when git's stderr is a terminal, where its message goes
    to the user and never reaches git-mgit (the retry keyed on that message)."""
    real_git, wrapped = shutil.which("git"), tmp_path / "bin"
    wrapped.mkdir()
    (wrapped / "git").write_text(f'#!/bin/sh\nexec {real_git} "$@"\n')
    (wrapped / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapped}{os.pathsep}{os.environ['PATH']}")  # the server's too
    with GitHttpServer(tmp_path / "http-root") as server:
        remote = init_http_remote(server)
        src, commits = source(tmp_path, remote, series(2))
        work = clone(remote.url, tmp_path / "clone")
        old = run_git("rev-parse", f"{commits[0]}:{MODEL}", cwd=src).stdout.strip()
        ref, skip, done = f"refs/mgit/v/{old}", tmp_path / "skip", tmp_path / "republished"
        skip.write_text("")  # the first fetch (the branches') goes through
        (wrapped / "git").write_text(
            f"""#!/bin/sh
if [ "$1" = http-backend ] && [ "$REQUEST_METHOD" = POST ] && [ ! -e {done} ]
then case "$PATH_INFO" in *git-upload-pack)
    if [ -e {skip} ]; then rm {skip}; exec {real_git} "$@"; fi
    touch {done}; (cd {remote.path}
    n=$(echo again | {real_git} commit-tree "$({real_git} rev-parse "{ref}^{{tree}}")")
    {real_git} update-ref {ref} "$n" && {real_git} reflog expire --expire=now --all &&
    {real_git} repack -a -d -q && {real_git} prune --expire=now) >/dev/null 2>&1;; esac
fi
exec {real_git} "$@"
"""
        )
        terminal, side = os.openpty()
        shown: list[bytes] = []
        reader = threading.Thread(target=_read_all, args=(terminal, shown))
        reader.start()
        try:
            proc = subprocess.run(
                ["git", "mgit", "fetch", "--rev", commits[0]], cwd=work, stderr=side, check=False
            )
        finally:
            os.close(side)
            reader.join()
            os.close(terminal)
        said = b"".join(shown).decode(errors="replace")
        assert done.exists() and "not our ref" in said and proc.returncode == 0, said
        run_git("checkout", "-q", commits[0], cwd=work)
        assert (work / MODEL).read_bytes() == series(2)[0]


def _read_all(fd: int, into: list[bytes]) -> None:
    """What a terminal shows, until its other side is closed."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every writer closed its side
            return
        if not chunk:
            return
        into.append(chunk)


def test_a_push_url_added_to_a_remote_gets_the_objects_its_branch_needs(
    tmp_path: Path, remote: Remote
) -> None:
    """git runs pre-push once for each of a remote's push URLs, naming it; the hook listed
    the fetch URL, which held every version already, so a mirror added as a second push
    URL got the branch without its tensor objects, and its clones could not check out."""
    versions = series(2)
    src, _ = source(tmp_path, remote, versions)
    mirror = init_bare_remote(tmp_path / "mirror.git")
    for url in (remote.url, mirror.url):
        run_git("config", "--add", "remote.origin.pushurl", url, cwd=src)
    run_git("push", "-q", "origin", "main", cwd=src)
    fresh = clone(mirror.url, tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == versions[1]
    run_git("checkout", "-q", "HEAD~1", cwd=fresh)
    assert (fresh / MODEL).read_bytes() == versions[0]


def test_versions_published_on_a_branch_then_made_tips_stay_fetchable(
    tmp_path: Path, bare_remote: Remote
) -> None:
    """V1 went out as a delta of V0 on a branch; main then moved to V1 (V0 re-published as a
    delta of V1, V1 whole), then on to V3. Retiring or rotating V1's whole ref then left
    V0 and V1 as deltas of each other only: neither could be fetched from the remote. A
    version whose refs could lean back on it keeps its whole ref."""
    run_git("config", "--global", "mgit.chunkSize", "8192", cwd=tmp_path)
    run_git("config", "--global", "mgit.fetchBudget", "4", cwd=tmp_path)
    src = init_mgit_repo(tmp_path / "src")
    run_git("remote", "add", "origin", bare_remote.url, cwd=src)
    versions, commits = series(4, step=1e-6), []
    for i, data in enumerate(versions[:3]):
        (src / MODEL).write_bytes(data)
        run_git("add", MODEL, cwd=src)
        run_git("commit", "-q", "-m", f"v{i}", cwd=src)
        commits.append(run_git("rev-parse", "HEAD", cwd=src).stdout.strip())
        if i == 0:
            run_git("push", "-q", "origin", "main", cwd=src)
    run_git("push", "-q", "origin", "HEAD:refs/heads/feature", cwd=src)
    run_git("push", "-q", "origin", ":feature", cwd=src)
    run_git("push", "-q", "origin", f"{commits[1]}:refs/heads/main", cwd=src)
    run_git("checkout", "-q", "-B", "main", commits[1], cwd=src)
    (src / MODEL).write_bytes(versions[3])
    run_git("commit", "-q", "-am", "v3", cwd=src)
    run_git("push", "-q", "origin", "main", cwd=src)
    run_git("gc", "-q", "--prune=now", cwd=bare_remote.path)  # what no ref holds is gone
    fresh = clone(bare_remote.url, tmp_path / "fresh")
    for commit, data in ((commits[0], versions[0]), (commits[1], versions[1])):
        run_git("checkout", "-q", commit, cwd=fresh)
        assert (fresh / MODEL).read_bytes() == data


def test_a_delayed_file_is_fetched_for_once(tmp_path: Path, bare_remote: Remote) -> None:
    """Offline, a checkout of three models' older versions asks the remote once: each file
    git asks for again after the batch fails with the batch's reason, and fetches nothing
    of its own (one batch per command)."""
    names = [f"m{i}.safetensors" for i in range(3)]
    run_git("config", "--global", "mgit.chunkSize", "8192", cwd=tmp_path)
    src = init_mgit_repo(tmp_path / "src")
    run_git("remote", "add", "origin", bare_remote.url, cwd=src)
    for step in range(2):
        for i, name in enumerate(names):
            (src / name).write_bytes(model_bytes(10 * i + step + 1))
        run_git("add", *names, cwd=src)
        run_git("commit", "-q", "-m", f"v{step}", cwd=src)
    run_git("push", "-q", "-u", "origin", "main", cwd=src)
    work = clone(bare_remote.url, tmp_path / "clone")
    run_git("remote", "set-url", "origin", str(tmp_path / "offline"), cwd=work)
    trace = tmp_path / "trace.json"
    env = {**os.environ, "GIT_TRACE2_EVENT": str(trace)}
    proc = run_git("checkout", "-q", "HEAD~1", cwd=work, check=False, env=env)
    assert proc.returncode != 0 and "could not be reached" in proc.stderr
    assert commands_run(trace) == (1, 0)  # one listing, no fetch (nothing answered it)


def big_model_source(tmp_path: Path, remote: Remote, seed: int) -> tuple[Path, bytes]:
    """A commit of a 1.1 MB model, pushes of at most 300k and objects of at most 100k."""
    big = model_bytes(seed, n=4096)
    root = init_mgit_repo(tmp_path / "src")
    run_git("config", "--global", "mgit.maxPushSize", "300k", cwd=root)
    run_git("config", "--global", "mgit.maxObjectSize", "100k", cwd=root)
    (root / MODEL).write_bytes(big)
    run_git("add", MODEL, cwd=root)
    run_git("commit", "-q", "-m", "big", cwd=root)
    run_git("remote", "add", "origin", remote.url, cwd=root)
    return root, big


def test_a_push_over_the_remotes_size_limit_goes_in_parts(tmp_path: Path, remote: Remote) -> None:
    run_git("config", "receive.maxInputSize", "400k", cwd=remote.path)
    root, big = big_model_source(tmp_path, remote, 7)
    run_git("push", "-q", "origin", "main", cwd=root)
    assert not run_git("ls-remote", remote.url, "refs/mgit/partial/*", cwd=root).stdout
    fresh = clone(remote.url, tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == big
    sizes = objects_in(remote.path)
    assert max(sizes.values()) <= 100 * 1024 < sum(sizes.values())
    assert max(objects_in(root / ".git").values()) <= 100 * 1024


def test_a_cut_off_push_resumes(tmp_path: Path, bare_remote: Remote) -> None:
    """Parts already on the remote are not sent again."""
    root, big = big_model_source(tmp_path, bare_remote, 8)
    hook = bare_remote.path / "hooks" / "pre-receive"
    hook.write_text(
        '#!/bin/sh\nwhile read old new ref; do case "$ref" in refs/mgit/v/*) exit 1;; esac; done\n'
    )
    hook.chmod(0o755)
    first = run_git("push", "origin", "main", cwd=root, check=False)
    assert first.returncode != 0 and "run the push again" in first.stderr
    parts = run_git("ls-remote", bare_remote.url, "refs/mgit/partial/*", cwd=root).stdout
    assert parts  # the parts made it before the version ref was refused
    hook.unlink()
    run_git("push", "-q", "origin", "main", cwd=root)
    fresh = clone(bare_remote.url, tmp_path / "fresh")
    assert (fresh / MODEL).read_bytes() == big


def test_a_history_goes_out_as_stored_the_tip_whole_and_a_later_tip_takes_the_old_one_on(
    tmp_path: Path, bare_remote: Remote
) -> None:
    """Small steps: `git add` stored each version as deltas of the one before, and the
    push of the history sends those very objects (nothing encoded), with the tip whole.
    A later push of one new tip re-publishes the old tip as a delta of the new one."""
    versions = series(4, step=1e-6)
    run_git("config", "--global", "mgit.fetchBudget", "4", cwd=tmp_path)
    src, commits = source(tmp_path, bare_remote, versions)
    ids = [run_git("rev-parse", f"{c}:{MODEL}", cwd=src).stdout.strip() for c in commits]

    def names() -> set[str]:
        out = run_git("ls-remote", bare_remote.url, "refs/mgit/v/*", cwd=src).stdout
        return {r.removeprefix("refs/mgit/v/") for r in out.split()[1::2]}

    assert names() == {ids[0], f"{ids[1]}.{ids[0]}", f"{ids[2]}.{ids[1]}", ids[3]}
    published, anchored = filed(src, "refs/mgit/v/"), filed(src, "refs/mgit/objects/")
    for c in commits[1:3]:
        own = chunks_at(src, c) - chunks_at(src, f"{c}~1")
        assert own and all(published[h.hex()] <= anchored[h.hex()] for h in own)  # as stored
    # A new tip: the previous one is re-published as a delta of it (no longer whole).
    (src / MODEL).write_bytes(model_bytes(77, base=tensors_of(versions[-1]), step=1e-6))
    run_git("commit", "-q", "-am", "v4", cwd=src)
    run_git("push", "-q", "origin", "main", cwd=src)
    after = names()
    assert ids[3] not in after and any(n.startswith(ids[3] + ".") for n in after)
    # This clone keeps what it published, not also the forward deltas `git add` wrote.
    published, anchored = filed(src, "refs/mgit/v/"), filed(src, "refs/mgit/objects/")
    assert all(anchored[h] <= published.get(h, anchored[h]) for h in anchored)
    run_git("gc", "-q", "--prune=now", cwd=bare_remote.path)
    fresh = clone(bare_remote.url, tmp_path / "fresh")
    for commit, data in zip(commits, versions, strict=True):
        run_git("checkout", "-q", commit, cwd=fresh)
        assert (fresh / MODEL).read_bytes() == data


def test_a_tag_on_an_old_commit_gets_its_version_whole(tmp_path: Path, bare_remote: Remote) -> None:
    """A tag is a tip too: its version is published whole beside the delta it had."""
    versions = series(4, step=1e-6)
    run_git("config", "--global", "mgit.fetchBudget", "4", cwd=tmp_path)
    src, commits = source(tmp_path, bare_remote, versions)
    old = run_git("rev-parse", f"{commits[1]}:{MODEL}", cwd=src).stdout.strip()
    names = run_git("ls-remote", bare_remote.url, f"refs/mgit/v/{old}*", cwd=src).stdout
    assert f"refs/mgit/v/{old}." in names and f"refs/mgit/v/{old}\n" not in names
    run_git("tag", "-a", "-m", "release", "v1.0", commits[1], cwd=src)
    run_git("push", "-q", "origin", "v1.0", cwd=src)
    names = run_git("ls-remote", bare_remote.url, f"refs/mgit/v/{old}*", cwd=src).stdout
    assert f"refs/mgit/v/{old}\n" in names  # whole now, the delta ref kept
    work = tmp_path / "tagged"
    run_git("clone", "-q", "--branch", "v1.0", bare_remote.url, str(work), cwd=tmp_path)
    assert (work / MODEL).read_bytes() == versions[1]
    assert local_chunks(work) == chunks_at(work, "HEAD")  # the tag's version alone


def test_a_remote_from_before_version_refs_still_serves_clones(
    tmp_path: Path, bare_remote: Remote
) -> None:
    """Pushed by git-mgit before version refs: anchors only; a clone fetches them all."""
    versions = series(2)
    run_git("config", "--global", "mgit.chunkSize", "8192", cwd=tmp_path)
    root = init_mgit_repo(tmp_path / "old")
    for i, data in enumerate(versions):
        (root / MODEL).write_bytes(data)
        run_git("add", MODEL, cwd=root)
        run_git("commit", "-q", "-m", f"v{i}", cwd=root)
    run_git("remote", "add", "origin", bare_remote.url, cwd=root)
    anchors = "refs/mgit/objects/*:refs/mgit/objects/*"
    run_git("push", "-q", "--no-verify", "origin", "main", anchors, cwd=root)
    work = clone(bare_remote.url, tmp_path / "clone")
    assert (work / MODEL).read_bytes() == versions[-1]
    run_git("checkout", "-q", "HEAD~1", cwd=work)
    assert (work / MODEL).read_bytes() == versions[0]
    mgit("fsck", cwd=work)


def test_commands_that_read_tensors_fetch_every_version_they_need_at_once(
    tmp_path: Path, store_remote: Remote
) -> None:
    versions = series()
    _src, commits = source(tmp_path, store_remote, versions)
    work = clone(store_remote.url, tmp_path / "clone")
    refs = [f"{c}:{MODEL}" for c in commits[:3]]
    script = (
        "import sys, json\n"
        "from git_mgit.runtime import load_models\n"
        "models = load_models(sys.argv[1:]).models\n"
        "print(json.dumps([models[r]['layer.0.weight'].double().sum().item() for r in sys.argv[1:]]))\n"
    )
    trace = tmp_path / "load.json"
    env = {**os.environ, "GIT_TRACE2_EVENT": str(trace)}
    proc = subprocess.run(
        [sys.executable, "-c", script, *refs], cwd=work, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    expected = [
        float(tensors_of(v)["layer.0.weight"].astype("float64").sum()) for v in versions[:3]
    ]
    assert json.loads(proc.stdout) == pytest.approx(expected, rel=1e-12)
    assert commands_run(trace) == one_batch(store_remote)  # three versions, one batch


def _git_processes(trace: Path, command: str) -> list[dict]:
    """The trace2 `start` events of the `git <command>` processes run, with their `exit`
    event's time added (as `exited`)."""
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    exits = {e["sid"]: e["time"] for e in events if e.get("event") == "exit"}
    return [
        {**e, "exited": exits.get(e["sid"], "")}
        for e in events
        if e.get("event") == "start" and _subcommand(e["argv"]) == command
    ]


def _subcommand(argv: list[str]) -> str:
    """The git command an argv runs, past `-c name=value` options."""
    rest = argv[1:]
    while rest[:1] == ["-c"]:
        rest = rest[2:]
    return rest[0] if rest else ""


@pytest.mark.parametrize("kind", ["http", "lfs"])
def test_a_fresh_checkout_lists_the_remote_while_its_filter_loads(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """A fresh clone's filter lists the remote before it loads, and fetches the version refs
    of HEAD's small blobs by name beside the listing (`refs/mgit/v/<blob>*`: a manifest's
    blob id is its version): one listing, one fetch, which brought all the checkout needs.
    The first checkout of a clone made with --no-checkout, at an older commit whose
    version is a delta, guesses HEAD's too (wrongly), then fetches its ref and the bases
    it leans on by object id in one more fetch. A clone that has an index already guesses
    from the versions asked for instead: it fetches `refs/mgit/v/<version>*` by name while
    the listing runs, then the bases in one more fetch."""
    if kind == "http":
        remote = request.getfixturevalue("http_remote")
    else:
        server = request.getfixturevalue("lfs_server")
        run_git("config", "--global", "mgit.store", "lfs", cwd=tmp_path)
        remote = Remote(
            path=server.git_root / "org" / "repo.git", url=server.repo_url(), store="lfs"
        )
    versions = series()
    src, commits = source(tmp_path, remote, versions)
    trace = tmp_path / "trace2.json"

    packets = tmp_path / "packets.txt"

    def traced(*args: str, cwd: Path) -> tuple[list[dict], list[dict]]:
        """The `git fetch` and `git ls-remote` processes of one git command (and every
        pkt-line sent or received, in `packets`)."""
        trace.unlink(missing_ok=True)
        packets.unlink(missing_ok=True)
        run_git(
            *args, cwd=cwd, env={"GIT_TRACE2_EVENT": str(trace), "GIT_TRACE_PACKET": str(packets)}
        )
        return _git_processes(trace, "fetch"), _git_processes(trace, "ls-remote")

    def by_id(fetch: dict) -> list[str]:
        """The refs a fetch names; each by the object id the listing gave (no glob)."""
        specs = [a for a in fetch["argv"] if a.startswith("+")]
        assert all(re.fullmatch(r"\+[0-9a-f]{40}:refs/\S+", a) for a in specs), specs
        return [a.split(":", 1)[1] for a in specs]

    tip = run_git("rev-parse", f"HEAD:{MODEL}", cwd=src).stdout.strip()
    (guessed,), (listing,) = traced(
        "clone", "-q", remote.url, str(tmp_path / "fresh"), cwd=tmp_path
    )
    assert (tmp_path / "fresh" / MODEL).read_bytes() == versions[-1]
    assert f"+refs/mgit/v/{tip}*:refs/mgit/v/{tip}*" in guessed["argv"]
    assert guessed["time"] < listing["exited"]  # side by side
    # nothing here is reachable from version refs or notes: it offers no haves (git's default
    # would offer the clone's commits in vain, and wait a round trip for the answer)
    assert "> have " not in packets.read_text()
    note = run_git("notes", "--ref=mgit", "show", f"HEAD:{MODEL}", cwd=tmp_path / "fresh").stdout
    assert note.strip() == '{"name":"tip"}'  # the notes came with it

    v1 = run_git("rev-parse", f"{commits[1]}:{MODEL}", cwd=src).stdout.strip()
    older = tmp_path / "older"
    run_git("clone", "-q", "-n", remote.url, str(older), cwd=tmp_path)
    (head, fetch), (_,) = traced("checkout", "-q", commits[1], cwd=older)
    assert (older / MODEL).read_bytes() == versions[1]
    assert f"+refs/mgit/v/{tip}*:refs/mgit/v/{tip}*" in head["argv"]  # HEAD's, not asked for
    names = by_id(fetch)
    (mine,) = [n for n in names if n.startswith(f"refs/mgit/v/{v1}.")]  # a delta
    assert all(f"refs/mgit/v/{b}" in " ".join(names) for b in mine.split(".")[1:])
    mgit("fsck", cwd=older)

    indexed = tmp_path / "indexed"
    run_git("clone", "-q", "-n", remote.url, str(indexed), cwd=tmp_path)
    run_git("read-tree", "HEAD", cwd=indexed)  # an index: not a fresh checkout
    (guessed, bases), listings = traced("checkout", "-q", commits[1], cwd=indexed)
    assert (indexed / MODEL).read_bytes() == versions[1]
    assert f"+refs/mgit/v/{v1}*:refs/mgit/v/{v1}*" in guessed["argv"]
    assert guessed["time"] < listings[0]["exited"]  # side by side
    assert not any(a.startswith("+refs/mgit/v/") and a.endswith("*") for a in bases["argv"])
    assert len(listings) == 1
    mgit("fsck", cwd=indexed)

    noted = tmp_path / "noted"  # the notes fetched already, and no version ref
    run_git("clone", "-q", "-n", remote.url, str(noted), cwd=tmp_path)
    run_git("fetch", "-q", "origin", "+refs/notes/mgit*:refs/notes/mgit-remotes/origin*", cwd=noted)
    run_git("read-tree", "HEAD", cwd=noted)
    (guessed, *_), _ = traced("checkout", "-q", commits[1], cwd=noted)
    assert (noted / MODEL).read_bytes() == versions[1]
    assert f"+refs/mgit/v/{v1}*:refs/mgit/v/{v1}*" in guessed["argv"]
    assert "fetch.negotiationAlgorithm=noop" not in guessed["argv"]  # the notes are offered
    mgit("fsck", cwd=noted)


def test_a_fresh_checkout_guesses_from_each_small_blob_once(tmp_path: Path) -> None:
    """A tree that holds one small blob many times (empty `__init__.py` files) is guessed
    from, its blobs counted once each against the limit."""
    root = init_mgit_repo(tmp_path / "src")
    for i in range(guess._GUESSES + 50):
        (root / f"pkg{i}").mkdir()
        (root / f"pkg{i}" / "__init__.py").write_bytes(b"")
    (root / MODEL).write_bytes(model_bytes(1))
    run_git("add", ".", cwd=root)
    run_git("commit", "-q", "-m", "many empty files", cwd=root)
    expected = {
        run_git("rev-parse", f"HEAD:{path}", cwd=root).stdout.strip()
        for path in ("pkg0/__init__.py", MODEL, ".gitattributes")
    }
    assert set(guess._small_blobs(find_repo(root))) == expected


def test_a_fine_tune_is_published_as_a_delta_of_its_base_in_the_same_commit(
    tmp_path: Path, remote: Remote
) -> None:
    """A fine-tune tip leans on its declared base, whole at the same commit: the pair costs
    about one model and a delta to push, store and clone, not two whole models."""
    run_git("config", "--global", "mgit.chunkSize", "8192", cwd=tmp_path)
    root = init_mgit_repo(tmp_path / "src")
    (root / "mgit.toml").write_text(
        '[models.base]\npath = "base.safetensors"\n\n'
        '[models.ft]\npath = "ft.safetensors"\nparents = ["base"]\n'
    )
    base = model_bytes(3)
    ft = model_bytes(4, base=tensors_of(base), step=1e-6)
    (root / "base.safetensors").write_bytes(base)
    (root / "ft.safetensors").write_bytes(ft)
    run_git("add", "mgit.toml", "base.safetensors", "ft.safetensors", cwd=root)
    run_git("commit", "-q", "-m", "base and fine-tune", cwd=root)
    run_git("remote", "add", "origin", remote.url, cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    b, f = (
        run_git("rev-parse", f"HEAD:{n}.safetensors", cwd=root).stdout.strip()
        for n in ("base", "ft")
    )
    names = run_git("ls-remote", remote.url, "refs/mgit/v/*", cwd=root).stdout
    assert f"refs/mgit/v/{b}\n" in names and f"refs/mgit/v/{f}.{b}\n" in names
    ft_ref = run_git("rev-parse", f"refs/mgit/v/{f}.{b}", cwd=root).stdout.strip()
    ft_objects = sum(
        int(line.split()[3])
        for line in run_git("ls-tree", "-r", "-l", ft_ref, cwd=root).stdout.splitlines()
    )
    assert ft_objects < 0.6 * len(ft)  # a delta of the base, not a second whole model
    work = clone(remote.url, tmp_path / "clone")
    assert (work / "base.safetensors").read_bytes() == base
    assert (work / "ft.safetensors").read_bytes() == ft
    assert status_porcelain(work) == ""


def test_pushes_of_tensor_objects_stay_packs_on_the_remote(
    tmp_path: Path, bare_remote: Remote
) -> None:
    """A bare remote unpacks a push of fewer than receive.unpackLimit (100) objects into
    loose objects, deflating each again; a padded push stays a pack, nothing loose."""
    src = init_mgit_repo(tmp_path / "src")
    run_git("remote", "add", "origin", bare_remote.url, cwd=src)
    first = model_bytes(1, n=8192)  # 2 MiB of tensors: a push worth keeping packed
    for i, data in enumerate([first, model_bytes(2, base=tensors_of(first), step=1e-3)]):
        (src / MODEL).write_bytes(data)
        run_git("add", MODEL, cwd=src)
        run_git("commit", "-q", "-m", f"v{i}", cwd=src)
        run_git("push", "-q", "origin", "main", cwd=src)
        counts = run_git("count-objects", "-v", cwd=bare_remote.path).stdout
        loose_kib = int(counts.split("\nsize: ")[1].split()[0])
        assert loose_kib < 64, counts  # commits, trees, manifests: no tensor object is loose
        assert len(ls_remote(src, bare_remote.url, "refs/mgit/pad/*")) == 1  # this clone's
    dst = clone(bare_remote.url, tmp_path / "dst")
    assert (dst / MODEL).read_bytes() == data


def test_a_push_encodes_the_checked_out_tip_from_its_file_and_trusts_no_edit(
    tmp_path: Path, bare_remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new tip, which `git add` stored as a delta of the last version, is published whole
    from its checked-out file: none of its chunks is decoded. A file edited since `git add`
    (same size, other bytes) is not trusted: the push decodes, and publishes what was
    committed, byte for byte."""
    from git_mgit import codecs
    from git_mgit.transfer.push import push_versions

    versions = series(5, step=1e-6)  # small steps: `git add` stores deltas
    src, commits = source(tmp_path, bare_remote, versions[:3])
    decoded: list[bytes] = []
    decode_all = codecs.decode_all

    def counted(chain: object) -> bytearray:
        decoded.append(chain.content_hash)
        return decode_all(chain)

    monkeypatch.setattr(codecs, "decode_all", counted)

    def commit_and_push(data: bytes, edit: bytes | None = None) -> set[bytes]:
        """Commit `data`, put `edit` in the file if given, push; the new tip's chunks."""
        (src / MODEL).write_bytes(data)
        run_git("commit", "-q", "-am", "next", cwd=src)
        if edit is not None:
            (src / MODEL).write_bytes(edit)
        head = run_git("rev-parse", "HEAD", cwd=src).stdout.strip()
        new = chunks_at(src, "HEAD") - chunks_at(src, "HEAD~1")
        assert new and local_chunks(src) >= new  # stored here (as deltas), the remote lacks them
        decoded.clear()
        report = push_versions(find_repo(src), "origin", [head], [commits[-1]], {"refs/heads/main"})
        assert report.published
        commits.append(head)
        run_git("push", "-q", "origin", "main", cwd=src)
        return new

    new = commit_and_push(versions[3])
    assert not new & set(decoded)
    edited = bytearray(versions[4])
    edited[len(edited) // 2] ^= 0xFF
    new = commit_and_push(versions[4], edit=bytes(edited))
    assert new & set(decoded)
    assert (src / MODEL).read_bytes() == bytes(edited)  # the push left the edit alone
    fresh = clone(bare_remote.url, tmp_path / "fresh")
    for commit, data in zip(commits, versions, strict=True):
        run_git("checkout", "-q", commit, cwd=fresh)
        assert (fresh / MODEL).read_bytes() == data
