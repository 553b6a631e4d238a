"""Large model files check out around git's in-memory buffer, with the real git.

Every test sets mgit.directSize to 1m (its floor) and uses models of about
2 MiB, so each git command below takes the direct path: the filter hands git
a placeholder, writes the model over it, and records its stat data in the
index at git's exit. A file the direct path wrote has a whole-second mtime
(set a second back, so the index is strictly newer); `git diff-files`, which
compares stat data only, shows that the index already has it before any
`git status` could refresh it.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from git_mgit.modelfile import manifest as mf
from tests.gitsandbox import Remote, clone, one_batch, run_git, transfers
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes, status_porcelain, tensors_of

MODEL = "model.safetensors"
SECOND = "second.safetensors"
ROWS = 8192  # embed.weight: 8192 x 64 fp32 = 2 MiB


def versions(n: int, seed: int = 7) -> list[bytes]:
    out = [model_bytes(seed, n=ROWS)]
    for i in range(1, n):
        out.append(model_bytes(seed + i, base=tensors_of(out[-1]), step=1e-3))
    return out


@pytest.fixture(autouse=True)
def direct_from_1m(isolated_git: Path, tmp_path: Path) -> None:
    run_git("config", "--global", "mgit.directSize", "1m", cwd=tmp_path)


def journal(repo: Path) -> list[Path]:
    d = repo / ".git" / "mgit" / "direct"
    return sorted(d.iterdir()) if d.is_dir() else []


def assert_direct(repo: Path, data: bytes, status: str = "", *scope: str) -> None:
    """Byte-exact, written by the direct path, stat data in the index, clean after touch.

    `status`: what `git status --porcelain` must say (of `scope`, default everything).
    """
    path = repo / MODEL
    assert path.read_bytes() == data
    assert path.stat().st_mtime_ns % 1_000_000_000 == 0, "git wrote it, not the direct path"
    if not status:  # stat data only, no refresh: the index already matches the file
        assert run_git("diff-files", "--name-only", "--", MODEL, cwd=repo).stdout == ""
        assert journal(repo) == []
    assert run_git("status", "--porcelain", "--", *scope, cwd=repo).stdout == status
    os.utime(path)  # touch: git compares content, which is the committed one
    assert run_git("status", "--porcelain", "--", *scope, cwd=repo).stdout == status
    if not status:
        assert run_git("diff", "--stat", "--", *scope, cwd=repo).stdout == ""


def commit_model(repo: Path, data: bytes, message: str) -> str:
    (repo / MODEL).write_bytes(data)
    run_git("add", MODEL, cwd=repo)
    run_git("commit", "-q", "-m", message, cwd=repo)
    return run_git("rev-parse", "HEAD", cwd=repo).stdout.strip()


def commit_other(repo: Path, text: str) -> None:
    (repo / "notes.txt").write_text(text)
    run_git("add", "notes.txt", cwd=repo)
    run_git("commit", "-q", "-m", text, cwd=repo)


@pytest.fixture
def two_branches(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """main: v0 then an unrelated commit; `next` (from v0): v1."""
    v = versions(3)
    repo = init_mgit_repo(tmp_path / "repo")
    commit_model(repo, v[0], "v0")
    run_git("branch", "next", cwd=repo)
    commit_other(repo, "main's own change")
    run_git("checkout", "-q", "next", cwd=repo)
    commit_model(repo, v[1], "v1")
    run_git("checkout", "-q", "main", cwd=repo)
    assert_direct(repo, v[0])
    return repo, v


@pytest.mark.parametrize(
    "command",
    [
        ["checkout", "-q", "next"],
        ["switch", "-q", "next"],
        ["reset", "-q", "--hard", "next"],
        ["merge", "-q", "--no-edit", "next"],
        ["rebase", "-q", "next"],
        ["cherry-pick", "next"],
        ["restore", "--source", "next", "--staged", "--worktree", MODEL],
    ],
    ids=lambda c: c[0],
)
def test_git_commands_write_large_files_directly(
    two_branches: tuple[Path, list[bytes]], command: list[str]
) -> None:
    repo, v = two_branches
    run_git(*command, cwd=repo)
    assert_direct(repo, v[1], "M  model.safetensors\n" if command[0] == "restore" else "")


def test_other_bytes_cleaned_under_a_directly_written_path_get_their_own_manifest(
    two_branches: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    """The journal answers git's refresh of a file written directly; `git hash-object
    --path` cleans other bytes under that path, and with a split index (the journal's
    records stay) those got the file's manifest: a commit made from it recorded the old
    model. The bytes git streams are compared with the file's: a model sharing all but
    its last byte with it, and another model, each get their own manifest."""
    repo, v = two_branches
    run_git("config", "core.splitIndex", "true", cwd=repo)
    run_git("checkout", "-q", "next", cwd=repo)
    assert journal(repo)  # a split index is not patched: the record stays
    fresh = init_mgit_repo(tmp_path / "fresh")
    near = tmp_path / "near.safetensors"
    near.write_bytes(v[1][:-1] + bytes([v[1][-1] ^ 1]))
    other = tmp_path / "other.safetensors"
    other.write_bytes(v[2])
    for path in (near, other, repo / MODEL):
        ids = [
            run_git("hash-object", f"--path={MODEL}", str(path), cwd=where).stdout.strip()
            for where in (repo, fresh)
        ]
        assert ids[0] == ids[1], path.name
    assert (repo / MODEL).read_bytes() == v[1]
    assert run_git("status", "--porcelain", cwd=repo).stdout == ""  # the refresh: as before


def test_a_model_whose_name_is_not_utf8_is_added_and_checked_out(tmp_path: Path) -> None:
    """File names are bytes to git. One that is not UTF-8 (Latin-1 `m\\xe9`) was encoded
    strictly where git-mgit reads a path's staged manifest and keeps the journal of a
    direct write, so it could be neither added nor checked out."""
    v = versions(2)
    repo = init_mgit_repo(tmp_path / "repo")
    name = os.fsdecode(b"m\xe9.safetensors")
    (repo / name).write_bytes(v[0])
    run_git("add", ".", cwd=repo)
    run_git("commit", "-q", "-m", "v0", cwd=repo)
    (repo / name).write_bytes(v[1])
    run_git("add", ".", cwd=repo)  # reads the staged manifest: a delta base
    run_git("commit", "-q", "-m", "v1", cwd=repo)
    run_git("checkout", "-q", "HEAD~1", "--", ".", cwd=repo)  # written directly
    assert (repo / name).read_bytes() == v[0]
    run_git("checkout", "-q", "HEAD", "--", ".", cwd=repo)
    assert (repo / name).read_bytes() == v[1]
    assert run_git("status", "--porcelain", cwd=repo).stdout == ""


def test_stash_pop_writes_directly(two_branches: tuple[Path, list[bytes]]) -> None:
    repo, v = two_branches
    (repo / MODEL).write_bytes(v[2])
    run_git("stash", "-q", cwd=repo)
    assert_direct(repo, v[0])  # stash resets the file: that goes direct too
    run_git("stash", "pop", "-q", cwd=repo)
    # A modification now, not the committed file: the journal vouches for it until git
    # refreshes, so status says modified without hashing it again.
    assert_direct(repo, v[2], " M model.safetensors\n")
    run_git("add", MODEL, cwd=repo)
    assert status_porcelain(repo) == "M  model.safetensors\n"
    run_git("commit", "-q", "-m", "v2", cwd=repo)
    assert run_git("cat-file", "--filters", f"HEAD:{MODEL}", cwd=repo, text=False).stdout == v[2]


def pushed_two_models(root: Path, url: str, v: list[bytes], w: list[bytes]) -> tuple[Path, str]:
    """A repository at `root` committing v[0] and w[0], then v[1] and w[1], pushed to `url`;
    it and the first commit."""
    src = init_mgit_repo(root)
    (src / SECOND).write_bytes(w[0])
    run_git("add", SECOND, cwd=src)
    first = commit_model(src, v[0], "v0")
    (src / SECOND).write_bytes(w[1])
    run_git("add", SECOND, cwd=src)
    commit_model(src, v[1], "v1")
    run_git("remote", "add", "origin", url, cwd=src)
    run_git("push", "-q", "-u", "origin", "main", cwd=src)
    return src, first


def stalled(cmd: list[str], cwd: Path, at: int, marker: Path) -> tuple[subprocess.Popen, int]:
    """git `cmd` run with the filter stalling after `at` bytes of a direct write; the git
    process and, once it stalls, the filter's pid."""
    env = {**os.environ, "GIT_MGIT_TEST_DIRECT_STALL": f"{at}:{marker}"}
    git = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert git.poll() is None and time.monotonic() < deadline, git.communicate()
        time.sleep(0.01)
    time.sleep(0.05)  # the marker's text (the pid) lands just after the file appears
    return git, int(marker.read_text())


def finished_after_kill(repo: Path, rev: str, theirs: bytes, ours: bytes, *paths: str) -> None:
    """After a checkout of `rev` was killed: `git mgit status` says it did not finish, and
    `git mgit checkout [-- paths]` writes the index's version (`theirs` if git staged `rev`'s
    before it died, else `ours`)."""
    assert f"checkout did not finish: run `git mgit checkout -- {MODEL}`" in (
        mgit("status", cwd=repo).stdout
    )
    out = mgit("checkout", *(["--", *paths] if paths else []), cwd=repo)
    assert f"wrote {MODEL}" in out.stdout
    staged = run_git("rev-parse", f":{MODEL}", cwd=repo).stdout.strip()
    expected = (
        theirs
        if staged == run_git("rev-parse", f"{rev}:{MODEL}", cwd=repo).stdout.strip()
        else ours
    )
    assert_direct(repo, expected, "", MODEL)  # git itself died mid-checkout: other files vary


def test_clone_pull_and_old_checkout_write_directly(tmp_path: Path, remote: Remote) -> None:
    """A fresh clone (no repository set-up yet, hooks elsewhere), a pull, and an old
    version of two models whose objects only the remote has: one batch fetches both."""
    hooks = tmp_path / "team-hooks"
    hooks.mkdir()
    run_git("config", "--global", "core.hooksPath", str(hooks), cwd=tmp_path)
    v, w = versions(3), versions(2, seed=50)
    src, first = pushed_two_models(tmp_path / "src", remote.url, v, w)

    run_git("clone", "-q", remote.url, "clone", cwd=tmp_path)
    dst = tmp_path / "clone"
    assert_direct(dst, v[1])
    assert (dst / SECOND).read_bytes() == w[1]

    commit_model(src, v[2], "v2")
    run_git("push", "-q", cwd=src)
    run_git("pull", "-q", cwd=dst)
    assert_direct(dst, v[2])

    assert transfers(tmp_path, remote, "checkout", "-q", first, cwd=dst) == one_batch(remote)
    assert_direct(dst, v[0])
    assert (dst / SECOND).read_bytes() == w[0]
    assert (dst / SECOND).stat().st_mtime_ns % 1_000_000_000 == 0


def staged_counts(trace: Path) -> dict[str, tuple[int, int]]:
    """path -> (chunks decoded while their objects came, chunks) from a GIT_TRACE file."""
    found = re.findall(
        r"git-mgit checkout: (\S+): (\d+) of (\d+) chunks decoded while their objects came",
        trace.read_text() if trace.exists() else "",
    )
    return {path: (int(done), int(count)) for path, done, count in found}


def chunk_count(repo: Path, rev: str, path: str) -> int:
    blob = run_git("cat-file", "blob", f"{rev}:{path}", cwd=repo, text=False).stdout
    return len(list(mf.parse(blob).chunks()))


def staged_leftovers(repo: Path) -> list[Path]:
    folder = repo / ".git" / "mgit" / "staged"
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize("store_remote", ["lfs", "s3"], indirect=True)
def test_a_clone_from_a_blob_store_decodes_large_files_while_their_objects_download(
    tmp_path: Path, store_remote: Remote
) -> None:
    """A fresh clone's two models are decoded as their objects arrive, into staged copies
    that replace git's placeholders; an old version, whose objects the store holds as
    deltas of the new one's, is completed from the store after its download. Every file
    byte-exact, its stat data in the index, no staged copy left behind."""
    v, w = versions(2), versions(2, seed=50)
    _, first = pushed_two_models(tmp_path / "src", store_remote.url, v, w)

    trace = tmp_path / "clone.trace"
    run_git("clone", "-q", store_remote.url, "clone", cwd=tmp_path, env={"GIT_TRACE": str(trace)})
    dst = tmp_path / "clone"
    assert_direct(dst, v[1])
    assert (dst / SECOND).read_bytes() == w[1]
    counts = {p: chunk_count(dst, "HEAD", p) for p in (MODEL, SECOND)}
    assert staged_counts(trace) == {p: (n, n) for p, n in counts.items()}  # all, as they came
    assert staged_leftovers(dst) == []

    trace = tmp_path / "old.trace"
    run_git("checkout", "-q", first, cwd=dst, env={"GIT_TRACE": str(trace)})
    assert_direct(dst, v[0])
    assert (dst / SECOND).read_bytes() == w[0]
    staged = staged_counts(trace)
    assert set(staged) == {MODEL, SECOND}
    for path, (done, count) in staged.items():
        assert count == chunk_count(dst, first, path)
        assert done < count  # its deltas came too, and were decoded from the store after
    assert staged_leftovers(dst) == []


def test_a_checkout_killed_before_its_staged_copy_replaces_the_placeholder(
    tmp_path: Path, lfs_server
) -> None:
    """An old version fetched on demand, killed with the model decoded into its staged
    copy but not yet in place: git's empty file is left, which is never taken for the
    model; `git mgit checkout` writes it and removes the dead process's staged copy."""
    run_git("config", "--global", "mgit.store", "lfs", cwd=tmp_path)
    v = versions(2)
    src = init_mgit_repo(tmp_path / "src")
    first = commit_model(src, v[0], "v0")
    commit_model(src, v[1], "v1")
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=src)
    run_git("push", "-q", "-u", "origin", "main", cwd=src)
    dst = clone(lfs_server.repo_url(), tmp_path / "clone")

    git, pid = stalled(["git", "checkout", "-q", first], dst, 0, tmp_path / "stalled")
    assert len(staged_leftovers(dst)) == 1  # complete, about to replace the placeholder
    os.kill(pid, signal.SIGKILL)
    git.communicate(timeout=60)

    assert (dst / MODEL).read_bytes() == b""
    assert run_git("status", "--porcelain", cwd=dst).stdout != ""
    finished_after_kill(dst, first, v[0], v[1])
    assert staged_leftovers(dst) == []


@pytest.mark.parametrize("stall", ["before", "midway"])
def test_kill_during_direct_write_is_never_clean_and_checkout_finishes_it(
    two_branches: tuple[Path, list[bytes]], tmp_path: Path, stall: str
) -> None:
    """Killed with the empty file git wrote untouched, or halfway through the model."""
    repo, v = two_branches
    at = 0 if stall == "before" else len(v[1]) // 2
    git, pid = stalled(["git", "checkout", "-q", "next"], repo, at, tmp_path / "stalled")
    os.kill(pid, signal.SIGKILL)  # the filter, midway through the model
    git.communicate(timeout=60)

    assert (repo / MODEL).read_bytes() not in (v[0], v[1])  # empty, or a partial file
    status = run_git("status", "--porcelain", cwd=repo)
    assert status.stdout != "", "a partial model passed for the committed one"
    finished_after_kill(repo, "next", v[1], v[0], MODEL)


def test_failed_write_removes_the_file_names_it_and_checkout_finishes(
    two_branches: tuple[Path, list[bytes]],
) -> None:
    """A write that fails (here: over the file-size limit, as a full disk would) leaves
    no partial file; one line says what to run; `git mgit checkout` finishes it."""
    repo, v = two_branches

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    proc = subprocess.run(
        ["git", "checkout", "-q", "next"],
        cwd=repo,
        capture_output=True,
        text=True,
        preexec_fn=small_files,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("git-mgit:")]
    assert len(lines) == 1 and MODEL in lines[0] and "git mgit checkout -- " in lines[0], (
        proc.stderr
    )
    assert not (repo / MODEL).exists()
    assert status_porcelain(repo) == f" D {MODEL}\n"
    assert f"checkout did not finish: run `git mgit checkout -- {MODEL}`" in (
        mgit("status", cwd=repo).stdout
    )

    assert f"wrote {MODEL}" in mgit("checkout", cwd=repo).stdout
    assert_direct(repo, v[1])
    assert "nothing to finish" in mgit("checkout", cwd=repo).stdout


def test_checkout_rev_paths_stages_and_writes(two_branches: tuple[Path, list[bytes]]) -> None:
    repo, v = two_branches
    mgit("checkout", "next", "--", MODEL, cwd=repo)
    assert_direct(repo, v[1], f"M  {MODEL}\n")
    mgit("checkout", "HEAD", "--", MODEL, cwd=repo)
    assert_direct(repo, v[0])
    (repo / MODEL).write_bytes(b"scribbled over")
    mgit("checkout", "--", MODEL, cwd=repo)  # from the index, whatever is there
    assert_direct(repo, v[0])
    bad = mgit("checkout", "--", "notes.txt", cwd=repo, check=False)
    assert bad.returncode != 0 and "no model files tracked by git-mgit" in bad.stderr
    bad = mgit("checkout", "no-such-rev", cwd=repo, check=False)
    assert bad.returncode != 0 and "no-such-rev: not a commit" in bad.stderr


def test_checkout_writes_no_file_through_a_symlinked_folder(tmp_path: Path) -> None:
    """A folder on a model's path replaced by a symbolic link (to outside the working tree)
    is not written through, as git's own checkout refuses to: one line names it."""
    v = versions(1)
    repo = init_mgit_repo(tmp_path / "repo")
    (repo / "models").mkdir()
    (repo / "models" / MODEL).write_bytes(v[0])
    run_git("add", ".", cwd=repo)
    run_git("commit", "-q", "-m", "v0", cwd=repo)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(repo / "models")
    (repo / "models").symlink_to(outside)
    bad = mgit("checkout", "--", f"models/{MODEL}", cwd=repo, check=False)
    assert bad.returncode != 0 and "is a symbolic link" in bad.stderr
    assert not list(outside.iterdir())


def test_small_files_and_other_consumers_keep_the_filter_path(
    two_branches: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    """Below the threshold, and where git offers no delay (archive, cat-file), the bytes
    come through the filter as before: never a placeholder."""
    repo, v = two_branches
    run_git("config", "mgit.directSize", "64m", cwd=repo)
    run_git("checkout", "-q", "next", cwd=repo)
    assert (repo / MODEL).read_bytes() == v[1]
    assert (repo / MODEL).stat().st_mtime_ns % 1_000_000_000 != 0
    run_git("config", "--unset", "mgit.directSize", cwd=repo)  # the global 1m again
    assert run_git("cat-file", "--filters", f"main:{MODEL}", cwd=repo, text=False).stdout == v[0]
    run_git("archive", "-o", str(tmp_path / "a.tar"), "main", cwd=repo)
    import tarfile

    with tarfile.open(tmp_path / "a.tar") as tar:
        member = tar.extractfile(MODEL)
        assert member is not None and member.read() == v[0]


RSS_LIMIT_MB = 150


def peak_rss_mb(cmd: list[str], cwd: Path) -> float:
    """The largest resident set of any process the command ran (git's, git-mgit's, ...).

    RUSAGE_CHILDREN in a fresh wrapper process: Linux keeps, for every process, the
    largest peak among the descendants it has waited for.
    """
    probe = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *cmd], cwd=cwd, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1]) / 1024


def test_memory_stays_bounded_for_a_model_three_times_larger(tmp_path: Path) -> None:
    """A model 3x the limit, clone and checkout of another version: every process of
    each stays under 150 MiB (git's filter path needs the whole file in git's memory)."""
    run_git("config", "--global", "mgit.maxObjectSize", "8m", cwd=tmp_path)
    rows = 3 * RSS_LIMIT_MB * 1024 * 1024 // (4 * 1024 * 16) + 64
    rng = np.random.default_rng(3)
    tensors = {
        f"layer.{i}.weight": rng.standard_normal((rows, 1024), dtype=np.float32) * 0.02
        for i in range(16)
    }
    src = init_mgit_repo(tmp_path / "src")
    save_file(tensors, src / MODEL)
    size = (src / MODEL).stat().st_size
    assert size >= 3 * RSS_LIMIT_MB * 1024 * 1024
    run_git("add", MODEL, cwd=src)
    run_git("commit", "-q", "-m", "v0", cwd=src)
    first = (src / MODEL).read_bytes()
    tensors["layer.0.weight"] += 1e-3
    save_file(tensors, src / MODEL)
    del tensors
    tip = (src / MODEL).read_bytes()
    run_git("add", MODEL, cwd=src)
    run_git("commit", "-q", "-m", "v1", cwd=src)

    clone_peak = peak_rss_mb(["git", "clone", "-q", str(src), "dst"], tmp_path)
    dst = tmp_path / "dst"
    assert (dst / MODEL).read_bytes() == tip
    checkout_peak = peak_rss_mb(["git", "checkout", "-q", "HEAD~1"], dst)
    assert (dst / MODEL).read_bytes() == first
    assert status_porcelain(dst) == ""
    assert clone_peak < RSS_LIMIT_MB and checkout_peak < RSS_LIMIT_MB, (clone_peak, checkout_peak)
