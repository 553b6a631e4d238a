"""The gated push of pointer refs (transfer/stores/gitpush.py's Gate), against a real bare
remote: it sends when opened, and never when shut or when the process holding it dies."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from git_mgit.gitcmd import find_repo
from git_mgit.transfer.stores.gitpush import Gate
from tests.gitsandbox import Remote, commit_files, init_bare_remote, run_git

pytestmark = pytest.mark.skipif(os.name != "posix", reason="a gate needs POSIX pipes")


def _ready(workrepo: Path, bare_remote: Remote) -> str:
    commit = commit_files(workrepo, {"a.txt": "a\n"}, "a")
    run_git("remote", "add", "origin", bare_remote.url, cwd=workrepo)
    return commit


def _remote_refs(bare_remote: Remote) -> str:
    return run_git("for-each-ref", "refs/mgit/", cwd=bare_remote.path).stdout


def test_an_opened_gate_sends_and_a_shut_one_sends_nothing(
    workrepo: Path, bare_remote: Remote
) -> None:
    commit = _ready(workrepo, bare_remote)
    repo = find_repo(workrepo)
    shut = Gate.begin(repo, "origin", [f"+{commit}:refs/mgit/v/shut"])
    assert shut is not None
    shut.shut()
    assert _remote_refs(bare_remote) == ""
    opened = Gate.begin(repo, "origin", [f"+{commit}:refs/mgit/v/opened"])
    assert opened is not None
    time.sleep(0.2)  # git has listed the remote and waits in the hook: nothing sent yet
    assert _remote_refs(bare_remote) == ""
    opened.open()
    assert _remote_refs(bare_remote) == f"{commit} commit\trefs/mgit/v/opened\n"


_HOLDER = """
import sys, time
from git_mgit.gitcmd import find_repo
from git_mgit.transfer.stores.gitpush import Gate
assert Gate.begin(find_repo(sys.argv[1]), "origin", [f"+{sys.argv[2]}:refs/mgit/v/orphan"])
print("begun", flush=True)
time.sleep(600)
"""


def test_a_gate_whose_process_dies_sends_nothing(workrepo: Path, bare_remote: Remote) -> None:
    """Killed while its push waits (a push stopped by the user, the uploads' process gone):
    the pipe closes, the hook reads no verdict, and git sends nothing."""
    commit = _ready(workrepo, bare_remote)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(workrepo), commit],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "GIT_TRACE": str(workrepo.parent / "trace")},
    )
    assert holder.stdout is not None and holder.stdout.readline() == "begun\n"
    trace = workrepo.parent / "trace"
    for _ in range(500):  # git reached the hook
        if trace.exists() and "gate-hooks/pre-push" in trace.read_text():
            break
        time.sleep(0.02)
    else:
        pytest.fail("the gated push never ran its hook")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    for _ in range(500):  # the orphaned git push ends on its own
        pushes = subprocess.run(
            ["pgrep", "-f", "refs/mgit/v/orphan"], capture_output=True, text=True
        ).stdout.split()
        if not pushes:
            break
        time.sleep(0.02)
    else:
        pytest.fail("the gated push outlived its process")
    assert _remote_refs(bare_remote) == ""


def test_a_failed_first_attempt_is_retried_for_refs_still_as_they_were(
    workrepo: Path, bare_remote: Remote
) -> None:
    """push_refs after its first attempt failed: a name the remote still holds as listed
    before (a migration replacing it) is pushed again; one another clone published meanwhile
    counts as done."""
    from git_mgit.errors import MgitError
    from git_mgit.transfer.stores.gitpush import push_refs

    old = _ready(workrepo, bare_remote)
    run_git("push", "-q", "origin", f"{old}:refs/mgit/v/moved", cwd=workrepo)
    new = commit_files(workrepo, {"b.txt": "b\n"}, "b")
    theirs = commit_files(workrepo, {"c.txt": "c\n"}, "c")
    run_git("update-ref", "refs/mgit/v/moved", new, cwd=workrepo)
    run_git("update-ref", "refs/mgit/v/raced", new, cwd=workrepo)

    def fails() -> None:
        run_git("push", "-q", "origin", f"{theirs}:refs/mgit/v/raced", cwd=workrepo)
        raise MgitError("the first attempt failed")

    names = ["refs/mgit/v/moved", "refs/mgit/v/raced"]
    assert push_refs(find_repo(workrepo), "origin", names, first=fails, before={names[0]: old})
    assert _remote_refs(bare_remote).splitlines() == [
        f"{new} commit\trefs/mgit/v/moved",
        f"{theirs} commit\trefs/mgit/v/raced",
    ]


def test_no_gate_where_git_could_not_run_its_hook(
    workrepo: Path, bare_remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git skips a hook it may not execute and sends at once: then there is no gate (the
    refs are pushed after the uploads, by name)."""
    commit = _ready(workrepo, bare_remote)
    repo = find_repo(workrepo)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a folder mounted noexec
    assert Gate.begin(repo, "origin", [f"+{commit}:refs/mgit/v/x"]) is None
    assert _remote_refs(bare_remote) == ""


def test_an_opened_gate_sends_to_every_push_url_of_a_mirror(
    workrepo: Path, bare_remote: Remote, tmp_path: Path
) -> None:
    """git runs the gate's hook once for each push URL: opening lets each of them send."""
    from git_mgit.transfer.stores.gitpush import push_refs

    commit = _ready(workrepo, bare_remote)
    mirror = init_bare_remote(tmp_path / "mirror.git")
    for url in (bare_remote.url, mirror.url):
        run_git("remote", "set-url", "--add", "--push", "origin", url, cwd=workrepo)
    repo = find_repo(workrepo)
    name = "refs/mgit/v/mirrored"
    gate = Gate.begin(repo, "origin", [f"+{commit}:{name}"])
    assert gate is not None
    assert push_refs(repo, "origin", [name], first=gate.open)
    for there in (bare_remote, mirror):
        assert _remote_refs(there) == f"{commit} commit\t{name}\n"


def test_a_retry_counts_a_name_done_only_where_every_push_url_has_it(
    workrepo: Path, bare_remote: Remote, tmp_path: Path
) -> None:
    """The first attempt reached the fetch URL but not the mirror: the retry lists each
    push URL, and pushes the name again."""
    from git_mgit.errors import MgitError
    from git_mgit.transfer.stores.gitpush import push_refs

    commit = _ready(workrepo, bare_remote)
    mirror = init_bare_remote(tmp_path / "mirror.git")
    for url in (bare_remote.url, mirror.url):
        run_git("remote", "set-url", "--add", "--push", "origin", url, cwd=workrepo)
    name = "refs/mgit/v/half"
    run_git("update-ref", name, commit, cwd=workrepo)

    def half() -> None:
        run_git("push", "-q", bare_remote.url, f"{commit}:{name}", cwd=workrepo)
        raise MgitError("the mirror refused")

    assert push_refs(find_repo(workrepo), "origin", [name], first=half)
    assert _remote_refs(mirror) == f"{commit} commit\t{name}\n"


def test_a_push_url_that_cannot_be_listed_is_pushed_to_again(
    workrepo: Path, bare_remote: Remote, tmp_path: Path
) -> None:
    """A retry finds one push URL unreachable: it counts as holding nothing (an outage may
    pass), so the names are pushed again, and what fails then is the push, with git's
    reason and what to do."""
    from git_mgit.errors import MgitError
    from git_mgit.transfer.stores.gitpush import push_refs

    commit = _ready(workrepo, bare_remote)
    gone = tmp_path / "gone.git"
    for url in (bare_remote.url, gone.as_uri()):
        run_git("remote", "set-url", "--add", "--push", "origin", url, cwd=workrepo)
    name = "refs/mgit/v/half"
    run_git("update-ref", name, commit, cwd=workrepo)

    def half() -> None:
        raise MgitError("the first attempt failed")

    with pytest.raises(MgitError, match="pushing tensor objects to origin failed"):
        push_refs(find_repo(workrepo), "origin", [name], first=half)
    assert _remote_refs(bare_remote) == f"{commit} commit\t{name}\n"  # pushed again


def test_a_shut_gate_stops_a_push_waiting_at_a_credentials_prompt(
    lfs_server, workrepo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The uploads failed while git still asks for the remote's password (an askpass dialog
    nobody answers): shut() ends git there, and the prompt with it (https's remote helper
    runs it: on a terminal it would read the user's next line); nothing reaches the
    remote."""
    commit = commit_files(workrepo, {"a.txt": "a\n"}, "a")
    run_git("remote", "add", "origin", lfs_server.repo_url(), cwd=workrepo)
    run_git("config", "--global", "--unset", "credential.helper", cwd=workrepo)
    asked = tmp_path / "asked"
    askpass = tmp_path / "askpass"
    askpass.write_text(
        f"#!/bin/sh\necho $$ > {asked}.tmp && mv {asked}.tmp {asked}\nexec sleep 600\n"
    )
    askpass.chmod(0o755)
    monkeypatch.setenv("GIT_ASKPASS", str(askpass))
    gate = Gate.begin(find_repo(workrepo), "origin", [f"+{commit}:refs/mgit/v/prompted"])
    assert gate is not None
    for _ in range(1500):
        if asked.exists():
            break
        time.sleep(0.02)
    else:
        pytest.fail("git never asked for the password")
    prompt = int(asked.read_text())
    try:
        shutting = threading.Thread(target=gate.shut, daemon=True)
        shutting.start()
        shutting.join(60)
        assert not shutting.is_alive(), "shut() waited for the prompt"
        for _ in range(500):
            if not _running(prompt):
                break
            time.sleep(0.02)
        else:
            pytest.fail("the prompt outlived the push")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(prompt, signal.SIGKILL)
    assert not run_git(
        "for-each-ref", "refs/mgit/", cwd=lfs_server.git_root / "org/repo.git"
    ).stdout


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie nobody reaped yet has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False
