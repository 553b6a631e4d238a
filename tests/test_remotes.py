"""What a remote lists: one exchange (protocol v0) unless it advertises too many refs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from git_mgit.gitcmd import anonymized, find_repo, remote_file_name
from git_mgit.hooks.hookfiles import LISTING_END
from git_mgit.transfer import remotes
from git_mgit.transfer.notes import remote_notes_ref
from tests.gitsandbox import Remote, commit_files, run_git
from tests.mgitrepo import init_mgit_repo, mgit, model_bytes


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


def _push_traced(root: Path, env_file: Path) -> list[str]:
    """`git push` of main through the installed pre-push hook: its GIT_TRACE lines."""
    run_git("push", "-q", "origin", "main", cwd=root, env={"GIT_TRACE": str(env_file)})
    return env_file.read_text().splitlines()


def test_the_pre_push_hook_lists_the_remote_before_git_mgit_starts(
    http_remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook's shell begins the push's one listing and hands it to git-mgit on a
    descriptor: it runs while Python starts (about as long), and git-mgit asks nothing
    again. A remote listed in v2 (many refs) is listed by git-mgit itself, as before."""
    root = init_mgit_repo(tmp_path / "src")
    run_git("remote", "add", "origin", http_remote.url, cwd=root)
    (root / "model.safetensors").write_bytes(model_bytes(1, n=64))
    run_git("add", "model.safetensors", cwd=root)
    run_git("commit", "-q", "-m", "v1", cwd=root)

    lines = _push_traced(root, tmp_path / "first.trace")
    listings = [i for i, line in enumerate(lines) if "built-in: git ls-remote" in line]
    starts = [i for i, line in enumerate(lines) if "rev-parse --path-format=absolute" in line]
    assert len(listings) == 1 and listings[0] < starts[0], lines  # before git-mgit's first git
    assert run_git("ls-remote", "origin", "refs/mgit/v/*", cwd=root).stdout  # it published

    monkeypatch.chdir(root)
    mark = remotes._many_refs_mark(find_repo(), "origin")
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text("5000\n")
    (root / "model.safetensors").write_bytes(model_bytes(2, n=64))
    run_git("commit", "-q", "-am", "v2", cwd=root)
    lines = _push_traced(root, tmp_path / "second.trace")
    listings = [line for line in lines if "built-in: git ls-remote" in line]
    assert len(listings) == 2 and "refs/mgit/v/*" in listings[1]  # v2: by prefix, its own
    assert len(run_git("ls-remote", "origin", "refs/mgit/v/*", cwd=root).stdout.splitlines()) == 2


def _handed(data: bytes) -> int:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return read


def test_a_handed_listing_reads_as_git_ls_remote_and_fails_as_it_does(workrepo: Path) -> None:
    repo = find_repo(workrepo)
    oid = "1" * 40
    good = f"{oid}\tHEAD\n{oid}\trefs/heads/main\nwarning: a line git wrote\n{oid}\trefs/mgit/v/a\n"
    listing = remotes.Listing(
        repo, "origin", ("refs/mgit/v/*",), handed=_handed(f"{good}{LISTING_END}0\n".encode())
    )
    assert listing.refs() == {"refs/mgit/v/a": oid}
    listing.close()
    said = "fatal: unable to access 'http://127.0.0.1:9/r.git/': Connection refused\n"
    failed = remotes.Listing(
        repo, "origin", ("refs/mgit/v/*",), handed=_handed(f"{said}{LISTING_END}128\n".encode())
    )
    with pytest.raises(remotes.RemoteUnreachable, match="Connection refused"):
        failed.refs()
    cut = remotes.Listing(repo, "origin", ("refs/mgit/v/*",), handed=_handed(good.encode()))
    with pytest.raises(remotes.RemoteUnreachable, match="ended early"):
        cut.refs()
    unread = remotes.Listing(repo, "origin", ("refs/mgit/v/*",), handed=_handed(good.encode()))
    unread.close()  # never read: closed, nothing waits
