"""The LFS store on the networks users have: a server whose certificate a company's own CA
signed, a forward proxy (with credentials, with a CONNECT tunnel for HTTPS), a token in
git's `http.extraHeader` as CI systems pass it. git-mgit's LFS client follows git's own
`http.*` settings there (stores/lfs/httpconfig.py); every test pushes a model and clones
it fresh, byte-exact, through real servers on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import secrets
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs import tunnel
from git_mgit.transfer.stores.lfs.auth import Access
from git_mgit.transfer.stores.lfs.creds import GitCredentials
from git_mgit.transfer.stores.lfs.http import Http, Timeouts
from git_mgit.transfer.stores.lfs.httpconfig import HttpConfig, Proxy, Tls
from git_mgit.transfer.stores.lfs.retry import Transient
from git_mgit.transfer.stores.lfs.tls import client_context
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo
from tests.servers.lfs import LfsServer
from tests.servers.proxy import ForwardProxy, SocksProxy
from tests.servers.tls import INTERNAL_NAME, Certificates, make_certificates
from tests.test_stores import MODEL, commit_versions, series


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path / "tls")


@pytest.fixture
def https_lfs_server(
    tmp_path: Path, certificates: Certificates, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LfsServer]:
    """The LFS test server over HTTPS, its certificate signed by the test's own CA; git's
    TLS variables unset (they override its config, and machines set GIT_SSL_CAINFO)."""
    for name in ("GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "GIT_SSL_NO_VERIFY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    password = secrets.token_urlsafe(16)
    with LfsServer(tmp_path / "lfs-server", "mgit-user", password, tls=certificates) as server:
        server.store_credentials(tmp_path / "git-credentials")
        yield server


def _through_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback is not exempt from proxies here (the fixtures exempt it)."""
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _push_and_clone(
    server: LfsServer, tmp_path: Path, url: str | None = None, remote_proxy: str | None = None
) -> None:
    """Two versions pushed with the LFS store; a fresh clone checks the last one out.
    `url`: the repository's URL as the clients name it; `remote_proxy`: the remote's
    `remote.origin.proxy`, in the pushing repository and in the clone."""
    url = url or server.repo_url()
    server.repo_url()  # the bare repository, created
    versions = series(2, size=4000)
    root = init_mgit_repo(tmp_path / "src")
    commit_versions(root, versions)
    run_git("config", "mgit.store", "lfs", cwd=root)
    run_git("remote", "add", "origin", url, cwd=root)
    setting = ("--config", f"remote.origin.proxy={remote_proxy}") if remote_proxy else ()
    if remote_proxy:
        run_git("config", "remote.origin.proxy", remote_proxy, cwd=root)
    run_git("push", "-q", "origin", "main", cwd=root)
    assert server.uploads()
    run_git("clone", "-q", *setting, url, tmp_path / "fresh", cwd=tmp_path)
    assert (tmp_path / "fresh" / MODEL).read_bytes() == versions[-1]


def _lfs_requests(server: LfsServer) -> list[str]:
    return [f"{h.method} {h.path}" for h in server.requests if h.lfs]


def test_a_server_signed_by_the_companys_ca_is_trusted_through_http_sslcainfo(
    https_lfs_server: LfsServer, certificates: Certificates, tmp_path: Path
) -> None:
    """git trusts the server through `http.sslCAInfo`; so does the LFS client."""
    run_git("config", "--global", "http.sslCAInfo", str(certificates.ca), cwd=tmp_path)
    _push_and_clone(https_lfs_server, tmp_path)
    assert https_lfs_server.url.startswith("https://")
    assert any("/objects/batch" in r for r in _lfs_requests(https_lfs_server))


def test_an_untrusted_certificate_is_one_line_naming_the_setting(
    https_lfs_server: LfsServer, certificates: Certificates, tmp_path: Path
) -> None:
    """Without the CA the request is refused at once, in one line saying what to set; with
    GIT_SSL_NO_VERIFY (as git has it) the same request goes through."""
    url = f"{https_lfs_server.url}/org/repo.git/info/refs"
    untrusting = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), HttpConfig([]))
    with pytest.raises(BlobStoreError, match=r"http\.sslCAInfo") as refused:
        untrusting.send("GET", url, headers={})
    assert "\n" not in str(refused.value) and "certificate" in str(refused.value)
    untrusting.close()
    unchecking = HttpConfig([], env={"GIT_SSL_NO_VERIFY": "1"})
    http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), unchecking)
    response = http.send("GET", url, headers={})
    assert response.status == 401  # the server's own answer: TLS was accepted
    response.drain()
    http.close()


def test_an_lfs_push_and_clone_go_through_an_authenticating_http_proxy(
    lfs_server: LfsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`http.proxy` with the proxy's user and password: git and the LFS client both go
    through it (absolute-URI requests for http); the LFS client sends the proxy's
    credentials from its first request (git's curl asks without them first)."""
    _through_proxies(monkeypatch)
    with ForwardProxy(credentials=("alice", secrets.token_urlsafe(8))) as proxy:
        run_git("config", "--global", "http.proxy", proxy.url_with_credentials, cwd=tmp_path)
        _push_and_clone(lfs_server, tmp_path)
    taken = [f"{method} {target}" for method, target in proxy.requests]
    for wanted in ("POST", "PUT", "GET"):  # batch requests, uploads, downloads
        assert any(t.startswith(f"{wanted} {lfs_server.url}/") for t in taken), wanted
    assert any("/info/lfs/objects/batch" in t for t in taken)
    assert any("/objects/storage/" in t for t in taken)
    assert not [t for _, t in proxy.refused if "/info/lfs" in t or "/objects/" in t]


def test_a_connection_to_a_proxy_sends_without_waiting_for_its_acks() -> None:
    """Nagle's algorithm is off on the connection to a proxy, as http.client turns it off on
    the connections it makes itself: a request's body written after its head would wait
    for the proxy's delayed ACK (a push through the test proxy took 0.50 s with it on,
    0.37 s with it off)."""
    with ForwardProxy() as proxy:
        route = Proxy("http", "127.0.0.1", proxy.port, shown=proxy.url)
        with tunnel.reach(route, 5.0, client_context) as sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_https_goes_through_the_proxys_connect_tunnel(
    https_lfs_server: LfsServer,
    certificates: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An https server behind a proxy: a CONNECT tunnel to it, TLS inside checked against
    `http.sslCAInfo`, the proxy's credentials on the CONNECT only."""
    _through_proxies(monkeypatch)
    run_git("config", "--global", "http.sslCAInfo", str(certificates.ca), cwd=tmp_path)
    with ForwardProxy(credentials=("bob", secrets.token_urlsafe(8))) as proxy:
        monkeypatch.setenv("https_proxy", proxy.url_with_credentials)  # as curl reads it
        _push_and_clone(https_lfs_server, tmp_path)
    server = https_lfs_server.url.removeprefix("https://")
    assert ("CONNECT", server) in proxy.requests
    assert {method for method, _ in proxy.requests} == {"CONNECT"}
    assert any("/objects/storage/" in r for r in _lfs_requests(https_lfs_server))


def test_an_https_proxy_carries_the_servers_tls_inside_its_own(
    https_lfs_server: LfsServer,
    certificates: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`http.<lfs url>.proxy = https://...`: TLS to the proxy, checked against
    `http.proxySSLCAInfo`, and the server's TLS inside it, after a CONNECT carrying the
    proxy's credentials. git's own requests go direct here (the proxy is set for the LFS
    URL only): this machine's curl (7.88, GnuTLS) stalls on responses tunnelled through
    an https:// proxy until the proxy closes the connection."""
    _through_proxies(monkeypatch)
    run_git("config", "--global", "http.sslCAInfo", str(certificates.ca), cwd=tmp_path)
    run_git("config", "--global", "http.proxySSLCAInfo", str(certificates.ca), cwd=tmp_path)
    login = ("frank", secrets.token_urlsafe(8))
    with ForwardProxy(credentials=login, tls=certificates) as proxy:
        key = f"http.{https_lfs_server.lfs_url()}.proxy"
        run_git("config", "--global", key, proxy.url_with_credentials, cwd=tmp_path)
        _push_and_clone(https_lfs_server, tmp_path)
    server = https_lfs_server.url.removeprefix("https://")
    assert proxy.url.startswith("https://") and ("CONNECT", server) in proxy.requests
    assert {method for method, _ in proxy.requests} == {"CONNECT"} and not proxy.refused
    assert any("/objects/storage/" in r for r in _lfs_requests(https_lfs_server))


def test_an_https_proxy_not_trusted_is_one_line_naming_proxysslcainfo(
    lfs_server: LfsServer,
    certificates: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proxy's certificate checked against the system's CAs alone (no
    `http.proxySSLCAInfo`): refused at once, in one line saying what to set; with it, an
    http server's requests go through the proxy in absolute form."""
    _through_proxies(monkeypatch)
    with ForwardProxy(tls=certificates) as proxy:
        untrusting = HttpConfig([("http.proxy", proxy.url)], env={})
        http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), untrusting)
        url = lfs_server.lfs_url() + "/locks"
        with pytest.raises(BlobStoreError, match=r"http\.proxySSLCAInfo") as refused:
            http.send("GET", url, headers={})
        assert "\n" not in str(refused.value) and proxy.url.split("//")[1] in str(refused.value)
        http.close()
        assert not proxy.requests
        trusting = HttpConfig(
            [("http.proxy", proxy.url), ("http.proxysslcainfo", str(certificates.ca))], env={}
        )
        http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), trusting)
        response = http.send("GET", url, headers={})
        assert response.status == 401  # the server's own answer, through the proxy
        response.drain()
        http.close()
    assert proxy.requests == [("GET", url)]


def test_a_proxy_that_refuses_is_one_line_without_its_password(
    lfs_server: LfsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wrong proxy credentials: the proxy's 407, to an http request or to an https one's
    CONNECT, is one line naming http.proxy, never retried, without the password given."""
    _through_proxies(monkeypatch)
    wrong = secrets.token_urlsafe(12)
    with ForwardProxy(credentials=("carol", "right")) as proxy:
        config = HttpConfig([("http.proxy", f"http://carol:{wrong}@127.0.0.1:{proxy.port}")])
        http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), config)
        for url in (lfs_server.lfs_url() + "/locks", "https://127.0.0.1:9/locks"):
            with pytest.raises(BlobStoreError, match="407") as refused:
                http.send("GET", url, headers={})
            message = str(refused.value)
            assert "\n" not in message and "http.proxy" in message and wrong not in message
        http.close()
    assert [method for method, _ in proxy.refused] == ["GET", "CONNECT"]


def test_a_name_only_a_socks5h_proxy_knows_is_reached_through_it_with_tls_inside(
    https_lfs_server: LfsServer,
    certificates: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server behind a bastion, known by a name only the bastion resolves: with
    `http.proxy = socks5h://user:password@bastion`, git and the LFS client both send the
    name to the proxy (nothing here could resolve it), log in to the proxy, and check
    the server's certificate for that name inside the tunnel."""
    _through_proxies(monkeypatch)
    login = ("dora", secrets.token_urlsafe(8))
    run_git("config", "--global", "http.sslCAInfo", str(certificates.ca), cwd=tmp_path)
    port = https_lfs_server.url.rsplit(":", 1)[1]
    internal = f"https://{INTERNAL_NAME}:{port}"
    https_lfs_server.store_credentials(tmp_path / "git-credentials", also=(internal,))
    with SocksProxy(credentials=login, names={INTERNAL_NAME: "127.0.0.1"}) as proxy:
        run_git("config", "--global", "http.proxy", proxy.url("socks5h", login), cwd=tmp_path)
        _push_and_clone(https_lfs_server, tmp_path, url=f"{internal}/org/repo.git")
    assert {target for _, target in proxy.tunnels} == {f"{INTERNAL_NAME}:{port}"}
    assert not proxy.refused
    served = _lfs_requests(https_lfs_server)
    assert any("/objects/batch" in r for r in served)
    assert any(r.startswith("GET ") and "/objects/storage/" in r for r in served)


def test_the_remotes_own_proxy_wins_and_socks_carries_plain_http(
    lfs_server: LfsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`remote.origin.proxy` (SOCKS4a, then SOCKS5 resolving here: the address sent) wins
    over an `http.proxy` that goes nowhere, for git and the LFS client alike; plain HTTP
    goes through the tunnel as it would go direct."""
    _through_proxies(monkeypatch)
    run_git("config", "--global", "http.proxy", "http://127.0.0.1:9", cwd=tmp_path)  # closed
    for scheme in ("socks4a", "socks5"):
        (tmp_path / scheme).mkdir()
        url = lfs_server.repo_url(f"org/{scheme}")
        with SocksProxy() as proxy:
            _push_and_clone(lfs_server, tmp_path / scheme, url, remote_proxy=proxy.url(scheme))
        server = lfs_server.url.removeprefix("http://")
        assert proxy.tunnels and set(proxy.tunnels) == {(scheme[:6], server)}, proxy.tunnels
        lines = b"\n".join(proxy.first_lines)
        batch = f"POST /org/{scheme}.git/info/lfs/objects/batch".encode()
        for wanted in (batch, b"PUT ", b"GET "):
            assert wanted in lines, (wanted, proxy.first_lines)
        assert b"/objects/storage/" in lines


def test_a_socks_proxy_that_refuses_is_one_line_without_its_password(
    lfs_server: LfsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SOCKS5 proxy that wants a user and password, given a wrong one or none: one line
    naming the proxy and where its URL is set, never retried, without the password."""
    _through_proxies(monkeypatch)
    wrong = secrets.token_urlsafe(12)
    with SocksProxy(credentials=("erin", "right")) as proxy:
        for login, said in ((("erin", wrong), "refused the user and password"), (None, "wants")):
            config = HttpConfig([("http.proxy", proxy.url("socks5", login))], env={})
            http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), config)
            with pytest.raises(BlobStoreError, match=said) as refused:
                http.send("GET", lfs_server.lfs_url() + "/locks", headers={})
            message = str(refused.value)
            assert "\n" not in message and "http.proxy" in message and wrong not in message
            http.close()
    assert len(proxy.refused) == 2 and not proxy.tunnels


def test_a_token_in_http_extraheader_authorizes_without_a_credential_helper(
    lfs_server: LfsServer, tmp_path: Path
) -> None:
    """As GitHub's checkout action leaves a clone: no credential helper, the token in
    `http.<url>.extraHeader`. git and the LFS client send it from their first request."""
    run_git("config", "--global", "--unset", "credential.helper", cwd=tmp_path)
    token = base64.b64encode(f"{lfs_server.username}:{lfs_server.password}".encode()).decode()
    key = f"http.{lfs_server.url}/.extraheader"
    run_git("config", "--global", key, f"AUTHORIZATION: basic {token}", cwd=tmp_path)
    _push_and_clone(lfs_server, tmp_path)
    assert not [h for h in lfs_server.requests if h.lfs and h.status == 401]


def test_gits_ca_is_trusted_beside_the_systems(certificates: Certificates) -> None:
    """`http.sslCAInfo` adds a CA to the system's (as git-lfs does): storage hrefs on a
    public host stay trusted when the CA named only signs the company's git server."""
    ours = client_context(Tls(ca_file=str(certificates.ca))).get_ca_certs()
    assert any(dict(c["subject"][0]).get("commonName") == "git-mgit test CA" for c in ours)
    assert len(ours) > 1  # the system's too


@contextlib.contextmanager
def _https_server(
    certificates: Certificates, host: str = "127.0.0.1"
) -> Iterator[tuple[ThreadingHTTPServer, list[object]]]:
    """An HTTPS server on `host` answering every GET with an empty 200, and the list of
    connections it accepted."""
    accepted: list[object] = []

    class Answer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            accepted.append(self.client_address)
            super().setup()

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    server = Server((host, 0), Answer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates.cert, certificates.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server, accepted
    finally:
        server.shutdown()
        server.server_close()


def test_an_ipv6_server_is_tunnelled_with_its_address_in_brackets(
    certificates: Certificates,
) -> None:
    """`CONNECT [::1]:port`, as the authority form has it (http.client's own CONNECT omits
    the brackets before Python 3.12, which strict proxies refuse)."""
    with _https_server(certificates, "::1") as (server, _), ForwardProxy() as proxy:
        config = HttpConfig(
            [("http.sslcainfo", str(certificates.ca)), ("http.proxy", proxy.url)], env={}
        )
        http = Http(Access(GitCredentials(certificates.ca.parent)), 1, Timeouts(5, 5), config)
        response = http.send("GET", f"https://[::1]:{server.server_port}/x", headers={})
        assert response.status == 200
        response.drain()
        http.close()
    assert proxy.requests == [("CONNECT", f"[::1]:{server.server_port}")]


def _locked(key: Path, passphrase: str) -> Path:
    """A copy of `key` behind `passphrase`."""
    locked = key.with_name(f"locked-{key.name}")
    encrypt = ["pkey", "-in", key, "-aes256", "-passout", f"pass:{passphrase}", "-out", locked]
    subprocess.run(["openssl", *map(str, encrypt)], check=True, capture_output=True)
    return locked


def _passphrase_helper(folder: Path, passphrase: str) -> tuple[Path, Path]:
    """(a git credential helper that gives `passphrase` for `cert` requests alone, the log
    of every action and request it was given)."""
    log, helper = folder / "asked.log", folder / "cert-helper"
    helper.write_text(
        "#!/bin/sh\n"
        f'input=$(cat); printf "%s\\n%s\\n\\n" "$1" "$input" >> {log}\n'
        f'case "$1 $input" in "get "*protocol=cert*) echo password={passphrase};; esac\n'
    )
    helper.chmod(0o755)
    return helper, log


def test_a_client_key_behind_a_passphrase_opens_with_what_gits_credential_helper_gives(
    tmp_path: Path, certificates: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that admits only clients showing a certificate its CA signed, the client's
    key behind a passphrase, `http.sslCertPasswordProtected`: git and the LFS client both
    ask git's credential helper for `cert:///<certificate>`, open the key with what it
    gives, and approve it; the push and a fresh clone go through."""
    for name in ("GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "GIT_SSL_NO_VERIFY", "GIT_SSL_CERT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    passphrase = secrets.token_urlsafe(12)
    locked = _locked(certificates.client_key, passphrase)
    helper, log = _passphrase_helper(tmp_path, passphrase)
    password = secrets.token_urlsafe(16)
    with LfsServer(
        tmp_path / "lfs-server", "mgit-user", password, tls=certificates, client_certificates=True
    ) as server:
        server.store_credentials(tmp_path / "git-credentials")
        for key, value in (
            ("credential.helper", str(helper)),
            ("http.sslCAInfo", str(certificates.ca)),
            ("http.sslCert", str(certificates.client_cert)),
            ("http.sslKey", str(locked)),
            ("http.sslCertPasswordProtected", "true"),
        ):
            run_git("config", "--global", "--add", key, value, cwd=tmp_path)
        _push_and_clone(server, tmp_path)
        assert any("/objects/storage/" in r for r in _lfs_requests(server))
        # without a certificate: refused by the server, in one line saying what to set
        config = HttpConfig([("http.sslcainfo", str(certificates.ca))], env={})
        http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), config)
        with pytest.raises(BlobStoreError, match="client certificate") as refused:  # or EOF
            http.send("GET", server.lfs_url() + "/locks", headers={})
        assert "\n" not in str(refused.value) and "http.sslCert" in str(refused.value)
        http.close()
    asked = log.read_text()
    assert f"get\nprotocol=cert\nhost=\npath={certificates.client_cert}\n" in asked
    assert "store\nprotocol=cert" in asked and "erase" not in asked


def test_a_client_key_behind_a_passphrase_is_one_line_and_never_prompts(
    certificates: Certificates, tmp_path: Path
) -> None:
    """Without `http.sslCertPasswordProtected` OpenSSL would ask on the terminal (a
    filter's git waits on it): like curl, the client fails instead, saying what to set.
    With it, a wrong passphrase from the helper is one line and rejected there."""
    locked = _locked(certificates.client_key, "right")
    tls = Tls(cert=str(certificates.client_cert), key=str(locked))
    with pytest.raises(BlobStoreError, match="passphrase") as failed:
        client_context(tls)
    assert "\n" not in str(failed.value) and "http.sslCertPasswordProtected" in str(failed.value)
    helper, log = _passphrase_helper(tmp_path, "wrong")
    run_git("config", "--global", "credential.helper", str(helper), cwd=tmp_path)
    protected = Tls(cert=tls.cert, key=tls.key, password_protected=True)
    with pytest.raises(BlobStoreError, match="did not open") as failed:
        client_context(protected, GitCredentials(tmp_path))
    assert "\n" not in str(failed.value) and "wrong" not in str(failed.value)
    assert "erase\nprotocol=cert" in log.read_text()


def test_what_a_proxy_says_when_it_cannot_or_will_not_connect_reaches_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CONNECT its rules refuse (403) and a SOCKS4 proxy asked for an IPv6 server: one
    line saying so, never retried; a server down behind a SOCKS4 or SOCKS5 proxy: retried
    (Transient), with what the proxy answered."""
    _through_proxies(monkeypatch)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    down = f"http://127.0.0.1:{closed.getsockname()[1]}/x"
    helper = GitCredentials(tmp_path)
    with ForwardProxy(blocked=frozenset({"127.0.0.1:8443"})) as proxy, SocksProxy() as socks:
        cases = [
            (proxy.url, "https://127.0.0.1:8443/x", BlobStoreError, "answered 403 to CONNECT"),
            (socks.url("socks4"), "http://[::1]:8080/x", BlobStoreError, "IPv4 addresses only"),
            (socks.url("socks4"), down, Transient, "request rejected or failed"),
            (socks.url("socks5"), down, Transient, "connection refused"),
        ]
        for proxy_url, url, kind, said in cases:
            http = Http(
                Access(helper), 1, Timeouts(5.0, 5.0), HttpConfig([("http.proxy", proxy_url)])
            )
            with pytest.raises(kind, match=said) as failed:
                http.send("GET", url, headers={})
            assert "\n" not in str(failed.value)
            http.close()
    closed.close()


@pytest.mark.parametrize("user", ["gina", "corp\\gina:50%"])
def test_a_proxy_url_with_a_user_only_takes_the_password_from_gits_credential_helper(
    lfs_server: LfsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str
) -> None:
    """As git: `http.proxy = http://gina@proxy` asks git credential for gina's password at
    the proxy, approves it once the proxy took a request, and rejects it (the helper
    forgets it) when the proxy answers 407. A user spelt with escapes in the setting is
    asked about as it is once they are decoded (they were decoded twice)."""
    _through_proxies(monkeypatch)
    password = secrets.token_urlsafe(8)
    store = tmp_path / "proxy-credentials"
    run_git("config", "--global", "credential.helper", f"store --file={store}", cwd=tmp_path)
    url = lfs_server.lfs_url() + "/locks"
    spelt = quote(user, safe="")
    with ForwardProxy(credentials=(user, password)) as proxy:
        config = HttpConfig([("http.proxy", f"http://{spelt}@127.0.0.1:{proxy.port}")], env={})
        for given, admitted in ((password, True), ("wrong", False)):
            store.write_text(f"http://{spelt}:{given}@127.0.0.1:{proxy.port}\n")
            http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5.0, 5.0), config)
            if admitted:
                response = http.send("GET", url, headers={})
                assert response.status == 401  # the LFS server's own answer, through the proxy
                response.drain()
            else:
                with pytest.raises(BlobStoreError, match="407") as refused:
                    http.send("GET", url, headers={})
                assert "wrong" not in str(refused.value)
            http.close()
            assert (f":{given}@" in store.read_text()) is admitted  # approved, or rejected
    assert proxy.requests == [("GET", url)] and proxy.refused == [("GET", url)]


def test_a_connection_opened_ahead_over_tls_13_serves_the_first_request(
    certificates: Certificates,
) -> None:
    """A TLS 1.3 server's session tickets arrive after the handshake: the connection the
    client opened ahead of its first request (Http.prepare) is readable, yet alive, and is
    used, not dropped for a new one."""
    with _https_server(certificates) as (server, accepted):
        config = HttpConfig([("http.sslcainfo", str(certificates.ca))], env={})
        http = Http(Access(GitCredentials(certificates.ca.parent)), 1, Timeouts(5, 5), config)
        url = f"https://127.0.0.1:{server.server_port}/x"
        http.prepare(url, url)
        time.sleep(0.2)  # the tickets are in
        response = http.send("GET", url, headers={})
        assert response.status == 200
        response.drain()
        http.close()
        assert len(accepted) == 1


def test_opening_a_connection_ahead_never_asks_for_a_passphrase(
    certificates: Certificates, tmp_path: Path
) -> None:
    """Http.prepare runs beside other work and may not prompt: with a key whose passphrase
    would have to be asked for, it opens nothing, and git credential is not asked."""
    locked = _locked(certificates.client_key, "right")
    helper, log = _passphrase_helper(tmp_path, "right")
    run_git("config", "--global", "credential.helper", str(helper), cwd=tmp_path)
    config = HttpConfig(
        [
            ("http.sslcainfo", str(certificates.ca)),
            ("http.sslcert", str(certificates.client_cert)),
            ("http.sslkey", str(locked)),
            ("http.sslcertpasswordprotected", "true"),
        ],
        env={},
    )
    http = Http(Access(GitCredentials(tmp_path)), 1, Timeouts(5, 5), config)
    http.prepare("https://127.0.0.1:9/x", "https://127.0.0.1:9/x")
    http.close()
    assert not log.exists()
