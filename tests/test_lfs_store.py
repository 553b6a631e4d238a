"""The Git LFS blob store against a real LFS server (giftless) on loopback.

Endpoint discovery follows git-lfs rule by rule; transfers go through the
Batch API with credentials from git's credential helper only; what the
server holds is never sent again; a corrupt object is never yielded; faults
from a proxy in front of the server are retried until the bytes arrive whole.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from git_mgit.gitcmd import find_repo
from git_mgit.transfer.stores.blobs import IDLE, BlobStoreError, Pieces, Pointer
from git_mgit.transfer.stores.choice import choose
from git_mgit.transfer.stores.lfs import LfsStore, auth, endpoint_for, may_send_credentials
from git_mgit.transfer.stores.lfs import store as lfs_store
from git_mgit.transfer.stores.lfs.api import BatchApi
from git_mgit.transfer.stores.lfs.auth import Access, AccessModes
from git_mgit.transfer.stores.lfs.connections import Pool
from git_mgit.transfer.stores.lfs.creds import GitCredentials
from git_mgit.transfer.stores.lfs.endpoint import Endpoint, SshTarget
from git_mgit.transfer.stores.lfs.gitconfig import LfsConfig
from git_mgit.transfer.stores.lfs.http import Http, Timeouts, read_body, read_object
from git_mgit.transfer.stores.lfs.httpconfig import HttpConfig
from git_mgit.transfer.stores.lfs.retry import RetryPolicy, Transient
from git_mgit.transfer.stores.lfs.sshauth import ssh_argv
from git_mgit.transfer.stores.registry import Opening
from tests.gitsandbox import commit_files, init_repo, run_git
from tests.servers.faults import FaultProxy
from tests.servers.lfs import LfsServer

MiB = 1 << 20


@pytest.fixture(autouse=True)
def fresh_process_memory() -> Iterator[None]:
    """Each test starts as a new process would: no credentials remembered."""
    auth.forget()
    yield
    auth.forget()


def blobs(*sizes: int) -> dict[Pointer, bytes]:
    datas = [os.urandom(n) for n in sizes]
    return {Pointer.of(d): d for d in datas}


def store_for(repo_dir: Path, remote: str = "origin") -> LfsStore:
    store = LfsStore.for_remote(find_repo(repo_dir), remote)
    assert store is not None
    return store


@pytest.fixture
def lfs_repo(lfs_server: LfsServer, workrepo: Path) -> Path:
    """A working repository whose origin is the server's org/repo (LFS found from its URL)."""
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=workrepo)
    return workrepo


# -- endpoint discovery ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "api", "ssh", "known"),
    [
        (
            "https://huggingface.co/org/model",
            "https://huggingface.co/org/model.git/info/lfs",
            None,
            True,
        ),
        (
            "https://git.example.org/g/r.git/",
            "https://git.example.org/g/r.git/info/lfs",
            None,
            False,
        ),
        ("git://example.org/r.git", "https://example.org/r.git/info/lfs", None, False),
        (
            "ssh://git@ssh.github.com:443/org/repo.git",
            "https://ssh.github.com/org/repo.git/info/lfs",
            SshTarget("git@ssh.github.com", "443", "/org/repo.git"),
            True,
        ),
        (
            "git@gitlab.com:team/model",
            "https://gitlab.com/team/model.git/info/lfs",
            SshTarget("git@gitlab.com", None, "team/model"),
            True,
        ),
    ],
)
def test_endpoint_is_derived_from_the_remote_url(
    workrepo: Path, url: str, api: str, ssh: SshTarget | None, known: bool
) -> None:
    run_git("remote", "add", "origin", url, cwd=workrepo)
    endpoint = endpoint_for(find_repo(workrepo), "origin")
    assert endpoint is not None
    assert (endpoint.url, endpoint.ssh, endpoint.known_host) == (api, ssh, known)
    assert not endpoint.configured and endpoint.source == "the URL of remote origin"


def test_local_remotes_have_no_endpoint(workrepo: Path, bare_remote) -> None:
    repo = find_repo(workrepo)
    run_git("remote", "add", "file", bare_remote.url, cwd=workrepo)
    run_git("remote", "add", "path", str(bare_remote.path), cwd=workrepo)
    assert endpoint_for(repo, "file") is None
    assert endpoint_for(repo, "path") is None
    assert endpoint_for(repo, "no-such-remote") is None


def test_configured_urls_win_in_git_lfs_order(workrepo: Path) -> None:
    repo = find_repo(workrepo)

    def config(key: str, value: str) -> None:
        repo.git("config", key, value)  # through the Repo: its config snapshot is read again

    config("remote.origin.url", "https://example.org/team/model")
    config("remote.origin.pushurl", "https://push.example.org/team/model")
    derived = endpoint_for(repo, "origin", "upload")
    assert derived is not None and derived.url == "https://push.example.org/team/model.git/info/lfs"

    config("remote.origin.lfsurl", "https://lfs.example.org/remote")
    found = endpoint_for(repo, "origin")
    assert found is not None and found.configured
    assert (found.url, found.source) == (
        "https://lfs.example.org/remote",
        "remote.origin.lfsurl in git config",
    )
    config("lfs.url", "https://lfs.example.org/global")  # git-lfs: lfs.url before remote's
    config("lfs.pushurl", "https://lfs.example.org/push")
    assert endpoint_for(repo, "origin").url == "https://lfs.example.org/global"  # type: ignore[union-attr]
    assert endpoint_for(repo, "origin", "upload").url == "https://lfs.example.org/push"  # type: ignore[union-attr]


def test_lfsconfig_is_read_from_the_tree_and_git_config_wins(workrepo: Path) -> None:
    repo = find_repo(workrepo)
    run_git("remote", "add", "origin", "https://example.org/team/model", cwd=workrepo)
    lfsconfig = '[lfs]\n\turl = https://lfs.example.org/committed\n[remote "origin"]\n\turl = https://evil.example.org/x\n'
    commit_files(workrepo, {".lfsconfig": lfsconfig}, "lfs config")
    found = endpoint_for(repo, "origin")
    assert found is not None
    assert (found.url, found.source) == (
        "https://lfs.example.org/committed",
        "lfs.url in .lfsconfig",
    )
    assert found.remote_url == "https://example.org/team/model"  # remote.*.url there is ignored

    (workrepo / ".lfsconfig").unlink()  # still in the index and in HEAD
    assert endpoint_for(repo, "origin").url == "https://lfs.example.org/committed"  # type: ignore[union-attr]
    run_git("add", "-A", cwd=workrepo)
    commit_files(workrepo, {".lfsconfig": lfsconfig.replace("committed", "head")}, "lfs v2")
    run_git("rm", "-q", "--cached", ".lfsconfig", cwd=workrepo)
    (workrepo / ".lfsconfig").unlink()  # only in HEAD now
    assert endpoint_for(repo, "origin").url == "https://lfs.example.org/head"  # type: ignore[union-attr]
    run_git("commit", "-qm", "no lfs config", cwd=workrepo)  # in none of the three
    assert endpoint_for(repo, "origin").url == "https://example.org/team/model.git/info/lfs"  # type: ignore[union-attr]

    repo.git("config", "lfs.url", "https://lfs.example.org/local")
    found = endpoint_for(repo, "origin")
    assert found is not None
    assert (found.url, found.source) == ("https://lfs.example.org/local", "lfs.url in git config")


def test_insteadof_rewrites_the_remote_url_first(workrepo: Path) -> None:
    run_git("config", "url.https://hf.example.org/.insteadOf", "hf:", cwd=workrepo)
    run_git("remote", "add", "origin", "hf:org/model", cwd=workrepo)
    found = endpoint_for(find_repo(workrepo), "origin")
    assert found is not None and found.url == "https://hf.example.org/org/model.git/info/lfs"


def test_ssh_program_is_chosen_as_git_chooses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    target = SshTarget("git@host.example", "2222", "org/repo")
    config = LfsConfig({"core.sshcommand": ["configured-ssh -v"]})
    cmd = "git-lfs-authenticate org/repo download"
    for var in ("GIT_SSH_COMMAND", "GIT_SSH", "GIT_SSH_VARIANT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_SSH", "/opt/bin/plink")
    shell = ["sh", "-c", 'configured-ssh -v "$@"', "configured-ssh -v"]
    assert ssh_argv(config, target, cmd) == [*shell, "-p", "2222", "git@host.example", cmd]
    assert ssh_argv(LfsConfig(), target, cmd) == [
        *["/opt/bin/plink", "-P", "2222"],
        *["git@host.example", cmd],
    ]
    monkeypatch.setenv("GIT_SSH_COMMAND", "env-ssh")
    assert ssh_argv(config, target, cmd)[:4] == ["sh", "-c", 'env-ssh "$@"', "env-ssh"]


def test_ssh_host_that_looks_like_an_option_is_refused(workrepo: Path) -> None:
    run_git("remote", "add", "origin", "ssh://-oProxyCommand=touch%20x/repo", cwd=workrepo)
    with pytest.raises(BlobStoreError, match="refusing ssh host"):
        endpoint_for(find_repo(workrepo), "origin")


# -- transfers -------------------------------------------------------------------------


def test_upload_then_download_is_byte_exact(lfs_server: LfsServer, lfs_repo: Path) -> None:
    objects = blobs(0, 1, 1000, 3 * MiB + 7)
    store = store_for(lfs_repo)
    assert store.describe() == f"Git LFS at {lfs_server.lfs_url()}"
    assert sorted(store.missing(list(objects))) == sorted(p for p in objects if p.size)
    moved: list[int] = []
    threads: set[str] = set()

    def progress(n: int) -> None:
        moved.append(n)
        threads.add(threading.current_thread().name)

    assert store.upload(list(objects), objects.__getitem__, progress) == 3
    assert sum(moved) == sum(p.size for p in objects)
    assert threads == {"MainThread"}
    for pointer, data in objects.items():
        if pointer.size:
            assert lfs_server.stored(pointer.oid).read_bytes() == data
    assert store.missing(list(objects)) == []

    moved.clear()
    got = dict(store.download(list(objects), progress))
    assert got == objects
    assert sum(moved) == sum(p.size for p in objects)
    assert threads == {"MainThread"}
    store.close()


def test_an_object_the_server_holds_is_not_sent_again(
    lfs_server: LfsServer, lfs_repo: Path
) -> None:
    first, second = blobs(2000), blobs(3000)
    store = store_for(lfs_repo)
    assert store.upload(list(first), first.__getitem__) == 1
    both = {**first, **second}
    assert store.upload(list(both), both.__getitem__) == 1
    assert store.upload(list(both), both.__getitem__) == 0
    assert sorted(lfs_server.uploads()) == sorted(p.oid for p in both)


def test_batches_hold_at_most_100_objects(lfs_server: LfsServer, lfs_repo: Path) -> None:
    objects = blobs(*([100] * 150))
    store = store_for(lfs_repo)
    store.missing([])  # nothing to ask: no request

    def batches() -> int:
        return sum(
            h.method == "POST" and h.path.endswith("/objects/batch") and h.status == 200
            for h in lfs_server.requests
        )

    assert store.upload(list(objects), objects.__getitem__) == 150
    assert batches() == 2
    assert dict(store.download(list(objects))) == objects
    assert batches() == 4
    assert len(lfs_server.uploads()) == 150


def test_a_download_asks_for_the_next_batch_while_this_one_transfers(
    lfs_server: LfsServer, lfs_repo: Path
) -> None:
    """The second batch request goes out while the first batch's objects are still being
    taken: no transfer slot waits for a batch round trip between two batches."""
    objects = blobs(*([100] * 150))
    store = store_for(lfs_repo)
    assert store.upload(list(objects), objects.__getitem__) == 150
    asked_before = len(lfs_server.requests)

    def batches() -> int:
        return sum(
            h.path.endswith("/objects/batch") and h.status == 200
            for h in lfs_server.requests[asked_before:]
        )

    downloads = store.download(list(objects))
    got = dict([next(downloads)])  # 1 of the first batch's 100 taken; at most 8 more running
    deadline = time.monotonic() + 30
    while batches() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert batches() == 2
    got.update(downloads)
    assert got == objects
    assert batches() == 2


def test_an_upload_fed_lazily_starts_before_the_last_object_is_known(
    lfs_server: LfsServer, lfs_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a push hashes its objects: each batch request is sent once it names
    _CHUNK_BYTES, while later pointers are still being computed."""
    monkeypatch.setattr(lfs_store, "_CHUNK_BYTES", 2 * MiB)
    objects = blobs(MiB, MiB, MiB, MiB, 3000)
    seen_batches: list[int] = []

    def hashed() -> Iterator[Pointer]:
        for pointer in objects:
            asked = [h for h in lfs_server.requests if h.path.endswith("/objects/batch")]
            seen_batches.append(sum(h.status == 200 for h in asked))
            yield pointer

    def pieces(p: Pointer) -> Pieces:  # the bytes as views, as a pack gives them
        view = memoryview(objects[p])
        return Pieces([view[:65535], view[65535:]])

    assert store_for(lfs_repo).upload(hashed(), pieces) == 5
    assert seen_batches == [0, 0, 1, 1, 2]
    for pointer, data in objects.items():
        assert lfs_server.stored(pointer.oid).read_bytes() == data


def test_an_idle_feed_sends_what_is_ready_at_once(lfs_server: LfsServer, lfs_repo: Path) -> None:
    """IDLE (a push still encoding the next object) cuts the batch short: the objects
    hashed so far are asked for and sent before the next one is known."""
    objects = blobs(3000, 4000, 5000)
    first, *rest = objects
    asked_before: list[int] = []

    def batches() -> int:
        return sum(
            h.path.endswith("/objects/batch") and h.status == 200 for h in lfs_server.requests
        )

    def hashed() -> Iterator[Pointer | None]:
        yield IDLE  # nothing ready yet: nothing to ask
        yield first
        yield IDLE
        asked_before.append(batches())
        yield from rest

    assert store_for(lfs_repo).upload(hashed(), objects.__getitem__) == 3
    assert asked_before == [1] and batches() == 2
    assert sorted(lfs_server.uploads()) == sorted(p.oid for p in objects)


def test_a_corrupt_stored_object_is_never_yielded(lfs_server: LfsServer, lfs_repo: Path) -> None:
    objects = blobs(MiB)
    (pointer,) = objects
    store = store_for(lfs_repo)
    store.upload([pointer], objects.__getitem__)
    stored = lfs_server.stored(pointer.oid)
    damaged = bytearray(stored.read_bytes())
    damaged[12345] ^= 0x40
    stored.write_bytes(bytes(damaged))
    yielded = []
    with pytest.raises(BlobStoreError) as failure:
        yielded.extend(store.download([pointer]))
    assert yielded == []
    message = str(failure.value)
    assert "corrupt object sha256:" + pointer.oid[:12] in message
    assert lfs_server.lfs_url() in message and "\n" not in message


def test_an_object_body_is_read_whole_or_found_short_or_long() -> None:
    """read_object receives a body of the expected length straight into one buffer: one
    byte more than asked shows a body too long; a connection that ends early is Transient
    (retried), and a whole body leaves the connection for the next request, which one with
    bytes left unread cannot carry."""
    data = os.urandom(MiB + 3)
    ports: list[int] = []  # the client's end of the connection, per request

    class Serve(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            ports.append(self.client_address[1])
            body = data + b"more" if self.path == "/long" else data
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if self.path == "/short" else body)
            if self.path == "/short":
                self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pool = Pool(1, 5.0, 5.0)  # one connection: a request waits for the last one's release
    base = f"http://127.0.0.1:{server.server_port}"

    def get(path: str) -> bytes:
        return bytes(
            read_object(pool.request("GET", base + path, None, {}), base + path, len(data))
        )

    try:
        assert get("/whole") == data
        assert get("/long") == data + b"m"  # size + 1: the caller's check refuses it
        assert ports[1] == ports[0]  # kept alive after a whole body
        with pytest.raises(Transient):
            get("/short")
        assert ports[2] != ports[1]  # not after bytes were left unread
        assert get("/whole") == data
        assert get("/whole") == data
        assert ports[3] != ports[2] and ports[4] == ports[3]  # the server closed the short one
        # a pointer (a remote's refs say it) claiming a petabyte takes no memory ahead: the
        # body that came is read as it is, and the caller's check refuses its size
        claimed = read_object(pool.request("GET", base + "/whole", None, {}), base, 1 << 50)
        assert bytes(claimed) == data
    finally:
        server.shutdown()
        server.server_close()
        pool.close()


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no CA signed, and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    request += ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    paths = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(["openssl", *request, *paths], check=True, capture_output=True)
    return cert, key


def test_https_verifies_the_server_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTPS the client checks the server's certificate against the system's CAs: one
    no CA signed is refused at once, in one line; the same one, trusted (as git trusts it),
    is accepted and its connection kept alive."""
    cert, key = _self_signed(tmp_path)
    ports: list[int] = []

    class Serve(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            ports.append(self.client_address[1])
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_port}/x"
    try:
        untrusting = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0))
        with pytest.raises(BlobStoreError, match="certificate is not trusted") as failure:
            untrusting.send("GET", url, headers={})
        assert "\n" not in str(failure.value)
        untrusting.close()
        monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))  # git's CA file, over http.sslCAInfo
        trusting = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0))
        for _ in range(2):
            assert read_body(trusting.send("GET", url, headers={}), url) == b"ok"
        assert len(ports) == 2 and ports[0] == ports[1]
        trusting.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("sizes", [[65535] * 70 + [17], [3, 5 * MiB, 65535, 4 * MiB, 1, 0]])
def test_pieces_come_out_in_runs_of_the_same_bytes(sizes: list[int]) -> None:
    """Pieces are hashed and sent in runs of about 4 MiB (copies of small pieces, large
    ones as they are), the same bytes in the same order, afresh at every iteration."""
    data = os.urandom(sum(sizes))
    cuts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    read_whole = []
    views = [memoryview(data)[a:b] for a, b in itertools.pairwise(cuts)]
    pieces = Pieces(views, done=lambda: read_whole.append(1))
    for n in range(2):
        runs = []
        for run in pieces:
            assert len(read_whole) == n  # told only once the last run was taken
            runs.append(bytes(run))
        assert len(read_whole) == n + 1
        assert b"".join(runs) == data
        assert all(len(run) <= 4 * MiB or len(run) in sizes for run in runs)
        assert len(runs) <= 2 * (len(data) // (4 * MiB)) + 3
    assert pieces.joined() == data and len(read_whole) == 3
    assert Pointer.of(Pieces(views)) == Pointer.of(data)


def test_a_pieces_body_is_sent_whole_again_after_a_redirect(tmp_path: Path) -> None:
    """A PUT's body is sent again to where a 307 points, every byte of it."""
    data = os.urandom(9 * MiB + 5)
    got: list[bytes] = []

    class Serve(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/first":
                self.send_response(307)
                self.send_header("Location", "/second")
            else:
                got.append(body)
                self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts())
    view = memoryview(data)
    pieces = Pieces([view[i : i + 65535] for i in range(0, len(data), 65535)])
    try:
        url = f"http://127.0.0.1:{server.server_port}/first"
        headers = {"Content-Length": str(len(data))}
        response = http.send("PUT", url, headers=headers, body=pieces)
        assert response.status == 200
        response.drain()
        assert got == [data]
    finally:
        server.shutdown()
        server.server_close()
        http.close()


def test_a_missing_object_is_named(lfs_server: LfsServer, lfs_repo: Path) -> None:
    present, absent = blobs(100), blobs(200, 300)
    store = store_for(lfs_repo)
    store.upload(list(present), present.__getitem__)
    for asked in ([*present, *absent], list(absent)):  # some there (200 + errors), none (404)
        with pytest.raises(BlobStoreError, match=r"would not give object sha256:[0-9a-f]{12}"):
            list(store.download(asked))
    assert sorted(store.missing([*present, *absent])) == sorted(absent)


# -- credentials -----------------------------------------------------------------------


def test_wrong_password_is_one_line_and_rejected(
    lfs_server: LfsServer, lfs_repo: Path, tmp_path: Path
) -> None:
    helper_file = tmp_path / "git-credentials"
    lfs_server.store_credentials(helper_file, password="not-the-password")
    objects = blobs(100)
    with pytest.raises(BlobStoreError) as failure:
        store_for(lfs_repo).upload(list(objects), objects.__getitem__)
    message = str(failure.value)
    assert "refused the credentials" in message and "git credential reject" in message
    assert "\n" not in message
    assert "not-the-password" not in message and lfs_server.password not in message
    assert helper_file.read_text() == ""  # git credential reject erased them from the store


def test_a_server_that_asked_for_credentials_gets_them_first_in_the_next_process(
    lfs_server: LfsServer, workrepo: Path, tmp_path: Path
) -> None:
    """After a 401 and a success, the repository remembers that the URL asks (the URL only,
    in .git/mgit/lfs-access); the next process sends credentials with its first request.
    A repository where git-lfs learnt the same (`lfs.<endpoint>.access basic`) does too."""
    objects = blobs(100, 200)
    with FaultProxy(lfs_server.url) as proxy:
        lfs_server.store_credentials(tmp_path / "creds", also=(proxy.url,))
        url = f"{proxy.url}/org/repo.git"
        run_git("remote", "add", "origin", url, cwd=workrepo)

        def refused() -> int:
            return sum(1 for r in proxy.requests if r.status == 401)

        store = store_for(workrepo)
        assert store.upload(list(objects), objects.__getitem__) == 2
        store.close()
        assert refused() == 1  # asked without credentials first, as git-lfs does
        remembered = (workrepo / ".git" / "mgit" / "lfs-access").read_text()
        assert remembered == f"{url}\n" and lfs_server.password not in remembered
        for _ in range(2):
            auth.forget()  # a new process
            store = store_for(workrepo)
            assert dict(store.download(list(objects))) == objects
            store.close()
        assert refused() == 1

        other = init_repo(tmp_path / "other")
        run_git("remote", "add", "origin", url, cwd=other)
        auth.forget()
        store_for(other).missing(list(objects))
        assert refused() == 2  # nothing known here: asked without credentials first
        run_git("config", f"lfs.{url}/info/lfs.access", "basic", cwd=other)
        (other / ".git" / "mgit" / "lfs-access").unlink()
        auth.forget()
        assert store_for(other).missing(list(objects)) == []
        assert refused() == 2


def test_a_push_opens_its_lfs_store_while_the_remote_lists(
    lfs_server: LfsServer, workrepo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a push's Opening does before any request: it finds the endpoint, fills the
    credentials a helper has for a server known to ask, and connects; the first batch
    request then carries them (no 401). It never prompts: with no helper, askpass is not
    run ahead, and the first request asks the usual way."""
    objects = blobs(100, 200)
    log = tmp_path / "helper.log"
    with FaultProxy(lfs_server.url) as proxy:
        lfs_server.store_credentials(tmp_path / "creds", also=(proxy.url,))
        helper = (
            f"!f() {{ echo $1 >>{log}; git credential-store --file={tmp_path / 'creds'} $1; }}; f"
        )
        run_git("config", "--global", "credential.helper", helper, cwd=workrepo)
        url = f"{proxy.url}/org/repo.git"
        run_git("remote", "add", "origin", url, cwd=workrepo)
        run_git("config", "mgit.store", "lfs", cwd=workrepo)
        (workrepo / ".git" / "mgit").mkdir()
        (workrepo / ".git" / "mgit" / "lfs-access").write_text(f"{url}\n")  # known to ask
        repo = find_repo(workrepo)
        choice = choose(repo, "origin")
        assert choice.kind == "lfs"

        store = Opening(repo, "origin", "upload").take(choice.url)
        assert store is not None
        assert log.read_text() == "get\n" and proxy.requests == []
        for _ in range(200):  # the proxy counts a connection on the thread that serves it
            if proxy.connections:
                break
            time.sleep(0.01)
        assert proxy.connections == 1
        assert store.upload(list(objects), objects.__getitem__) == 2
        store.close()
        assert all(r.status == 200 for r in proxy.requests)  # none refused: no 401 first
        assert log.read_text() == "get\nstore\n"  # approved, never filled twice

        auth.forget()  # a new process (a Repo of its own), with no helper: a person is asked
        run_git("config", "--global", "--unset", "credential.helper", cwd=workrepo)
        asked = tmp_path / "askpass.log"
        askpass = tmp_path / "askpass"
        askpass.write_text(
            f'#!/bin/sh\necho "$1" >>{asked}\n'
            f'case "$1" in Username*) echo {lfs_server.username};; '
            f"*) echo {lfs_server.password};; esac\n"
        )
        askpass.chmod(0o700)
        monkeypatch.setenv("GIT_ASKPASS", str(askpass))
        store = Opening(find_repo(workrepo), "origin", "upload").take(choice.url)
        assert store is not None and not asked.exists()  # not prompted ahead
        assert store.missing(list(objects)) == []
        store.close()
        assert asked.read_text().count("\n") == 2  # asked when the request needed them


def test_no_credential_helper_fails_at_once(lfs_server: LfsServer, lfs_repo: Path) -> None:
    run_git("config", "--global", "--unset", "credential.helper", cwd=lfs_repo)
    objects = blobs(100)
    with pytest.raises(BlobStoreError, match="no git credential helper gave any"):
        store_for(lfs_repo).upload(list(objects), objects.__getitem__)


_SCRIPT = """
import os, sys
from git_mgit.gitcmd import find_repo
from git_mgit.transfer.stores.blobs import BlobStoreError, Pointer
from git_mgit.transfer.stores.lfs import LfsStore
data = os.urandom(70000)
pointer = Pointer.of(data)
store = LfsStore.for_remote(find_repo(sys.argv[1]), "origin")
try:
    store.upload([pointer], lambda p: data)
    assert dict(store.download([pointer])) == {pointer: data}
    print("round trip ok")
except BlobStoreError as exc:
    print(exc)
"""


def test_the_password_never_shows_in_output_or_traces(
    lfs_server: LfsServer, lfs_repo: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "GIT_TRACE": "1", "GIT_CURL_VERBOSE": "1", "GIT_TRACE_CURL": "1"}
    secrets_ = [lfs_server.password, "wrong-password-123"]
    secrets_ += [base64.b64encode(f"{lfs_server.username}:{s}".encode()).decode() for s in secrets_]

    def run(*argv: str) -> str:
        proc = subprocess.run(argv, cwd=lfs_repo, env=env, capture_output=True, text=True)
        return proc.stdout + proc.stderr

    outputs = [run(sys.executable, "-c", _SCRIPT, str(lfs_repo))]
    outputs.append(run("git", "ls-remote", "origin"))
    lfs_server.store_credentials(tmp_path / "git-credentials", password="wrong-password-123")
    outputs.append(run(sys.executable, "-c", _SCRIPT, str(lfs_repo)))
    assert "round trip ok" in outputs[0] and "trace git-mgit lfs: PUT" in outputs[0]
    assert "refused the credentials" in outputs[2]
    for output in outputs:
        for secret in secrets_:
            assert secret not in output


def _traced(path: Path) -> list[str]:
    """git-mgit's own lines in a GIT_TRACE file (git's lines quote its argv)."""
    return [line for line in path.read_text().splitlines() if "trace git-mgit" in line]


def test_a_token_as_the_remotes_username_stays_out_of_errors_traces_and_files(
    tmp_path: Path, workrepo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`https://TOKEN@host/org/repo.git`, as GitHub's and the Hub's users write it: git
    credential is asked with that username, and nothing else sees it: not the refusal's
    message, not GIT_TRACE, not .git/mgit/lfs-access (which keeps the URL without it, and
    loses it where an earlier git-mgit wrote it)."""
    token = f"ghp_{secrets.token_hex(12)}"
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with LfsServer(tmp_path / "server", token, "the-password") as server:
        server.store_credentials(tmp_path / "creds")
        url = server.repo_url().replace("://", f"://{token}@", 1)
        run_git("remote", "add", "origin", url, cwd=workrepo)
        remembered = workrepo / ".git" / "mgit" / "lfs-access"
        remembered.parent.mkdir(parents=True)
        remembered.write_text(f"{url}\n")  # as git-mgit wrote it before
        trace = tmp_path / "trace.log"
        monkeypatch.setenv("GIT_TRACE", str(trace))
        objects = blobs(100)
        store = store_for(workrepo)
        assert remembered.read_text() == f"{server.repo_url()}\n"
        assert store.upload(list(objects), objects.__getitem__) == 1
        store.close()
        assert not [h for h in server.requests if h.status == 401]  # known to ask: sent at once

        server.store_credentials(tmp_path / "creds", password="not-the-password")
        auth.forget()
        with pytest.raises(BlobStoreError, match="refused the credentials") as failure:
            store_for(workrepo).missing(list(objects))
    message = str(failure.value)
    assert "\n" not in message
    assert any("filled credentials for" in line for line in _traced(trace))
    written = [p.read_text() for p in (workrepo / ".git" / "mgit").rglob("*") if p.is_file()]
    for text in [message, *_traced(trace), *written]:
        assert token not in text


def test_credentials_are_keyed_by_origin_with_the_default_port_made_explicit(
    tmp_path: Path,
) -> None:
    """https://h and https://h:443 are one origin: storage hrefs there, either way, share one
    credential URL (the origin: no user, path or query); the remote's URL serves an LFS URL
    that spells the port out; the access file keeps each URL once, without its user."""
    endpoint = Endpoint(
        "https://lfs.example/org/repo.git/info/lfs",
        False,
        "lfs.url",
        "https://tok3n@lfs.example:443/org/repo.git",
    )
    http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts())
    api = BatchApi(endpoint, http, RetryPolicy(), None, "Git LFS")
    storage = ["https://S3.example:443/b/1?X-Amz-Signature=s1", "https://u@s3.example/b/2"]
    assert {api.credential_url(href) for href in storage} == {"https://s3.example"}
    batch_url = "https://lfs.example:443/org/repo.git/info/lfs/objects/batch"
    assert api.credential_url(batch_url) == "https://tok3n@lfs.example:443/org/repo.git"
    modes = AccessModes(tmp_path / "lfs-access")
    modes.remember(api.credential_url(batch_url))
    modes.remember("https://lfs.example/org/repo.git")
    assert (tmp_path / "lfs-access").read_text() == "https://lfs.example/org/repo.git\n"
    assert AccessModes(tmp_path / "lfs-access").asks("https://other@lfs.example/org/repo.git")


class _Redirector(BaseHTTPRequestHandler):
    """Asks for Basic credentials, then redirects to `server.target` (another host)."""

    protocol_version = "HTTP/1.1"
    server: _RecordingServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        authorization = self.headers.get("Authorization")
        self.server.seen.append(authorization)
        self.send_response(
            (307 if authorization else 401) if self.server.target else 404, "see seen"
        )
        if self.server.target:
            self.send_header("Location", self.server.target + self.path)
        self.send_header("WWW-Authenticate", 'Basic realm="r"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class _RecordingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, target: str | None) -> None:
        super().__init__(("127.0.0.1", 0), _Redirector)
        self.target, self.seen = target, []
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_redirect_to_another_host_drops_authorization(
    lfs_server: LfsServer, workrepo: Path, tmp_path: Path
) -> None:
    other = _RecordingServer(None)
    front = _RecordingServer(f"http://localhost:{other.server_address[1]}")
    try:
        front_url = f"http://127.0.0.1:{front.server_address[1]}"
        lfs_server.store_credentials(tmp_path / "git-credentials", also=(front_url,))
        run_git("config", "lfs.url", f"{front_url}/org/repo.git/info/lfs", cwd=workrepo)
        run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=workrepo)
        objects = list(blobs(10))
        assert store_for(workrepo).missing(objects) == objects  # the other host: 404
        assert front.seen[0] is None and front.seen[1].startswith("Basic ")  # type: ignore[union-attr]
        assert other.seen == [None]
    finally:
        for server in (front, other):
            server.shutdown()
            server.server_close()


class _Hops(BaseHTTPRequestHandler):
    """`/hop/N`: 401 without credentials, else a redirect to `/hop/N-1`; `/hop/0` is 200."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        hops = int(self.path.rsplit("/", 1)[1])
        if not self.headers.get("Authorization"):
            status, extra = 401, ("WWW-Authenticate", 'Basic realm="r"')
        elif hops:
            status, extra = 307, ("Location", f"/hop/{hops - 1}")
        else:
            status, extra = 200, ("X-Hops", "0")
        self.send_response(status)
        self.send_header(*extra)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_401_answered_with_credentials_is_no_redirect(
    lfs_server: LfsServer, tmp_path: Path
) -> None:
    """Five redirects are followed after the server asked for credentials; a sixth is one
    line."""
    with _credentialed(_Hops, lfs_server, tmp_path) as (url, http):
        response = http.send("GET", f"{url}/hop/5", headers={}, cred_url=f"{url}/")
        assert response.status == 200
        response.drain()
        with pytest.raises(BlobStoreError, match="more than 5 redirects"):
            http.send("GET", f"{url}/hop/6", headers={}, cred_url=f"{url}/")


@contextlib.contextmanager
def _credentialed(
    handler: type[BaseHTTPRequestHandler],
    lfs_server: LfsServer,
    tmp_path: Path,
    config: Callable[[str], HttpConfig] = lambda url: HttpConfig([]),
) -> Iterator[tuple[str, Http]]:
    """`handler` served on loopback, git's credential helper holding the test server's
    password for it, and a client (`config`: its http.* settings, given the URL)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    lfs_server.store_credentials(tmp_path / "git-credentials", also=(url,))
    http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), config(url))
    try:
        yield url, http
    finally:
        http.close()
        server.shutdown()
        server.server_close()


class _PathScoped(BaseHTTPRequestHandler):
    """`/a`: 401 without credentials, else a redirect to `/ci/b`, which records the
    Authorization headers it was sent."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[list[str]]] = []

    def do_GET(self) -> None:
        given = self.headers.get_all("Authorization") or []
        if self.path != "/a":
            self.seen.append(given)
            self.send_response(200)
        elif given:
            self.send_response(307)
            self.send_header("Location", "/ci/b")
        else:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="r"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_path_scoped_extra_authorization_replaces_gits_credentials_after_a_redirect(
    lfs_server: LfsServer, tmp_path: Path
) -> None:
    """git's credentials open `/a`, which redirects into `/ci/`, where `http.<url>/ci/`'s
    extraHeader carries its own Authorization: that one alone is sent there."""

    def scoped(url: str) -> HttpConfig:
        return HttpConfig([(f"http.{url}/ci/.extraheader", "AUTHORIZATION: Bearer ci-token")])

    with _credentialed(_PathScoped, lfs_server, tmp_path, scoped) as (url, http):
        http.send("GET", f"{url}/a", headers={}, cred_url=f"{url}/").drain()
    assert _PathScoped.seen == [["Bearer ci-token"]]


def test_credentials_go_over_https_or_to_loopback_only(tmp_path: Path) -> None:
    allowed = ["https://example.org/x", "http://127.0.0.1:8080/x", "http://127.4.5.6/x"]
    allowed += ["http://localhost/x", "http://[::1]:9/x"]
    refused = ["http://example.org/x", "http://10.1.2.3/x", "http://127.0.0.1.example.org/x"]
    refused += ["ftp://127.0.0.1/x"]
    assert all(may_send_credentials(u) for u in allowed)
    assert not any(may_send_credentials(u) for u in refused)
    http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts())
    with pytest.raises(BlobStoreError, match="refusing to send credentials over plain http"):
        # Refused before any connection is made: no traffic leaves this machine.
        http.send("GET", "http://lfs.example.org/o?jwt=t0ken", headers={"Authorization": "x"})
    # loopback, but through a proxy on another machine: the bytes would cross the network
    proxied = HttpConfig([("http.proxy", "http://proxy.example.org:3128")], env={})
    http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(), proxied)
    with pytest.raises(BlobStoreError, match="through a proxy"):
        http.send("GET", "http://127.0.0.1:9/o", headers={"Authorization": "x"})


class _AsksAlways(BaseHTTPRequestHandler):
    """401 to every request; records the Authorization headers it was sent."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[str | None]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="r"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    log_message = _PathScoped.log_message


def test_a_url_that_decodes_into_lines_of_its_own_gets_no_credentials(
    workrepo: Path, tmp_path: Path
) -> None:
    """A committed .lfsconfig whose lfs.url holds `%0ahost=<another host>` would add that
    line to what git credential is asked, and get that host's password back for the URL's
    own server (git's CVE-2020-5260, git-lfs's CVE-2024-53263): it is refused instead."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AsksAlways)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store_file = tmp_path / "git-credentials"
        store_file.write_text("https://victim:github-s3cret@github.example\n")
        helper = f"store --file={store_file}"
        run_git("config", "--global", "credential.helper", helper, cwd=workrepo)
        url = f"http://127.0.0.1:{server.server_port}/x%0aprotocol=https%0ahost=github.example"
        commit_files(workrepo, {".lfsconfig": f"[lfs]\n\turl = {url}\n"}, "lfs.url")
        run_git("remote", "add", "origin", "https://github.example/org/model.git", cwd=workrepo)
        with pytest.raises(BlobStoreError) as failed:
            store_for(workrepo).missing(list(blobs(10)))
        message = str(failed.value)
        assert "line break" in message and "\n" not in message and "s3cret" not in message
        assert _AsksAlways.seen == [None]  # asked once, answered with nothing
    finally:
        server.shutdown()
        server.server_close()


class _ChunkedGitLab(BaseHTTPRequestHandler):
    """A Batch API whose upload actions carry the framing headers GitLab's do
    (`Transfer-Encoding: chunked`), a wrong `content-length` and `Host`, and the storage
    they point to, which records what each PUT was sent."""

    protocol_version = "HTTP/1.1"
    puts: ClassVar[list[tuple[dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        base = f"http://127.0.0.1:{self.server.server_address[1]}"  # type: ignore[index]
        header = {"Transfer-Encoding": "chunked", "content-length": "5", "Host": "elsewhere"}
        header["content-type"] = "application/x-model"
        objects = [
            {**o, "actions": {"upload": {"href": f"{base}/o/{o['oid']}", "header": header}}}
            for o in asked["objects"]
        ]
        self._reply(200, json.dumps({"objects": objects}).encode())

    def do_PUT(self) -> None:
        sent = {k.lower(): v for k, v in self.headers.items()}
        body = self.rfile.read(int(sent["content-length"])) if "content-length" in sent else b""
        self.puts.append((sent, body))
        self._reply(200, b"")

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_framing_headers_an_action_carries_are_left_out(workrepo: Path) -> None:
    """The body goes out framed by its own Content-Length: an action's `Transfer-Encoding:
    chunked` (GitLab's uploads) or `Content-Length` would make the server misread it, so
    they are not sent (as git-lfs's Go client does not send them); an action's own
    `content-type` replaces the default one, whatever its case."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChunkedGitLab)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run_git("config", "lfs.url", f"http://127.0.0.1:{server.server_port}/r", cwd=workrepo)
        run_git("remote", "add", "origin", "https://git.example/r.git", cwd=workrepo)
        objects = blobs(1200, 70000)
        assert store_for(workrepo).upload(list(objects), objects.__getitem__) == 2
        assert sorted(body for _, body in _ChunkedGitLab.puts) == sorted(objects.values())
        for sent, body in _ChunkedGitLab.puts:
            assert "transfer-encoding" not in sent and sent["content-length"] == str(len(body))
            assert sent["host"] == f"127.0.0.1:{server.server_port}"
            assert sent["content-type"] == "application/x-model"
    finally:
        server.shutdown()
        server.server_close()


def _batch_answer(**spec: object) -> bytes:
    return json.dumps({"objects": [{"oid": "a" * 64, "size": 1, **spec}]}).encode()


@pytest.mark.parametrize(
    "answer",
    [
        _batch_answer(actions=["download"]),
        _batch_answer(actions={"download": "https://h/o"}),
        _batch_answer(actions={"download": {"header": {}}}),
        _batch_answer(actions={"download": {"href": "https://h/o", "header": ["x"]}}),
        _batch_answer(actions={"download": {"href": "https://h/o", "header": {"X": "a\r\nB: c"}}}),
        _batch_answer(actions={"download": {"href": "https://h/o", "expires_in": "soon"}}),
        _batch_answer(error="gone"),
        _batch_answer(error={"code": "E404"}),
    ],
)
def test_an_object_described_otherwise_than_the_batch_api_does_is_one_line(
    answer: bytes,
) -> None:
    from git_mgit.transfer.stores.lfs import batch

    with pytest.raises(BlobStoreError, match="does not describe as the Batch API does") as failed:
        batch.parse_answers(answer, [Pointer("a" * 64, 1)], "Git LFS at https://h/x")
    assert "\n" not in str(failed.value)


def test_what_a_server_says_reaches_the_terminal_as_one_printable_line() -> None:
    """A server's message is the server's text: its escape sequences would be the
    terminal's (set the window title, rewrite lines) and a line break would split git-mgit's
    one line."""
    from git_mgit.transfer.stores.lfs import batch

    body = {"message": "quota\x1b]0;owned\x07 exceeded\r\nfor org", "documentation_url": "x\x1b[2J"}
    said = batch.server_message(json.dumps(body).encode())
    assert said == "quota?]0;owned? exceeded for org (see x?[2J)"


def test_a_retry_after_no_clock_reaches_is_no_retry_after() -> None:
    from git_mgit.transfer.stores.lfs.retry import retry_after

    assert retry_after({"Retry-After": "Wed, 21 Oct 99999999999999999999 07:28:00 GMT"}) is None
    assert retry_after({"Retry-After": "7"}) == 7.0


def test_a_redirect_from_https_to_plain_http_is_refused(tmp_path: Path) -> None:
    """The body and an action's own headers (a storage token) would cross the network in
    clear: git-lfs refuses such a redirect, and so does git-mgit, before sending a byte."""
    cert, key = _self_signed(tmp_path)
    sink: list[str] = []

    class Sink(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            sink.append(self.path)

    class Downgrade(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{plain.server_port}/sink")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    plain = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    secure = ThreadingHTTPServer(("127.0.0.1", 0), Downgrade)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    for server in (plain, secure):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    trusting = HttpConfig([("http.sslcainfo", str(cert))], env={})
    http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), trusting)
    try:
        with pytest.raises(BlobStoreError, match="redirected to plain http") as failed:
            http.send(
                "PUT",
                f"https://127.0.0.1:{secure.server_port}/upload",
                headers={"X-Upload-Token": "st0rage"},
                body=b"weights",
            )
        assert "\n" not in str(failed.value) and sink == []
    finally:
        http.close()
        for server in (plain, secure):
            server.shutdown()
            server.server_close()


def test_an_ssh_remote_authenticates_through_git_lfs_authenticate(
    lfs_server: LfsServer, workrepo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = tmp_path / "authenticate.json"
    basic = base64.b64encode(f"{lfs_server.username}:{lfs_server.password}".encode()).decode()
    header = {"Authorization": f"Basic {basic}"}
    answer.write_text(
        json.dumps({"href": lfs_server.lfs_url(), "header": header, "expires_in": 60})
    )
    calls = tmp_path / "ssh-calls.jsonl"
    fake_ssh = tmp_path / "fake-ssh"
    fake_ssh.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"print(open({str(answer)!r}).read())\n"
    )
    fake_ssh.chmod(0o755)
    monkeypatch.setenv("GIT_SSH_COMMAND", f"{fake_ssh} -o BatchMode=yes")
    run_git("config", "--global", "--unset", "credential.helper", cwd=workrepo)  # ssh's only
    run_git("remote", "add", "origin", "ssh://git@lfs.example.invalid:2222/org/repo", cwd=workrepo)
    objects = blobs(5000, 70000)
    store = store_for(workrepo)
    assert store.endpoint.url == "https://lfs.example.invalid/org/repo.git/info/lfs"
    assert store.upload(list(objects), objects.__getitem__) == 2
    assert dict(store.download(list(objects))) == objects
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    base = ["-o", "BatchMode=yes", "-p", "2222", "git@lfs.example.invalid"]
    assert ran == [
        [*base, "git-lfs-authenticate /org/repo upload"],
        [*base, "git-lfs-authenticate /org/repo download"],
    ]


# -- git and git-lfs through the same server -------------------------------------------


def test_git_and_git_lfs_push_and_clone_through_the_server(
    lfs_server: LfsServer, tmp_path: Path
) -> None:
    if subprocess.run(["git", "lfs", "version"], capture_output=True).returncode:
        pytest.skip("git-lfs is not installed (scripts/test installs it)")
    run_git("lfs", "install", "--skip-repo", cwd=tmp_path)
    work = init_repo(tmp_path / "lfs-work")
    run_git("lfs", "track", "*.bin", cwd=work)
    run_git("add", ".gitattributes", cwd=work)
    model = os.urandom(2 * MiB)
    commit_files(work, {"model.bin": model, "README": "x\n"}, "model")
    run_git("push", lfs_server.repo_url("org/lfs"), "main", cwd=work)
    clone = tmp_path / "clone"
    run_git("clone", "--quiet", lfs_server.repo_url("org/lfs"), clone, cwd=tmp_path)
    assert (clone / "model.bin").read_bytes() == model
    assert lfs_server.stored(Pointer.of(model).oid, "org/lfs").read_bytes() == model


# -- faults ----------------------------------------------------------------------------


@pytest.fixture
def proxied(lfs_server: LfsServer, lfs_repo: Path, tmp_path: Path) -> Iterator[FaultProxy]:
    """The repo's LFS traffic goes through a fault proxy; retries are quick."""
    with FaultProxy(lfs_server.url) as proxy:
        lfs_server.store_credentials(tmp_path / "git-credentials", also=(proxy.url,))
        run_git("config", "lfs.url", f"{proxy.url}/org/repo.git/info/lfs", cwd=lfs_repo)
        run_git("config", "lfs.transfer.maxretries", "4", cwd=lfs_repo)
        run_git("config", "lfs.transfer.maxretrydelay", "0", cwd=lfs_repo)
        yield proxy


def test_transfers_survive_errors_and_dropped_connections(
    lfs_server: LfsServer, lfs_repo: Path, proxied: FaultProxy
) -> None:
    objects = blobs(2 * MiB, 2 * MiB + 1, 3 * MiB)
    store = store_for(lfs_repo)
    proxied.fail("POST", "/objects/batch", status=503)
    proxied.fail("PUT", status=429, headers={"Retry-After": "1"})
    proxied.drop_request("PUT", "/objects/storage/", after=256 * 1024)
    pieces = {
        p: Pieces([memoryview(d)[: MiB + 1], memoryview(d)[MiB + 1 :]]) for p, d in objects.items()
    }
    assert store.upload(list(objects), pieces.__getitem__) == 3  # sent again whole after a drop
    assert proxied.armed == 0
    for pointer, data in objects.items():
        assert lfs_server.stored(pointer.oid).read_bytes() == data

    proxied.fail("GET", status=500)
    proxied.drop_response("GET", "/objects/storage/", after=MiB)
    proxied.drop_response("POST", "/objects/batch", after=10)
    assert dict(store.download(list(objects))) == objects
    assert proxied.armed == 0
    assert len(lfs_server.uploads()) >= 3  # a dropped upload may have reached the server


def test_the_test_server_keeps_a_stored_object_through_a_cut_upload_of_it(
    lfs_server: LfsServer, lfs_repo: Path
) -> None:
    """tests/servers/lfs.py stores an upload whole or not at all, as object stores do: a PUT
    of a stored object cut short leaves the object as it was. (giftless writes in place: a
    PUT the fault proxy cut, handled only after the client's retry had stored the object,
    truncated it, and the retry's verify failed.)"""
    data = os.urandom(MiB)
    pointer = Pointer.of(data)
    assert store_for(lfs_repo).upload([pointer], lambda p: Pieces([memoryview(data)])) == 1
    host, port = lfs_server.url.removeprefix("http://").split(":")
    path = f"/org/repo.git/info/lfs/objects/storage/{pointer.oid}"
    login = base64.b64encode(f"{lfs_server.username}:{lfs_server.password}".encode()).decode()
    head = (
        f"PUT {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Basic {login}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    with socket.create_connection((host, int(port))) as cut:
        cut.sendall(head.encode() + data[: len(data) // 4])
        cut.shutdown(socket.SHUT_WR)  # the rest never comes
        cut.recv(1)  # the server's answer to the short body, or its close
    for _ in range(500):
        if any(
            h.method == "PUT" and h.path == path and h.status >= 400 for h in lfs_server.requests
        ):
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the server never answered the cut upload")
    assert lfs_server.stored(pointer.oid).read_bytes() == data


def test_retries_run_out_with_one_line(lfs_repo: Path, proxied: FaultProxy) -> None:
    proxied.fail("POST", "/objects/batch", status=502, times=10)
    objects = blobs(100)
    with pytest.raises(BlobStoreError) as failure:
        store_for(lfs_repo).upload(list(objects), objects.__getitem__)
    message = str(failure.value)
    assert "failed after 4 retries (HTTP 502" in message and "\n" not in message
    assert proxied.count("POST", "/objects/batch") == 5


def test_the_servers_message_reaches_the_user(lfs_repo: Path, proxied: FaultProxy) -> None:
    refusal = {"message": "Quota exceeded for org", "documentation_url": "https://help.example"}
    proxied.fail("POST", "/objects/batch", status=403, body=json.dumps(refusal).encode())
    objects = blobs(100)
    with pytest.raises(BlobStoreError) as failure:
        store_for(lfs_repo).upload(list(objects), objects.__getitem__)
    message = str(failure.value)
    assert "HTTP 403: Quota exceeded for org (see https://help.example)" in message
    assert "may write to this repository" in message


def test_a_refused_action_is_renewed_once(lfs_repo: Path, proxied: FaultProxy) -> None:
    objects = blobs(5000)
    store = store_for(lfs_repo)
    store.upload(list(objects), objects.__getitem__)
    before = proxied.count("POST", "/objects/batch")
    proxied.fail("GET", "/objects/storage/", status=401)  # as an expired token would be
    assert dict(store.download(list(objects))) == objects
    assert proxied.count("POST", "/objects/batch") == before + 2  # the batch, then renewal
    proxied.fail("GET", "/objects/storage/", status=403, times=2)
    with pytest.raises(BlobStoreError, match=r"downloading object sha256:\w{12} failed \(HTTP 403"):
        list(store.download(list(objects)))


_SIGNATURE = "X-Amz-Signature=" + "5ec12e7" * 8


def _answer(proxy: FaultProxy, hrefs: dict[Pointer, str]) -> None:
    """The next batch request gets these download hrefs from the proxy, as a host's
    Batch API would hand out pre-signed ones (giftless's point at itself)."""
    objects = [
        {"oid": p.oid, "size": p.size, "actions": {"download": {"href": href}}}
        for p, href in hrefs.items()
    ]
    proxy.fail("POST", "/objects/batch", status=200, body=json.dumps({"objects": objects}).encode())


@pytest.mark.parametrize(
    ("href", "location"),
    [
        ("{proxy}/o/{oid}?{signature}&name=a b", None),  # a space in the query
        ("{proxy}/o/{oid}\x01?{signature}", None),  # a control character in the path
        ("http://127.0.0.1:99999/{oid}?{signature}", None),  # a port out of range
        (None, "http://127.0.0.1:99999/{oid}?{signature}"),  # the same, where a redirect points
        ("https://[::1/{oid}?{signature}", None),  # a host that cannot be taken apart
        (None, "https://[::1/{oid}?{signature}"),
    ],
)
def test_an_href_no_request_can_go_to_fails_at_once_in_one_line(
    lfs_repo: Path,
    proxied: FaultProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    href: str | None,
    location: str | None,
) -> None:
    """An href (or a redirect's Location) that no request can be sent to fails its object
    at once, in one printable line that shows no query: no retry mends it, and the
    signature its query holds reaches neither the message nor GIT_TRACE."""
    objects = blobs(5000)
    (pointer,) = objects
    store = store_for(lfs_repo)
    store.upload(list(objects), objects.__getitem__)
    given = {"proxy": proxied.url, "oid": pointer.oid, "signature": _SIGNATURE}
    if href is not None:
        _answer(proxied, {pointer: href.format(**given)})
    else:
        location = (location or "").format(**given)
        proxied.fail("GET", "/objects/storage/", status=302, headers={"Location": location})
    trace = tmp_path / "trace.log"
    monkeypatch.setenv("GIT_TRACE", str(trace))
    with pytest.raises(BlobStoreError, match="not a URL a request can go to") as failure:
        list(store.download(list(objects)))
    message = str(failure.value)
    assert message.isprintable() and _SIGNATURE not in message
    traced = _traced(trace)
    assert traced and not [line for line in traced if _SIGNATURE in line or "; retry" in line]
    assert proxied.armed == 0
    assert proxied.count("GET") == (0 if href else 1)  # never sent again


def test_a_retry_after_that_is_no_number_waits_as_usual_and_frees_its_connection(
    lfs_repo: Path, proxied: FaultProxy
) -> None:
    """`Retry-After: ²` is a digit to str.isdigit, not to float(): it is no Retry-After, and
    the usual backoff applies. Each refused request hands its connection back: with one
    transfer slot (connections for two requests), three refusals still end in an answer."""
    run_git("config", "lfs.concurrenttransfers", "1", cwd=lfs_repo)
    objects = blobs(5000)
    proxied.fail("POST", "/objects/batch", status=503, headers={"Retry-After": "\u00b2"}, times=3)
    assert store_for(lfs_repo).upload(list(objects), objects.__getitem__) == 1
    batches = [r.status for r in proxied.requests if r.target.endswith("/objects/batch")]
    assert batches == [503, 503, 503, 401, 200]


# -- storage on another host -----------------------------------------------------------


def test_storage_on_another_host_asks_for_credentials_once_for_all_its_objects(
    lfs_server: LfsServer,
    lfs_repo: Path,
    proxied: FaultProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hrefs on another origin that asks for HTTP Basic (the server's storage, by another
    name): the first object's 401 fills credentials for that origin once; every later
    object carries them, as git-lfs reuses them, and the repository remembers the origin
    (not each href), so the next process sends them from its first request."""
    objects = blobs(1000, 2000, 3000)
    store_for(lfs_repo).upload(list(objects), objects.__getitem__)
    (lfs_repo / ".git" / "mgit" / "lfs-access").unlink()  # the batch API: asked afresh
    storage = f"http://localhost:{lfs_server.url.rsplit(':', 1)[1]}"
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    lfs_server.store_credentials(tmp_path / "creds", also=(proxied.url, storage))
    log = tmp_path / "helper.log"
    helper = f"!f() {{ echo $1 >>{log}; git credential-store --file={tmp_path / 'creds'} $1; }}; f"
    run_git("config", "--global", "credential.helper", helper, cwd=lfs_repo)
    run_git("config", "lfs.concurrenttransfers", "1", cwd=lfs_repo)
    hrefs = {p: f"{storage}/org/repo.git/info/lfs/objects/storage/{p.oid}" for p in objects}

    def refused() -> int:
        return sum(h.status == 401 and "/objects/storage/" in h.path for h in lfs_server.requests)

    for process in range(2):
        auth.forget()
        _answer(proxied, hrefs)
        assert dict(store_for(lfs_repo).download(list(objects))) == objects
        assert refused() == 1  # the first object's, in the first process only
        if process == 0:
            assert log.read_text() == "get\nstore\n"
    assert (lfs_repo / ".git" / "mgit" / "lfs-access").read_text() == f"{storage}\n"
