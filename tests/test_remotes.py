"""What a remote lists: one exchange (protocol v0) unless it advertises too many refs."""

from __future__ import annotations

from pathlib import Path

import pytest

from git_mgit.gitcmd import anonymized, find_repo, remote_file_name
from git_mgit.transfer import remotes
from git_mgit.transfer.notes import remote_notes_ref
from tests.gitsandbox import Remote, commit_files, run_git
from tests.mgitrepo import init_mgit_repo, mgit


def _refs_on(remote: Remote, work: Path, names: list[str]) -> str:
    """Push one commit to `remote` under each of `names` (and main); the commit's id."""
    commit = commit_files(work, {"a.txt": "a\n"}, "a")
    run_git("push", "--quiet", remote.url, "main", *(f"{commit}:{n}" for n in names), cwd=work)
    return commit


def test_a_listing_asks_once_and_matches_as_git_ls_remote_does(
    http_remote: Remote, workrepo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP a listing is one request, the v0 ref advertisement (no v2 `ls-refs`), and
    its patterns are matched here as `git ls-remote` (v2) matches them: whole names, `*`
    crossing `/`, annotated tags with their peeled lines."""
    names = ["refs/mgit/v/a", "refs/mgit/v/b.c", "refs/mgit/vx/d", "refs/other/mgit/v/e"]
    commit = _refs_on(http_remote, workrepo, names)
    run_git("tag", "-a", "-m", "t", "t1", commit, cwd=workrepo)
    run_git("push", "--quiet", http_remote.url, "t1", cwd=workrepo)
    monkeypatch.chdir(workrepo)
    repo = find_repo()
    patterns = ("refs/mgit/v/*", "refs/tags/*", "refs/heads/main")
    expected = run_git("ls-remote", "--", http_remote.url, *patterns, cwd=workrepo).stdout
    before = len(http_remote.server.requests)

    listed = remotes.ls_remote(repo, http_remote.url, *patterns)

    asked = http_remote.server.requests[before:]
    assert [(r.method, r.lists_refs) for r in asked] == [("GET", True)]
    assert listed == {n: o for o, n in (line.split("\t") for line in expected.splitlines())}
    assert "refs/mgit/v/b.c" in listed and "refs/tags/t1^{}" in listed
    assert "refs/other/mgit/v/e" not in listed and "refs/mgit/vx/d" not in listed


def test_a_remote_that_advertises_many_refs_is_listed_by_prefix_from_then_on(
    http_remote: Remote, workrepo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v0 advertisement holds every ref; one with more than MANY_REFS refs not asked for
    is remembered, and the next listing asks v2's `ls-refs` for the prefixes alone, with
    the same answer."""
    monkeypatch.setattr(remotes, "MANY_REFS", 8)
    _refs_on(http_remote, workrepo, [f"refs/pull/{i}/head" for i in range(8)] + ["refs/mgit/v/a"])
    monkeypatch.chdir(workrepo)
    repo = find_repo()
    before = len(http_remote.server.requests)

    first = remotes.ls_remote(repo, http_remote.url, "refs/mgit/v/*")
    asked = http_remote.server.requests
    second = remotes.ls_remote(repo, http_remote.url, "refs/mgit/v/*")

    assert first == second and list(first) == ["refs/mgit/v/a"]
    assert [(r.command, r.lists_refs) for r in asked[before:]] == [(None, True)]  # v0
    assert [r.command for r in http_remote.server.requests[len(asked) :]] == [None, "ls-refs"]
    assert remotes.protocol(repo, http_remote.url) == ()


def test_a_remote_with_few_refs_stays_on_one_exchange(
    http_remote: Remote, workrepo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remotes, "MANY_REFS", 8)
    # 8 refs not asked for (HEAD, main and 6 more), and any number of those asked for
    others = [f"refs/pull/{i}/head" for i in range(6)]
    _refs_on(http_remote, workrepo, others + [f"refs/mgit/v/{i}" for i in range(20)])
    monkeypatch.chdir(workrepo)
    repo = find_repo()

    assert len(remotes.ls_remote(repo, http_remote.url, "refs/mgit/v/*")) == 20
    assert remotes.protocol(repo, http_remote.url) == ("-c", "protocol.version=0")


@pytest.mark.parametrize(
    ("remote", "shown"),
    [
        ("https://user:hf_token@huggingface.co/org/m", "https://huggingface.co/org/m"),
        ("http://tok@127.0.0.1:8080/r.git", "http://127.0.0.1:8080/r.git"),
        ("https://host/p@th", "https://host/p@th"),  # an @ in the path is no user
        ("origin", "origin"),
        ("git@github.com:org/m.git", "git@github.com:org/m.git"),  # scp-like: no password
    ],
)
def test_a_remote_is_shown_without_its_credentials(remote: str, shown: str) -> None:
    assert anonymized(remote) == shown
    assert "token" not in remote_file_name(remote)


def test_an_unreachable_remote_is_named_without_its_password(
    workrepo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workrepo)
    with pytest.raises(remotes.RemoteUnreachable) as raised:
        remotes.ls_remote(find_repo(), "http://user:s3cret@127.0.0.1:1/x.git", "refs/*")
    assert "s3cret" not in str(raised.value)
    assert str(raised.value).startswith("http://127.0.0.1:1/x.git could not be reached")


def test_a_fetch_from_a_url_brings_its_notes_under_a_ref_git_accepts(
    bare_remote: Remote, tmp_path: Path
) -> None:
    """`git mgit fetch <URL>` (no remote by that name): the remote's lineage notes are
    fetched beside ours under the URL made one ref component; as given, git refused it."""
    src = init_mgit_repo(tmp_path / "src")
    run_git("notes", "--ref=mgit", "add", "-m", '{"name":"base"}', "HEAD", cwd=src)
    run_git("push", "-q", bare_remote.url, "main", cwd=src)  # the notes with it (pre-push)
    work = init_mgit_repo(tmp_path / "work")
    run_git("fetch", "-q", bare_remote.url, "main", cwd=work)

    mgit("fetch", bare_remote.url, cwd=work)

    fetched = run_git("for-each-ref", "--format=%(refname)", "refs/notes/", cwd=work).stdout
    assert remote_notes_ref(bare_remote.url) in fetched.split()
    assert "://" not in remote_notes_ref(bare_remote.url)
    head = run_git("rev-parse", "FETCH_HEAD", cwd=work).stdout.strip()
    note = run_git("notes", "--ref=mgit", "show", head, cwd=work).stdout
    assert note.strip() == '{"name":"base"}'  # merged into ours
    assert remote_notes_ref("origin") == "refs/notes/mgit-remotes/origin"  # names as before
