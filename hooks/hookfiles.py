"""The hook scripts git-mgit installs, and how they share a hook with the user's own.

git runs exactly one file per hook name, so (as git-lfs does) a hook that was
there first is kept as `<name>.mgit-chained` and our script runs it after
`git-mgit hook <name>`, with the same arguments and the same standard input.
Nothing a user wrote is ever deleted without --force.
"""

from __future__ import annotations

import os
from pathlib import Path

from git_mgit.errors import MgitError

# Every hook is a process start on a git path, so git-mgit installs only
# those it cannot do without: pre-push (objects and notes travel with the
# branches) and pre-commit (checks that refuse a model stored wrong).
HOOKS = ("pre-push", "pre-commit")
# Hooks earlier versions installed: setup removes ours and restores chained ones.
RETIRED = ("post-checkout", "post-merge")
MARKER = "# git-mgit hook (managed by git-mgit; remove with git mgit uninstall)"
CHAINED = ".mgit-chained"

LISTING_FD_ENV = "GIT_MGIT_LISTING_FD"  # pre-push: the descriptor of the listing begun
LISTED_ENV = "GIT_MGIT_LISTED"  # pre-push: what it lists (a remote's name, or a push URL)
LISTING_END = "# git ls-remote: exit "  # the listing's last line, before the exit status
_RUN = """\tprintf '%s' "$stdin" | git-mgit hook {name} "$@" || exit $?"""
# pre-push lists the remote's refs as git-mgit's own listing would (protocol v0: every
# ref, matched there), beginning before git-mgit does: a Python start takes as long. It
# lists the URL git pushes to ($2; git runs the hook once for each of a remote's push
# URLs), by the remote's name ($1) where that is its fetch URL: remote.<name>.* holds then.
_RUN_LISTING = """\
\tt=$1; [ "$(git remote get-url -- "$1" 2>/dev/null)" = "$2" ] || t=$2
\t{{ git -c protocol.version=0 ls-remote "$t" </dev/null 2>&1; echo "{end}$?"; }} |
\t\t{{ exec 3<&0; printf '%s' "$stdin" | {env}=3 {listed}="$t" git-mgit hook {name} "$@"; }} ||
\t\texit $?"""
_TEMPLATE = """\
#!/bin/sh
{marker}
# Runs `git-mgit hook {name}`, then the {name} hook this one replaced
# ({name}{chained}, if any) with the same arguments and standard input.
stdin=$(cat; echo .)
stdin=${{stdin%.}}
if command -v git-mgit >/dev/null 2>&1; then
{run}
else
\tprintf >&2 '%s\\n' "git-mgit: this repository's {name} hook needs git-mgit, which is not on PATH; install git-mgit (then 'git mgit uninstall --local' removes its hooks) or delete $0"
\texit 1
fi
chained="$0{chained}"
if [ -x "$chained" ]; then
\tprintf '%s' "$stdin" | "$chained" "$@" || exit $?
fi
"""


def script(name: str) -> str:
    """The POSIX sh text of our `name` hook.

    A failure of ours stops git (a push without its tensors would leave the
    remote with manifests it cannot check out) before the chained hook runs.
    """
    run = (_RUN_LISTING if name == "pre-push" else _RUN).format(
        name=name, end=LISTING_END, env=LISTING_FD_ENV, listed=LISTED_ENV
    )
    return _TEMPLATE.format(marker=MARKER, name=name, chained=CHAINED, run=run)


def is_ours(content: bytes) -> bool:
    """Any version of our script: the marker is its second line."""
    lines = content.splitlines()
    return len(lines) > 1 and lines[1].rstrip(b"\r") == MARKER.encode()


def _read(path: Path) -> bytes | None:
    """The hook's bytes; None when absent; b"" (foreign) when unreadable."""
    if not os.path.lexists(path):
        return None
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _write(path: Path, content: bytes) -> None:
    """Replace atomically, so git never runs a half-written hook."""
    tmp = path.with_name(f".{path.name}.mgit-{os.getpid()}.tmp")
    tmp.write_bytes(content)
    tmp.chmod(0o755)
    os.replace(tmp, path)


def install(hooks_dir: Path, name: str, force: bool = False) -> str | None:
    """Put our `name` hook in place, chaining a foreign one; say what changed, or None."""
    path, chained = hooks_dir / name, hooks_dir / (name + CHAINED)
    want = script(name).encode()
    current = _read(path)
    if current == want and os.access(path, os.X_OK):
        return None
    hooks_dir.mkdir(parents=True, exist_ok=True)
    if current is None:
        _write(path, want)
        runs = f"; it runs the existing {chained.name}" if os.path.lexists(chained) else ""
        return f"installed {name} hook in {hooks_dir}{runs}"
    if is_ours(current):
        _write(path, want)
        return f"updated {name} hook in {hooks_dir}"
    if os.path.lexists(chained):
        if not force:
            raise MgitError(
                f"{path} is not git-mgit's hook and {chained.name} already exists; "
                f"re-run with --force to chain {name} in place of {chained.name} "
                "(which git stopped running when something replaced our hook)"
            )
        os.replace(path, chained)
    else:
        try:
            # link() fails if the name is taken, so a concurrent setup cannot
            # overwrite a chained hook; fall back to rename where links are
            # unsupported.
            os.link(path, chained, follow_symlinks=False)
        except FileExistsError:
            raise MgitError(
                f"{chained} appeared while installing hooks; re-run git mgit install"
            ) from None
        except (OSError, NotImplementedError):
            os.rename(path, chained)
    _write(path, want)
    return f"moved existing {name} hook to {chained.name}; git-mgit's {name} hook runs it"


def remove(hooks_dir: Path, name: str) -> str | None:
    """Remove our `name` hook and put the chained one back; foreign hooks stay."""
    path, chained = hooks_dir / name, hooks_dir / (name + CHAINED)
    current = _read(path)
    if current is not None and not is_ours(current):
        if os.path.lexists(chained):
            return f"left {path} alone (not git-mgit's); {chained.name} is still there"
        return None
    if current is not None:
        path.unlink()
    if os.path.lexists(chained):
        os.rename(chained, path)
        return f"restored {name} hook from {chained.name}"
    return f"removed {name} hook" if current is not None else None
