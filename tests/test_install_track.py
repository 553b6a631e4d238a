"""install / uninstall / track / untrack, hooks and per-repository setup, on real git."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from git_mgit import gitcmd, setup
from git_mgit.cli import main
from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo, git
from git_mgit.hooks import hookfiles

HEX64 = "0123456789abcdef" * 4
SYSTEM_PATH = "/usr/bin:/bin"  # sh, cat, printf and git, but no git-mgit

FAKE_MGIT = """#!/bin/sh
# Records how a hook called it, so tests can see what reached git-mgit.
printf '%s\\n' "$@" > "$LOG/mgit.args"
cat > "$LOG/mgit.stdin"
exit "${FAKE_MGIT_STATUS:-0}"
"""
USER_HOOK = """#!/bin/sh
# The user's own hook, chained behind ours.
printf '%s\\n' "$@" > "$LOG/user.args"
cat > "$LOG/user.stdin"
"""


def mgit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def global_config(home: Path) -> str:
    return (home / ".gitconfig").read_text()


def attrs(repo: Path, path: str) -> str:
    """`git check-attr -a`, minus the path prefix, one attribute per line."""
    out = git("check-attr", "-a", "--", path, cwd=repo)
    return "\n".join(line.split(": ", 1)[1] for line in out.splitlines())


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "repo"
    git("init", "-q", str(path))
    monkeypatch.chdir(path)
    return path


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A current directory that is not in any repository."""
    path = tmp_path / "plain"
    path.mkdir()
    monkeypatch.chdir(path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    return path


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a recording `git-mgit`; hooks' logs land in $LOG."""
    bin_dir, log = tmp_path / "fakebin", tmp_path / "log"
    bin_dir.mkdir()
    log.mkdir()
    (bin_dir / "git-mgit").write_text(FAKE_MGIT)
    (bin_dir / "git-mgit").chmod(0o755)
    monkeypatch.setenv("LOG", str(log))
    return bin_dir


def write_hook(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


# --- install / uninstall: config -------------------------------------------


def test_install_writes_every_key_and_twice_changes_nothing(isolated_git, outside, capsys):
    rc, out, _ = mgit(capsys, "install")
    assert rc == 0
    for key, value in setup.FILTER_CONFIG.items():
        assert git("config", "--global", "--get-all", key) == value
        assert key in out
    before = global_config(isolated_git)
    rc, out, _ = mgit(capsys, "install")
    assert rc == 0
    assert "nothing to do" in out
    assert global_config(isolated_git) == before


def test_install_refuses_a_foreign_value_without_force(isolated_git, outside, capsys):
    git("config", "--global", "filter.mgit.clean", "other-tool clean %f")
    rc, _, err = mgit(capsys, "install")
    assert rc == 2
    assert "filter.mgit.clean" in err and "other-tool clean %f" in err and "--force" in err
    assert git("config", "--global", "filter.mgit.clean") == "other-tool clean %f"
    # All or nothing: no other key was written either.
    assert git("config", "--global", "filter.mgit.process", check=False) == ""

    rc, _, _ = mgit(capsys, "install", "--force")
    assert rc == 0
    for key, value in setup.FILTER_CONFIG.items():
        assert git("config", "--global", "--get-all", key) == value


def test_uninstall_removes_only_our_values_and_empty_sections(isolated_git, outside, capsys):
    before = git("config", "--global", "--get-regexp", "mgit").splitlines()  # the suite's own
    assert mgit(capsys, "install")[0] == 0
    git("config", "--global", "filter.mgit.smudge", "my-own smudge")
    rc, out, _ = mgit(capsys, "uninstall")
    assert rc == 0
    assert "left filter.mgit.smudge alone" in out
    after = git("config", "--global", "--get-regexp", "mgit").splitlines()
    assert after == [*before, "filter.mgit.smudge my-own smudge"]
    text = global_config(isolated_git)
    assert '[merge "mgit"]' not in text and '[diff "mgit"]' not in text
    assert git("config", "--global", "init.defaultBranch") == "main"


def test_install_local_writes_only_the_repository_config(isolated_git, repo, capsys):
    before = global_config(isolated_git)
    assert mgit(capsys, "install", "--local", "--skip-repo")[0] == 0
    for key, value in setup.FILTER_CONFIG.items():
        assert git("config", "--local", key) == value
    assert global_config(isolated_git) == before
    assert not (repo / ".git" / "hooks" / "pre-push").exists()  # --skip-repo
    assert mgit(capsys, "uninstall", "--local")[0] == 0
    assert git("config", "--local", "--get-regexp", "mgit", check=False) == ""


def test_install_system_writes_the_system_config(
    isolated_git, outside, tmp_path, monkeypatch, capsys
):
    system = tmp_path / "gitconfig-system"
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(system))
    monkeypatch.delenv("GIT_CONFIG_NOSYSTEM")
    before = global_config(isolated_git)
    assert mgit(capsys, "install", "--system")[0] == 0
    for key, value in setup.FILTER_CONFIG.items():
        assert git("config", "--file", str(system), key) == value
    assert global_config(isolated_git) == before
    assert mgit(capsys, "uninstall", "--system")[0] == 0
    assert "mgit" not in system.read_text()


def test_local_outside_a_repository_is_a_clear_error(outside, capsys):
    rc, _, err = mgit(capsys, "install", "--local")
    assert rc == 2
    assert "--local needs a repository" in err


# --- per-repository setup ----------------------------------------------------


def test_ensure_repo_adds_refspecs_for_every_remote_and_then_does_nothing(repo):
    git("remote", "add", "origin", "/srv/origin.git")
    git("remote", "add", "up.stream", "/srv/upstream.git")
    git(
        "config", "--replace-all", "remote.up.stream.fetch", "+refs/heads/main:refs/remotes/up/main"
    )
    git("config", "notes.rewriteRef", "refs/notes/commits")
    changes = setup.ensure_repo(find_repo())
    assert changes
    assert git("config", "--get-all", "remote.origin.fetch").splitlines() == [
        "+refs/heads/*:refs/remotes/origin/*",
        "+refs/notes/mgit*:refs/notes/mgit-remotes/origin*",
    ]
    assert git("config", "--get-all", "remote.up.stream.fetch").splitlines() == [
        "+refs/heads/main:refs/remotes/up/main",
        "+refs/notes/mgit*:refs/notes/mgit-remotes/up.stream*",
    ]
    assert git("config", "--get-all", "notes.rewriteRef").splitlines() == [
        "refs/notes/commits",
        "refs/notes/mgit",
    ]
    config = (repo / ".git" / "config").read_bytes()
    hooks = {name: (repo / ".git" / "hooks" / name).read_bytes() for name in hookfiles.HOOKS}
    assert setup.ensure_repo(find_repo()) == []
    assert (repo / ".git" / "config").read_bytes() == config
    assert {
        name: (repo / ".git" / "hooks" / name).read_bytes() for name in hookfiles.HOOKS
    } == hooks


def test_ensure_repo_fast_path_runs_git_once(repo, monkeypatch):
    git("remote", "add", "origin", "/srv/origin.git")
    r = find_repo()
    setup.ensure_repo(r)
    calls = []
    real_run = subprocess.run

    def counting_run(cmd, *args, **kwargs):
        calls.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(gitcmd.subprocess, "run", counting_run)
    assert setup.ensure_repo(r) == []
    assert [cmd[:2] for cmd in calls] == [["git", "config"]]


def test_ensure_repo_picks_up_a_remote_added_later(repo):
    setup.ensure_repo(find_repo())
    git("remote", "add", "late", "/srv/late.git")
    assert setup.ensure_repo(find_repo()) == [
        "remote late: fetch +refs/notes/mgit*:refs/notes/mgit-remotes/late*",
    ]


def test_ensure_repo_drops_the_fetch_everything_refspec_of_earlier_versions(repo):
    """Earlier versions fetched every tensor object with every fetch; objects come on demand now."""
    git("remote", "add", "origin", "/srv/origin.git")
    git("config", "--add", "remote.origin.fetch", setup.LEGACY_OBJECTS_REFSPEC)
    changes = setup.ensure_repo(find_repo())
    assert "remote origin: objects are fetched on demand now, not by every fetch" in changes
    assert setup.LEGACY_OBJECTS_REFSPEC not in git("config", "--get-all", "remote.origin.fetch")
    assert setup.ensure_repo(find_repo()) == []


def test_object_trees_are_marked_minus_delta(repo):
    info = repo / ".git" / "info" / "attributes"
    info.parent.mkdir(exist_ok=True)
    info.write_text("*.bin binary")  # the user's own line, no final newline
    assert (
        git("check-attr", "delta", "--", f"ab/cd/{HEX64}") == f"ab/cd/{HEX64}: delta: unspecified"
    )
    setup.ensure_repo(find_repo())
    assert git("check-attr", "delta", "--", f"ab/cd/{HEX64}") == f"ab/cd/{HEX64}: delta: unset"
    assert info.read_text() == f"*.bin binary\n{setup.ATTR_COMMENT}\n{setup.ATTR_LINE}\n"
    setup.remove_repo(find_repo())
    assert (
        git("check-attr", "delta", "--", f"ab/cd/{HEX64}") == f"ab/cd/{HEX64}: delta: unspecified"
    )
    assert info.read_text() == "*.bin binary\n"


def test_hooks_go_where_core_hookspath_points(repo):
    git("config", "core.hooksPath", "shared-hooks")
    setup.ensure_repo(find_repo())
    for name in hookfiles.HOOKS:
        hook = repo / "shared-hooks" / name
        assert hook.read_text() == hookfiles.script(name)
        assert os.access(hook, os.X_OK)
        assert not (repo / ".git" / "hooks" / name).exists()
    assert setup.ensure_repo(find_repo()) == []


def test_an_outdated_hook_of_ours_is_rewritten(repo):
    hook = repo / ".git" / "hooks" / "pre-push"
    write_hook(hook, f"#!/bin/sh\n{hookfiles.MARKER}\nexec git-mgit hook pre-push\n")
    changes = setup.ensure_repo(find_repo())
    assert any(c.startswith("updated pre-push hook") for c in changes)
    assert hook.read_text() == hookfiles.script("pre-push")
    assert not (repo / ".git" / "hooks" / "pre-push.mgit-chained").exists()


def test_foreign_hook_and_existing_chained_hook_need_force(repo):
    hooks = repo / ".git" / "hooks"
    write_hook(hooks / "pre-push", "#!/bin/sh\necho new\n")
    write_hook(hooks / "pre-push.mgit-chained", "#!/bin/sh\necho old\n")
    with pytest.raises(MgitError, match="--force"):
        setup.ensure_repo(find_repo())
    assert (hooks / "pre-push").read_text() == "#!/bin/sh\necho new\n"
    assert (hooks / "pre-push.mgit-chained").read_text() == "#!/bin/sh\necho old\n"
    setup.ensure_repo(find_repo(), force=True)
    assert (hooks / "pre-push").read_text() == hookfiles.script("pre-push")
    assert (hooks / "pre-push.mgit-chained").read_text() == "#!/bin/sh\necho new\n"


def test_chained_pre_push_gets_the_same_args_and_stdin_through_git_push(
    repo, tmp_path, fake_bin, monkeypatch, capsys
):
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote))
    git("remote", "add", "origin", str(remote))
    git("commit", "-q", "--allow-empty", "-m", "one")
    write_hook(repo / ".git" / "hooks" / "pre-push", USER_HOOK)
    rc, out, _ = mgit(capsys, "install")
    assert rc == 0
    assert "moved existing pre-push hook to pre-push.mgit-chained" in out

    monkeypatch.setenv("PATH", f"{fake_bin}:{SYSTEM_PATH}")
    git("push", "-q", "origin", "main")
    log = Path(os.environ["LOG"])
    head = git("rev-parse", "HEAD")
    assert (log / "mgit.args").read_text() == f"hook\npre-push\norigin\n{remote}\n"
    assert (log / "user.args").read_text() == f"origin\n{remote}\n"
    stdin = f"refs/heads/main {head} refs/heads/main {'0' * 40}\n"
    assert (log / "mgit.stdin").read_text() == stdin
    assert (log / "user.stdin").read_text() == stdin


def test_a_failing_pre_push_stops_before_the_chained_hook(repo, fake_bin, monkeypatch):
    setup.ensure_repo(find_repo())
    hooks = repo / ".git" / "hooks"
    write_hook(hooks / "pre-push.mgit-chained", USER_HOOK)
    monkeypatch.setenv("FAKE_MGIT_STATUS", "3")
    env = {**os.environ, "PATH": f"{fake_bin}:{SYSTEM_PATH}"}
    proc = subprocess.run([str(hooks / "pre-push"), "origin", "url"], input=b"", env=env)
    assert proc.returncode == 3
    assert not (Path(os.environ["LOG"]) / "user.args").exists()


def test_without_git_mgit_on_path_pre_push_fails_with_one_line(repo, monkeypatch):
    assert shutil.which("git-mgit", path=SYSTEM_PATH) is None
    setup.ensure_repo(find_repo())
    hooks = repo / ".git" / "hooks"
    env = {**os.environ, "PATH": SYSTEM_PATH}
    push = subprocess.run(
        [str(hooks / "pre-push"), "origin", "url"],
        input="",
        env=env,
        capture_output=True,
        text=True,
    )
    assert push.returncode != 0
    assert "git-mgit, which is not on PATH" in push.stderr
    assert "git mgit uninstall --local" in push.stderr
    assert len(push.stderr.splitlines()) == 1


def test_uninstall_restores_the_repository_as_it_was(repo, capsys):
    git("remote", "add", "origin", "/srv/origin.git")
    hooks = repo / ".git" / "hooks"
    write_hook(hooks / "pre-push", USER_HOOK)
    config = (repo / ".git" / "config").read_bytes()
    assert mgit(capsys, "install")[0] == 0
    assert (hooks / "pre-push.mgit-chained").read_text() == USER_HOOK
    rc, out, _ = mgit(capsys, "uninstall")
    assert rc == 0
    assert "restored pre-push hook" in out
    assert (hooks / "pre-push").read_text() == USER_HOOK
    assert os.access(hooks / "pre-push", os.X_OK)
    assert not (hooks / "pre-push.mgit-chained").exists()
    assert (repo / ".git" / "config").read_bytes() == config
    assert not (repo / ".git" / "info" / "attributes").exists()


def test_hook_command_dispatches_args_and_stdin(monkeypatch, capsys):
    seen = []

    def run(args: list[str], stdin: bytes) -> int:
        seen.append((args, stdin))
        return 3

    monkeypatch.setitem(sys.modules, "git_mgit.hooks.pre_push", types.SimpleNamespace(run=run))
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(b"refs/heads/a 1 refs/heads/a 0\n"))
    )
    assert mgit(capsys, "hook", "pre-push", "origin", "--odd-arg")[0] == 3
    assert seen == [(["origin", "--odd-arg"], b"refs/heads/a 1 refs/heads/a 0\n")]


# --- track / untrack -------------------------------------------------------


TRACKED = {"diff: mgit", "filter: mgit", "merge: mgit", "text: unset"}


def test_track_writes_the_attribute_line_once(repo, capsys):
    (repo / ".gitattributes").write_text("*.txt text\n")
    rc, out, _ = mgit(capsys, "track", "*.safetensors")
    assert rc == 0
    assert 'Tracking "*.safetensors"' in out
    expected = "*.txt text\n*.safetensors filter=mgit diff=mgit merge=mgit -text\n"
    assert (repo / ".gitattributes").read_text() == expected
    assert set(attrs(repo, "sub/model.safetensors").splitlines()) == TRACKED
    assert attrs(repo, "notes.txt") == "text: set"
    assert (repo / ".git" / "hooks" / "pre-push").exists()  # track sets the repository up

    rc, out, _ = mgit(capsys, "track", "*.safetensors")
    assert rc == 0
    assert "already tracked" in out
    assert (repo / ".gitattributes").read_text() == expected


def test_track_escapes_spaces_and_untrack_removes_the_line(repo, capsys):
    assert mgit(capsys, "track", "my model.safetensors")[0] == 0
    assert (repo / ".gitattributes").read_text() == (
        "my[[:space:]]model.safetensors filter=mgit diff=mgit merge=mgit -text\n"
    )
    assert set(attrs(repo, "my model.safetensors").splitlines()) == TRACKED
    rc, out, _ = mgit(capsys, "untrack", "my model.safetensors")
    assert rc == 0
    assert 'Untracking "my model.safetensors"' in out
    assert (repo / ".gitattributes").read_text() == ""
    assert attrs(repo, "my model.safetensors") == ""


def test_track_replaces_other_attributes_only_with_force(repo, capsys):
    other = "*.bin filter=other -diff\n*.pt filter=lfs diff=lfs merge=lfs -text\n"
    (repo / ".gitattributes").write_text(other)
    rc, _, err = mgit(capsys, "track", "*.pt", "*.bin")
    assert rc == 2
    assert '"*.bin filter=other -diff"' in err and "--force" in err and "*.pt" not in err
    assert (repo / ".gitattributes").read_text() == other  # all or nothing
    assert mgit(capsys, "track", "--force", "*.bin")[0] == 0
    assert (repo / ".gitattributes").read_text() == (
        "*.bin filter=mgit diff=mgit merge=mgit -text\n*.pt filter=lfs diff=lfs merge=lfs -text\n"
    )
    assert set(attrs(repo, "w.bin").splitlines()) == TRACKED


def test_track_takes_a_pattern_over_from_git_lfs(repo, capsys):
    """The line `git lfs track` writes (every model repository on the Hugging Face Hub has
    one for *.safetensors) is replaced without --force, saying what happens to the files
    committed before; git-lfs's other patterns stay its own."""
    hub = (
        "*.bin filter=lfs diff=lfs merge=lfs -text\n"
        "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
        "*.safetensors -text merge=lfs diff=lfs filter=lfs\n"  # the same again, reordered
    )
    (repo / ".gitattributes").write_text(hub)
    rc, out, _ = mgit(capsys, "track", "*.safetensors")
    assert rc == 0
    assert 'Tracking "*.safetensors" in place of git-lfs' in out
    assert "git mgit migrate import" in out
    taken = (
        "*.bin filter=lfs diff=lfs merge=lfs -text\n"
        "# git-mgit tracks the next pattern in place of git-lfs's line: "
        "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
        "*.safetensors filter=mgit diff=mgit merge=mgit -text\n"
    )
    assert (repo / ".gitattributes").read_text() == taken
    assert set(attrs(repo, "m.safetensors").splitlines()) == TRACKED
    assert mgit(capsys, "track", "*.safetensors")[1].strip() == '"*.safetensors" is already tracked'
    assert (repo / ".gitattributes").read_text() == taken

    # untrack gives the pattern back to git-lfs, as `git lfs track` had written it
    rc, out, _ = mgit(capsys, "untrack", "*.safetensors")
    assert rc == 0 and "git-lfs tracks it again" in out
    assert (repo / ".gitattributes").read_text() == (
        "*.bin filter=lfs diff=lfs merge=lfs -text\n"
        "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
    )
    assert "filter: lfs" in attrs(repo, "m.safetensors")
    assert mgit(capsys, "track", "*.safetensors")[0] == 0  # and takes it over once more
    assert (repo / ".gitattributes").read_text() == taken


def test_untrack_of_an_untracked_pattern_changes_nothing(repo, capsys):
    assert mgit(capsys, "track", "*.safetensors")[0] == 0
    before = (repo / ".gitattributes").read_text()
    rc, _, err = mgit(capsys, "untrack", "*.safetensors", "*.pt")
    assert rc == 2
    assert '"*.pt" not tracked' in err
    assert (repo / ".gitattributes").read_text() == before


def test_track_refuses_a_folder_pattern(repo, capsys):
    rc, _, err = mgit(capsys, "track", "models/")
    assert rc == 2
    assert "models/**" in err
    assert not (repo / ".gitattributes").exists()


def test_track_without_patterns_lists_them_from_every_attributes_file(repo, capsys):
    assert mgit(capsys, "track", "*.safetensors")[0] == 0
    (repo / "sub").mkdir()
    (repo / "sub" / ".gitattributes").write_text(
        "*.pt filter=mgit diff=mgit merge=mgit -text\n*.md text\n"
    )
    rc, out, _ = mgit(capsys, "track")
    assert rc == 0
    assert out == (
        "Listing tracked patterns\n    *.safetensors (.gitattributes)\n    *.pt (sub/.gitattributes)\n"
    )


def test_track_hints_then_renormalizes_files_already_in_the_index(repo, capsys):
    (repo / "w.safetensors").write_text("weights\n")
    (repo / "notes.txt").write_text("notes\n")
    git("add", ".")
    git("commit", "-q", "-m", "plain blobs")
    # A stand-in clean filter, so this test does not depend on the real one.
    git("config", "filter.mgit.clean", "tr a-z A-Z")
    rc, _, err = mgit(capsys, "track", "*.safetensors")
    assert rc == 0
    assert "1 file(s) already in the index match" in err and "w.safetensors" in err
    assert git("cat-file", "blob", ":w.safetensors") == "weights"

    rc, out, _ = mgit(capsys, "track", "--renormalize", "*.safetensors")
    assert rc == 0
    assert "Re-added 1 file(s)" in out
    assert git("cat-file", "blob", ":w.safetensors") == "WEIGHTS"
    assert git("cat-file", "blob", ":notes.txt") == "notes"


def test_hooks_earlier_versions_installed_are_retired(repo):
    hooks = repo / ".git" / "hooks"
    write_hook(
        hooks / "post-checkout",
        f"#!/bin/sh\n{hookfiles.MARKER}\nexec git-mgit hook post-checkout\n",
    )
    write_hook(hooks / "post-checkout.mgit-chained", USER_HOOK)
    write_hook(hooks / "post-merge", USER_HOOK)  # the user's own: left alone
    changes = setup.ensure_repo(find_repo())
    assert "restored post-checkout hook from post-checkout.mgit-chained" in changes
    assert (hooks / "post-checkout").read_text() == USER_HOOK
    assert (hooks / "post-merge").read_text() == USER_HOOK
    assert setup.ensure_repo(find_repo()) == []
