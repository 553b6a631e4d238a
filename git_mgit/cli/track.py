"""Store files matching a pattern as tensor objects (with no pattern: list them)."""

from __future__ import annotations

import argparse
import shlex
import sys

from git_mgit import setup
from git_mgit.errors import MgitError
from git_mgit.gitcmd import find_repo

_SHOWN = 5  # paths listed in the re-add hint
_SAID = {
    "already": '"{}" is already tracked',
    "from-lfs": 'Tracking "{}" in place of git-lfs (versions committed before stay git-lfs '
    "pointers, checked out by git-lfs; git mgit migrate import rewrites them)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "patterns", nargs="*", metavar="PATTERN", help="gitattributes pattern, e.g. '*.safetensors'"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace other attributes a pattern already has (git-lfs's line needs no --force)",
    )
    parser.add_argument(
        "--renormalize",
        action="store_true",
        help="re-add matching files already in the index, so they are stored as tensor objects",
    )


def _list(repo) -> int:
    print("Listing tracked patterns")
    for pattern, source in setup.tracked_patterns(repo):
        print(f"    {pattern} ({source})")
    return 0


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    if not args.patterns:
        return _list(repo)
    results = setup.track(repo, args.patterns, args.force)
    for pattern, status in results:
        print(_SAID.get(status, 'Tracking "{}"').format(pattern))
    try:
        for change in setup.ensure_repo(repo):
            print(change)
    except MgitError as exc:
        # Tracking worked; hooks and refspecs can be fixed separately.
        print(f"git-mgit: warning: {exc}", file=sys.stderr)
    if not repo.git("config", "--get", "filter.mgit.process", check=False):
        print('hint: git-mgit filters are not configured; run "git mgit install"', file=sys.stderr)
    matches = setup.index_matches(repo, args.patterns)
    if args.renormalize and matches:
        setup.renormalize(repo, matches)
        print(f"Re-added {len(matches)} file(s) from the index as tensor objects")
    elif matches and any(status != "already" for _, status in results):
        shown = " ".join(shlex.quote(p) for p in matches[:_SHOWN])
        more = f" (and {len(matches) - _SHOWN} more)" if len(matches) > _SHOWN else ""
        print(
            f"hint: {len(matches)} file(s) already in the index match and are stored as they were "
            f"added: {shown}{more}\n"
            'hint: re-add them as tensor objects with "git mgit track --renormalize PATTERN..."',
            file=sys.stderr,
        )
    return 0
