"""Rewrite history into git-mgit form, or out of it, and say what it saves.

git mgit migrate info   --include '*.safetensors' --everything     # measure, change nothing
git mgit migrate import --include '*.safetensors' --everything     # plain blobs / git-lfs -> git-mgit
git mgit migrate export --include '*.safetensors' --to lfs         # git-mgit -> git-lfs (or --to plain)

Without --everything or REFs, the current branch. Every rewritten commit
gets a new id: the command ends by printing what to force-push.
"""

from __future__ import annotations

import argparse

from git_mgit import migrate
from git_mgit.console.progress import format_size
from git_mgit.gitcmd import find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("info", "import", "export"))
    parser.add_argument("refs", nargs="*", help="refs to rewrite (default: the current branch)")
    parser.add_argument(
        "--include",
        action="append",
        metavar="PATTERN",
        help="paths to convert, as in .gitattributes (repeatable; default '*.safetensors')",
    )
    parser.add_argument("--everything", action="store_true", help="every branch and tag")
    parser.add_argument(
        "--to", choices=(migrate.TO_PLAIN, migrate.TO_LFS), default=migrate.TO_PLAIN,
        help="export: plain git blobs (default) or git-lfs",
    )  # fmt: skip


def _sizes(s: migrate.Summary, mode: str) -> str:
    old, new = {
        migrate.IMPORT: ("as stored before", "git-mgit stores them in"),
        migrate.TO_PLAIN: ("git-mgit stored them in", "plain git stores them in"),
        migrate.TO_LFS: ("git-mgit stored them in", "git-lfs stores them in"),
    }[mode]
    line = (
        f"{s.versions} file version(s), {format_size(s.raw_bytes)} as files: "
        f"{old} {format_size(s.before_bytes)}, {new} {format_size(s.after_bytes)}"
    )
    if s.after_bytes and s.before_bytes:
        ratio = s.before_bytes / s.after_bytes
        saved = s.before_bytes - s.after_bytes
        line += f" ({format_size(abs(saved))} {'saved' if saved >= 0 else 'more'}, {ratio:.2f}x)"
    return line


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    patterns = args.include or ["*.safetensors"]
    mode = migrate.IMPORT if args.action in ("info", "import") else args.to
    refs = migrate.refs_to_rewrite(repo, args.everything, args.refs)
    dry = args.action == "info"
    summary = migrate.run(repo, patterns, mode, refs, dry_run=dry)
    names = [r.removeprefix("refs/heads/").removeprefix("refs/tags/") for r in refs]
    verb = "would rewrite" if dry else "rewrote"
    print(f"{verb} {summary.commits} commit(s) on {', '.join(names)}")
    print(_sizes(summary, mode))
    if dry:
        print("measured by converting; `git mgit gc` reclaims the objects this wrote")
        return 0
    if mode == migrate.IMPORT:
        from git_mgit import setup

        setup.ensure_repo(repo)  # hooks and refspecs, so pushes carry objects and notes
    remotes = repo.git("remote").split() or ["<remote>"]
    print("force-push what was rewritten (clones must re-clone or reset to it):")
    for remote in remotes:
        print(f"  git push --force-with-lease {remote} {' '.join(names)}")
    if mode == migrate.TO_LFS:
        print(f"  git lfs push --all {remotes[0]}")
    return 0
