"""git's http.* settings as the LFS client reads them (stores/lfs/httpconfig.py): the same
entry git itself picks for a URL, the environment over config as git has it."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from git_mgit.gitcmd import parse_config_list
from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.httpconfig import HttpConfig, Proxy, Route, Tls
from tests.gitsandbox import init_repo, run_git

# Entries of http.<url>.sslverify and where they apply; what git picks is asked of git.
_ENTRIES = [
    ("http.sslverify", "plain"),
    ("http.https://example.com.sslverify", "host"),
    ("http.https://example.com/org.sslverify", "org"),
    ("http.https://example.com/org/repo.git/.sslverify", "repo"),
    ("http.https://*.example.com.sslverify", "wildcard"),
    ("http.https://lfs.example.com.sslverify", "lfs-host"),
    ("http.https://foo*.example.com.sslverify", "partial-label"),  # git: no match
    ("http.https://example.com/a%41.sslverify", "escaped"),  # %41 is A: unreserved
    ("http.https://al%69ce@example.com/org.sslverify", "escaped-user"),
    ("http.https://example.com/x/../dots.sslverify", "dots"),
    ("http.https://example.com./trail.sslverify", "trailing-dot"),
    ("http.https://example.com/objects.sslverify", "objects"),
    ("http.https://example.com?q.sslverify", "query"),
    ("http.https://alice@example.com/org.sslverify", "alice-org"),
    ("http.https://example.com:8443.sslverify", "port"),
    ("http.http://example.com.sslverify", "http"),
    ("http.https://example.com/org.sslverify", "org-again"),
    ("http.https://example.com.sslverify", "host-after-org"),  # less specific: ignored
]
_URLS = [
    "https://example.com/",
    "https://example.com/org",
    "https://example.com/org/",
    "https://example.com/org/repo.git/info/lfs/objects/batch",
    "https://example.com/organisation/x",
    "https://alice@example.com/org/repo.git",
    "https://bob@example.com/org/repo.git",
    "https://lfs.example.com/objects/1",
    "https://cdn.example.com/objects/1",
    "https://a.b.example.com/objects/1",
    "https://foobar.example.com/objects/1",
    "https://example.com/aA/x",
    "https://example.com/a%41/x",
    "https://example.com/a%2f/x",
    "https://alice@example.com/org/x",
    "https://example.com/dots/x",
    "https://example.com/trail/x",
    "https://example.com/objects?sig=1",
    "https://example.com/objects/1?sig=1",
    "https://example.com:443/org/x",
    "https://example.com:8443/x",
    "http://example.com/org/x",
    "https://other.org/x",
]


def _config(tmp_path: Path, entries: list[tuple[str, str]]) -> Path:
    repo = init_repo(tmp_path / "r")
    for key, value in entries:
        run_git("config", "--add", key, value, cwd=repo)
    return repo


@pytest.mark.parametrize("url", _URLS)
def test_each_url_gets_the_entry_git_itself_picks(tmp_path: Path, url: str) -> None:
    repo = _config(tmp_path, _ENTRIES)
    listed = parse_config_list(run_git("config", "-z", "--list", cwd=repo, text=False).stdout)
    git = run_git("config", "--get-urlmatch", "http.sslverify", url, cwd=repo, check=False)
    ours = HttpConfig(listed, env={})._last(url).get("sslverify")
    assert ours == (git.stdout.strip() or None)


def test_tls_settings_from_config_and_gits_environment_over_them() -> None:
    pairs = [
        ("http.https://models.example.com.sslverify", "false"),
        ("http.sslcainfo", "/etc/team-ca.pem"),
        ("http.https://models.example.com.sslcert", "/home/me/client.pem"),
        ("http.https://models.example.com.sslkey", "/home/me/client.key"),
    ]
    assert HttpConfig(pairs, env={}).route("https://models.example.com/x").tls == Tls(
        False, "/etc/team-ca.pem", None, "/home/me/client.pem", "/home/me/client.key"
    )
    assert HttpConfig(pairs, env={}).route("https://elsewhere.example.com/x").tls == Tls(
        True, "/etc/team-ca.pem"
    )
    env = {"GIT_SSL_NO_VERIFY": "1", "GIT_SSL_CAINFO": "/ci/ca.pem"}
    assert HttpConfig(pairs, env=env).route("https://elsewhere.example.com/x").tls == Tls(
        False, "/ci/ca.pem"
    )


def _proxy_of(config: HttpConfig, url: str) -> str | None:
    proxy = config.route(url).proxy
    return None if proxy is None else proxy.shown


def test_booleans_paths_and_wildcards_as_git_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/me")
    for value, verify in (("", False), ("00", False), ("off", False), ("1", True), ("yes", True)):
        assert HttpConfig([("http.sslverify", value)], env={}).route("https://h/").tls.verify is (
            verify
        )
    assert not HttpConfig([], env={"GIT_SSL_NO_VERIFY": ""}).route("https://h/").tls.verify
    tilde = HttpConfig([("http.sslcainfo", "~/tls/ca.pem")], env={})
    assert tilde.route("https://h/").tls.ca_file == "/home/me/tls/ca.pem"
    assert HttpConfig([], env={}).headers("https://[::1/broken") == []  # unparsable: no match


def test_the_proxy_from_config_else_the_environment_as_curl_reads_it() -> None:
    env = {
        "https_proxy": "http://secure-proxy:3128",
        "http_proxy": "plain-proxy:3128",  # no scheme: http, as curl takes it
        "HTTP_PROXY": "http://ignored:1",  # curl never reads it (httpoxy)
        "no_proxy": "localhost, .internal.example.com",
    }
    config = HttpConfig([], env=env)
    assert _proxy_of(config, "https://hub.example.com/x") == "http://secure-proxy:3128"
    assert _proxy_of(config, "http://hub.example.com/x") == "http://plain-proxy:3128"
    assert _proxy_of(config, "https://lfs.internal.example.com/x") is None
    assert _proxy_of(config, "https://internal.example.com/x") is None
    assert _proxy_of(config, "http://localhost:8080/x") is None
    everything = HttpConfig([], env={"ALL_PROXY": "all"})
    assert _proxy_of(everything, "http://h/") == "http://all:1080"  # curl's default port
    everywhere = {k: v for k, v in env.items() if k != "no_proxy"}
    assert HttpConfig([], env={**everywhere, "NO_PROXY": "*"}).route("https://h/") == Route()
    # as curl: a no_proxy that is set, even empty, is the one read; `*` counts only alone;
    # address ranges; an empty proxy variable means no proxy, not the next variable
    assert _proxy_of(HttpConfig([], env={**env, "no_proxy": "", "NO_PROXY": "h"}), "https://h/")
    assert _proxy_of(HttpConfig([], env={**env, "no_proxy": "localhost,*"}), "https://h/")
    ranges = HttpConfig([], env={**env, "no_proxy": "10.0.0.0/8, 127.0.0.1/32"})
    assert _proxy_of(ranges, "https://10.1.2.3/x") is None
    assert _proxy_of(ranges, "http://127.0.0.1:8080/x") is None
    assert _proxy_of(ranges, "https://11.1.2.3/x") == "http://secure-proxy:3128"
    everything_v6 = HttpConfig([], env={**env, "no_proxy": "::/0, 0.0.0.0/0"})  # curl: exact
    assert _proxy_of(everything_v6, "https://[::1]/x") == "http://secure-proxy:3128"
    assert _proxy_of(everything_v6, "https://10.1.2.3/x") == "http://secure-proxy:3128"
    unset = HttpConfig([], env={"http_proxy": "", "all_proxy": "http://all:8080"})
    assert _proxy_of(unset, "http://h/") is None
    configured = [
        ("http.proxy", "http://te%40m:p%3Ass@team-proxy:8080"),
        ("http.https://direct.example.com.proxy", ""),
    ]
    team = HttpConfig(configured, env=env).route("https://hub.example.com/").proxy
    credentials = base64.b64encode(b"te@m:p:ss").decode()
    assert team == Proxy("http", "team-proxy", 8080, "te@m", "p:ss", "http://team-proxy:8080")
    assert team.authorization == f"Basic {credentials}"
    assert HttpConfig(configured, env=env).route("https://direct.example.com/").proxy is None
    # no_proxy holds for http.proxy too, as git hands it to curl
    assert HttpConfig(configured, env=env).route("https://lfs.internal.example.com/").proxy is None


def test_socks_proxies_and_the_remotes_own_proxy_as_git_takes_them() -> None:
    """SOCKS 4, 4a, 5 and 5h as curl names them, wherever a proxy is set; the remote's
    `remote.<name>.proxy` wins over `http.proxy` (an empty one: none), and no_proxy
    holds for it too."""
    for scheme in ("socks4", "socks4a", "socks5", "socks5h"):
        config = HttpConfig([("http.proxy", f"{scheme}://me:p%40ss@socks.example.com")], env={})
        proxy = config.route("https://hub.example.com/").proxy
        assert proxy == Proxy(scheme, "socks.example.com", 1080, "me", "p@ss", proxy.shown)
        assert proxy.shown == f"{scheme}://socks.example.com:1080"
        assert "p@ss" not in repr(proxy)
    socks = HttpConfig([("http.proxy", "socks://[::1]")], env={}).route("https://h/").proxy
    assert socks is not None and socks.shown == "socks4://[::1]:1080"  # socks: SOCKS4, as git
    env = {"https_proxy": "socks5h://env-socks:9050", "no_proxy": "internal.example.com"}
    assert _proxy_of(HttpConfig([], env=env), "https://h/") == "socks5h://env-socks:9050"
    pairs = [("http.proxy", "http://team-proxy:3128")]
    remote = ("remote.origin.proxy", "socks5://bastion:1080")
    config = HttpConfig(pairs, env=env, remote_proxy=remote)
    assert _proxy_of(config, "https://hub.example.com/x") == "socks5://bastion:1080"
    assert _proxy_of(config, "https://lfs.internal.example.com/x") is None
    direct = HttpConfig(pairs, env=env, remote_proxy=("remote.origin.proxy", ""))
    assert direct.route("https://hub.example.com/x").proxy is None
    assert _proxy_of(HttpConfig(pairs, env=env), "https://h/") == "http://team-proxy:3128"


def test_an_https_proxys_own_certificate_checks_from_the_proxyssl_settings() -> None:
    """TLS to an https:// proxy (port 443 unless given): always verified, against
    `http.proxySSLCAInfo` (GIT_PROXY_SSL_CAINFO over it), with `http.proxySSLCert` and
    its key; the server's own TLS settings stay apart."""
    pairs = [
        ("http.proxy", "https://proxy.example.com"),
        ("http.sslverify", "false"),
        ("http.sslcainfo", "/server-ca.pem"),
        ("http.proxysslcainfo", "/proxy-ca.pem"),
        ("http.proxysslcert", "/me.pem"),
        ("http.proxysslkey", "/me.key"),
        ("http.proxysslcertpasswordprotected", "true"),
    ]
    route = HttpConfig(pairs, env={}).route("https://hub.example.com/")
    assert route.tls == Tls(False, "/server-ca.pem")
    assert route.proxy is not None and route.proxy.shown == "https://proxy.example.com:443"
    assert route.proxy.tls == Tls(
        True, "/proxy-ca.pem", None, "/me.pem", "/me.key", True, "http.proxySSL"
    )
    env = {"GIT_PROXY_SSL_CAINFO": "/env-ca.pem", "GIT_SSL_NO_VERIFY": "1"}
    proxy = HttpConfig(pairs[:1], env=env).route("https://hub.example.com/").proxy
    assert proxy is not None and proxy.tls == Tls(True, "/env-ca.pem", settings="http.proxySSL")


def test_a_proxy_this_client_cannot_use_is_one_line_without_its_password() -> None:
    for setting, scheme, config in (
        (
            "http.proxy",
            "socks6",
            HttpConfig([("http.proxy", "socks6://me:hunter2@s:1080")], env={}),
        ),
        (
            "remote.origin.proxy",
            "ftp",
            HttpConfig([], env={}, remote_proxy=("remote.origin.proxy", "ftp://me:hunter2@s:1080")),
        ),
    ):
        with pytest.raises(
            BlobStoreError, match=re.escape(f"{setting} = {scheme}://s:1080")
        ) as failed:
            config.route("https://hub.example.com/")
        assert "hunter2" not in str(failed.value) and "\n" not in str(failed.value)
    with pytest.raises(BlobStoreError, match="https_proxy = gopher://p:3128") as failed:
        HttpConfig([], env={"https_proxy": "gopher://me:hunter2@p:3128"}).route("https://h/")
    assert "hunter2" not in str(failed.value) and "\n" not in str(failed.value)
    for broken in ("http://me:hunter2@[bad", "http://me:hunter2@p:31z8"):
        with pytest.raises(BlobStoreError, match="not a proxy") as failed:
            HttpConfig([("http.proxy", broken)], env={}).route("https://h/")
        assert "hunter2" not in str(failed.value)


def test_extra_headers_accumulate_and_an_empty_one_drops_those_before() -> None:
    pairs = [
        ("http.extraheader", "X-Team: models"),
        ("http.https://github.com/.extraheader", "AUTHORIZATION: basic dG9rZW4="),
        ("http.https://github.com/.extraheader", "X-Trace: 1"),
        ("http.https://gitlab.com/.extraheader", ""),
        ("http.https://gitlab.com/.extraheader", "Private-Token: abc"),
        ("http.extraheader", "X-Too-General: ignored after a more specific one"),
    ]
    config = HttpConfig(pairs, env={})
    assert config.headers("https://github.com/org/repo.git/info/lfs/objects/batch") == [
        ("X-Team", "models"),
        ("AUTHORIZATION", "basic dG9rZW4="),
        ("X-Trace", "1"),
    ]
    assert config.headers("https://gitlab.com/org/repo.git/info/lfs") == [("Private-Token", "abc")]
    assert config.headers("https://objects.example.com/x") == [
        ("X-Team", "models"),
        ("X-Too-General", "ignored after a more specific one"),
    ]
