"""Every test runs against an isolated git configuration.

HOME and the global git config point into a temporary folder, so tests never
read or change the developer's own git setup, and `git mgit install`
(global by default) is safe to exercise.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.gitsandbox import (
    GitHttpServer,
    Remote,
    init_bare_remote,
    init_http_remote,
    init_repo,
    run_git,
)

if TYPE_CHECKING:
    from tests.servers.lfs import LfsServer
    from tests.servers.seaweed import S3Bucket, SeaweedServer

VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(autouse=True)
def isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.invalid")
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    # git runs `git-mgit` from PATH: make sure it is this interpreter's one.
    monkeypatch.setenv("PATH", VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    # Test models are a few kilobytes a tensor: at mgit.inlineSize's default every object
    # would travel in git, and no test of a blob store's transfers would reach the store.
    # Tests of filing objects inline set it where they run (test_stores.py).
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n[mgit]\n\tinlineSize = 0\n")
    return home


@pytest.fixture
def workrepo(tmp_path: Path) -> Path:
    """A fresh non-bare repository on branch ``main``."""
    return init_repo(tmp_path / "work")


@pytest.fixture
def bare_remote(tmp_path: Path) -> Remote:
    """A bare repository reached through a ``file://`` URL."""
    return init_bare_remote(tmp_path / "remote.git")


@pytest.fixture
def git_http_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHttpServer]:
    """A smart-HTTP server (real ``git http-backend``) on a free loopback port."""
    # A developer's proxy settings must not swallow requests meant for loopback.
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    root = tmp_path / "http-root"
    root.mkdir()
    with GitHttpServer(root) as server:
        yield server


@pytest.fixture(params=["file", "http"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> Remote:
    """An empty bare repository over ``file://``, then over smart HTTP: a test runs on both."""
    if request.param == "file":
        return init_bare_remote(tmp_path / "remote.git")
    server: GitHttpServer = request.getfixturevalue("git_http_server")
    return init_http_remote(server)


@pytest.fixture
def http_remote(git_http_server: GitHttpServer) -> Remote:
    """A bare repository served over smart HTTP that accepts anonymous pushes."""
    return init_http_remote(git_http_server)


@pytest.fixture
def lfs_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LfsServer]:
    """giftless (Git LFS) and git http-backend on one loopback port, behind HTTP Basic auth;
    git's credential helper (a `store` file, set --global in the isolated home) holds the
    password: `lfs_server.repo_url()` clones and pushes, its `/info/lfs` is the LFS endpoint."""
    from tests.servers.lfs import LfsServer  # giftless and flask: only for the tests that use it

    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with LfsServer(tmp_path / "lfs-server", "mgit-user", secrets.token_urlsafe(16)) as server:
        server.store_credentials(tmp_path / "git-credentials")
        yield server


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """SeaweedFS with an S3 gateway on loopback: one per session (per xdist worker)."""
    from tests.servers.seaweed import SeaweedServer

    with SeaweedServer(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


@pytest.fixture
def s3_bucket(seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A fresh bucket on `seaweed`; the AWS chain holds its keys (environment only)."""
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return seaweed.new_bucket()


@pytest.fixture(params=["file", "http", "lfs", "lfs-inline", "s3", "s3-inline"])
def store_remote(request: pytest.FixtureRequest, tmp_path: Path) -> Remote:
    """An empty remote for each store: version refs over file:// and over smart HTTP, Git
    LFS (giftless beside git http-backend, `mgit.store lfs`), and an S3 bucket
    (SeaweedFS) beside a file:// remote (`mgit.store s3://...`); set --global, so clones
    use it too. `lfs-inline` and `s3-inline` keep mgit.inlineSize's default, where every
    object of the tests' models travels in git (the suite pins 0)."""
    if request.param == "file":
        return init_bare_remote(tmp_path / "remote.git")
    if request.param == "http":
        return init_http_remote(request.getfixturevalue("git_http_server"))
    if request.param.endswith("-inline"):
        run_git("config", "--global", "--unset", "mgit.inlineSize", cwd=tmp_path)
    if request.param.startswith("lfs"):
        server: LfsServer = request.getfixturevalue("lfs_server")
        url = server.repo_url()
        run_git("config", "--global", "mgit.store", "lfs", cwd=tmp_path)
        return Remote(path=server.git_root / "org" / "repo.git", url=url, store="lfs")
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    run_git("config", "--global", "mgit.store", bucket.url(), cwd=tmp_path)
    bare = init_bare_remote(tmp_path / "remote.git")
    return Remote(path=bare.path, url=bare.url, store="s3")
