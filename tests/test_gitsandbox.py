"""The end-to-end harness really moves data through git's transports.

Every transport test runs against a ``file://`` remote and a smart-HTTP one,
because checkpoints must survive both the local and the network code paths
(HTTP adds chunked uploads, gzip negotiation and the stateless RPC dance).
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.gitsandbox import (
    Remote,
    clone,
    commit_files,
    init_repo,
    ls_remote,
    rev_parse,
    run_git,
)

# Above git's default http.postBuffer (1 MiB), so pushes go out chunked.
BIG = 3 * 1024 * 1024


def payload(size: int, seed: int) -> bytes:
    """Incompressible bytes, so the pack really is as large as the file."""
    return random.Random(seed).randbytes(size)


@pytest.fixture(params=["file", "http"])
def remote(request: pytest.FixtureRequest) -> Remote:
    return request.getfixturevalue("bare_remote" if request.param == "file" else "http_remote")


def test_run_git_failure_carries_stderr(workrepo: Path) -> None:
    with pytest.raises(AssertionError, match="Needed a single revision"):
        run_git("rev-parse", "--verify", "no-such-rev", cwd=workrepo)
    assert run_git("rev-parse", "--verify", "no-such-rev", cwd=workrepo, check=False).returncode


def test_push_large_binary_then_clone(remote: Remote, workrepo: Path, tmp_path: Path) -> None:
    blob = payload(BIG, seed=1)
    head = commit_files(workrepo, {"weights/model.bin": blob}, "add weights")
    run_git("push", "--quiet", remote.url, "main", cwd=workrepo)
    assert rev_parse(remote.path, "refs/heads/main") == head

    cloned = clone(remote.url, tmp_path / "clone")
    assert rev_parse(cloned, "HEAD") == head
    assert (cloned / "weights/model.bin").read_bytes() == blob

    if remote.server is not None:
        requests = remote.server.requests
        assert all(r.status == 200 and r.cgi_returncode == 0 for r in requests), requests
        assert any(
            r.path.endswith("/git-receive-pack")
            and r.transfer_encoding == "chunked"
            and r.body_size > BIG
            for r in requests
        ), "the big push should have been sent chunked"


def test_fetch_brings_new_commit(remote: Remote, workrepo: Path, tmp_path: Path) -> None:
    base = commit_files(workrepo, {"a.txt": "one\n"}, "one")
    run_git("push", "--quiet", remote.url, "main", cwd=workrepo)
    follower = clone(remote.url, tmp_path / "follower")

    new = commit_files(workrepo, {"a.txt": "two\n"}, "two")
    run_git("push", "--quiet", remote.url, "main", cwd=workrepo)
    run_git("fetch", "--quiet", "origin", cwd=follower)

    assert rev_parse(follower, "refs/remotes/origin/main") == new
    assert rev_parse(follower, "HEAD") == base
    run_git("merge", "--quiet", "--ff-only", "origin/main", cwd=follower)
    assert (follower / "a.txt").read_text() == "two\n"


def test_custom_ref_namespace_round_trip(remote: Remote, workrepo: Path, tmp_path: Path) -> None:
    commit_files(workrepo, {"a.txt": "main\n"}, "main")
    run_git("switch", "--quiet", "--orphan", "side", cwd=workrepo)
    custom = commit_files(workrepo, {"meta.json": "{}\n"}, "custom")
    run_git("update-ref", "refs/custom/x", custom, cwd=workrepo)
    run_git("push", "--quiet", remote.url, "main", "refs/custom/x:refs/custom/x", cwd=workrepo)

    assert ls_remote(workrepo, remote.url, "refs/custom/*") == {"refs/custom/x": custom}

    # A plain clone leaves the namespace behind; only an explicit refspec brings it.
    cloned = clone(remote.url, tmp_path / "clone")
    assert run_git("cat-file", "-e", custom, cwd=cloned, check=False).returncode != 0
    run_git("fetch", "--quiet", "origin", "refs/custom/*:refs/custom/*", cwd=cloned)
    assert rev_parse(cloned, "refs/custom/x") == custom


def test_concurrent_pushes_of_different_branches(
    remote: Remote, workrepo: Path, tmp_path: Path
) -> None:
    commit_files(workrepo, {"base.txt": "base\n"}, "base")
    run_git("push", "--quiet", remote.url, "main", cwd=workrepo)

    expected: dict[str, str] = {}
    pushers: list[tuple[Path, str]] = []
    for i in range(2):
        repo = clone(remote.url, tmp_path / f"pusher{i}")
        branch = f"feature-{i}"
        run_git("switch", "--quiet", "-c", branch, cwd=repo)
        expected[f"refs/heads/{branch}"] = commit_files(
            repo, {f"shard{i}.bin": payload(BIG // 2, seed=10 + i)}, f"shard {i}"
        )
        pushers.append((repo, branch))

    # Both pushes leave the starting line together, so they overlap on the server.
    start = threading.Barrier(len(pushers), timeout=60)

    def push(pusher: tuple[Path, str]) -> str:
        repo, branch = pusher
        start.wait()
        out = run_git("push", "--porcelain", "origin", branch, cwd=repo).stdout
        return next(line for line in out.splitlines() if line.startswith("*\t"))

    with ThreadPoolExecutor(len(pushers)) as pool:
        created = list(pool.map(push, pushers))

    assert created == [
        f"*\trefs/heads/{branch}:refs/heads/{branch}\t[new branch]" for _, branch in pushers
    ]
    assert ls_remote(workrepo, remote.url, "refs/heads/feature-*") == expected
    run_git("fsck", "--strict", "--no-progress", cwd=remote.path)


def test_http_gzip_negotiation(http_remote: Remote, workrepo: Path, tmp_path: Path) -> None:
    """Forty distinct tips make the clone's want list exceed 1 KiB, which git gzips."""
    base = commit_files(workrepo, {"a.txt": "base\n"}, "base")
    stream = "".join(
        f"commit refs/heads/b{i:02d}\n"
        "committer C <c@example.invalid> 1700000000 +0000\n"
        f"data {len(f'tip {i:02d}')}\ntip {i:02d}\nfrom {base}\n\n"
        for i in range(40)
    )
    run_git("fast-import", "--quiet", cwd=workrepo, input=stream)
    run_git("push", "--quiet", http_remote.url, "refs/heads/*:refs/heads/*", cwd=workrepo)

    cloned = clone(http_remote.url, tmp_path / "clone")
    local = run_git(
        "for-each-ref", "--format=%(refname:short)", "refs/remotes/origin/b*", cwd=cloned
    )
    assert len(local.stdout.split()) == 40

    assert http_remote.server is not None
    gzipped = [r for r in http_remote.server.requests if r.content_encoding == "gzip"]
    assert gzipped, "no gzip request body reached the server"
    assert all(
        r.path.endswith("/git-upload-pack") and r.status == 200 and r.cgi_returncode == 0
        for r in gzipped
    ), gzipped


def test_http_missing_repository_is_404(http_remote: Remote, workrepo: Path) -> None:
    """The CGI's Status: header must become the HTTP status git sees."""
    assert http_remote.server is not None
    missing = http_remote.url.replace("/repo.git", "/missing.git")
    failed = run_git("ls-remote", missing, cwd=workrepo, check=False)
    assert failed.returncode != 0
    assert "not found" in failed.stderr
    assert [r.status for r in http_remote.server.requests] == [404]


def test_init_repo_uses_isolated_default_branch(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "fresh")
    assert run_git("symbolic-ref", "HEAD", cwd=repo).stdout.strip() == "refs/heads/main"
