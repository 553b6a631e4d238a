"""`git mgit store [migrate --to lfs|s3|refs]`: which store each remote uses, and moving it.

Without a subcommand: per remote, the store pushes use (version refs in its
git repository, its Git LFS endpoint, or an S3 bucket) and why (docs/storage.md,
"Stores"). `migrate` republishes every version a remote holds in another store.
"""

from __future__ import annotations

import argparse
import sys

from git_mgit.console.progress import format_size
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.store.lookup import RECORD_REF, VERSION_PREFIX
from git_mgit.transfer.remotes import RemoteUnreachable, default_remote, list_versions, remotes
from git_mgit.transfer.stores.choice import (
    LFS,
    REFS,
    Choice,
    choose,
    kind_of,
    parse_setting,
    recorded_store,
    with_s3_settings,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action")
    move = sub.add_parser("migrate", help="republish every version a remote holds in another store")
    move.add_argument(
        "--to",
        required=True,
        metavar="STORE",
        help="lfs, refs, s3 (the bucket mgit.store names) or s3://bucket/prefix",
    )
    move.add_argument("--remote", help="the remote (default: upstream, else origin)")


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    if args.action == "migrate":
        return _migrate(repo, args)
    names = remotes(repo)
    if not names:
        print("no remotes: add one (`git remote add origin URL`)")
        return 0
    for name in names:
        try:
            listing = list_versions(repo, name, RECORD_REF)
            recorded, note = recorded_store(repo, name, listing), ""
        except RemoteUnreachable as exc:
            listing, recorded, note = {}, None, f" (could not ask it: {exc})"
        held = any(ref.startswith(VERSION_PREFIX) for ref in listing)
        choice = choose(repo, name, recorded, holds_versions=held)
        print(f"{name}: {_where(repo, name, choice)}")
        print(f"  because {choice.reason}{note}")
    return 0


def _where(repo: Repo, remote: str, choice: Choice) -> str:
    if choice.kind == LFS:
        from git_mgit.transfer.stores.lfs.endpoint import endpoint_for

        endpoint = endpoint_for(repo, remote, "upload")
        if endpoint is None:
            return f"Git LFS, but {remote} has none: set `git config remote.{remote}.lfsurl URL`"
        return f"Git LFS at {endpoint}"
    if choice.kind == REFS:
        return "version refs in its git repository (refs/mgit/v/*)"
    return f"S3 {choice.url}"


def _migrate(repo: Repo, args: argparse.Namespace) -> int:
    from git_mgit.transfer.stores.migrate import migrate

    remote = args.remote or default_remote(repo)
    if remote is None:
        raise MgitError("no remote to migrate; name one: `git mgit store migrate --remote NAME`")
    url = _target(repo, args.to)
    target = Choice(kind_of(url), url, "git mgit store migrate")
    report = migrate(repo, remote, target)
    print(
        f"git-mgit: {remote}: {report.moved} of {report.versions} version(s) republished in "
        f"{target.describe()} ({format_size(report.sent)} sent); {remote} now records it "
        f"({RECORD_REF}): every clone pushes there",
        file=sys.stderr,
    )
    return 0


def _target(repo: Repo, to: str) -> str:
    if to == "s3":
        configured = repo.config("mgit.store") or ""
        if not configured.startswith("s3://"):
            raise MgitError(
                "--to s3 needs the bucket: `--to s3://bucket/prefix`, or "
                "`git config mgit.store s3://bucket/prefix` first"
            )
        to = configured
    url = parse_setting(to, "--to")
    if url is None:
        raise MgitError("--to needs a store: lfs, refs, s3 or s3://bucket/prefix")
    return with_s3_settings(repo, url) if url.startswith("s3://") else url
