"""A fresh clone's version refs fetched by name while the remote is still being listed.

A fetch lists the remote's version refs first, then fetches the closure it
needs: two exchanges with the remote, one after the other (over HTTP, two
runs of the server's git; on loopback 0.07 s and 0.13 s of a 54 MiB LFS
clone). In a fresh clone the versions wanted are the checkout's, and the
refs of a version are named after it: `refs/mgit/v/<version>` for a pushed
tip (published whole), `refs/mgit/v/<version>.<bases>` for a delta (a
fine-tune of a base in the same commit, an older commit). So a fresh clone
fetches `refs/mgit/v/<version>*` for each (a glob: a version the remote
lacks fails nothing), and the lineage notes, beside the listing. The
listing still runs (commands that stay offline read what it recorded) and
decides: what the guess brought counts as here, the rest of the closure (a
delta's bases) is fetched as before.

Only over HTTP(S), and never interactively: the guess must not ask for a
password beside the listing (git's prompts and askpass are off, and Git
Credential Manager's windows); without stored credentials it fails and the
listing's fetch asks, as before.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable

from git_mgit.gitcmd import Repo
from git_mgit.store.lookup import VERSION_PREFIX
from git_mgit.transfer import notes
from git_mgit.transfer.remotes import KEEP_PACKS

_QUIET = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "GCM_INTERACTIVE": "never"}


def begin(
    repo: Repo, remote: str, url: str, versions: Iterable[str]
) -> subprocess.Popen[bytes] | None:
    """Start fetching the versions' refs from `remote` (at `url`), if it is reached over
    HTTP(S) and this clone has no version ref yet; wait() on what it returns (its outcome
    does not matter: the listing decides)."""
    names = [f"{VERSION_PREFIX}{v}*" for v in versions]
    if not names or not url.startswith(("http://", "https://")):
        return None
    if repo.git("for-each-ref", "--count=1", "--format=%(refname)", VERSION_PREFIX):
        return None
    return subprocess.Popen(
        ["git", *KEEP_PACKS, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote]
        + [f"+{name}:{name}" for name in names]
        + [notes.notes_refspec(remote)],  # a glob: a remote without notes fails nothing
        cwd=repo.worktree or repo.git_dir,
        env={**os.environ, **_QUIET},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
