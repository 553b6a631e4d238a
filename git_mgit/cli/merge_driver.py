"""Three-way tensor-level merge of manifests; git runs it as merge.mgit.driver."""

from __future__ import annotations

import argparse

from git_mgit.errors import MgitError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name in ("base", "ours", "theirs"):
        parser.add_argument(name, help=f"file holding the {name} version (%%O %%A %%B)")
    parser.add_argument("marker_size", nargs="?", help="conflict marker size (%%L, unused)")
    parser.add_argument("path", nargs="?", default="", help="path in the repository (%%P)")


def run(args: argparse.Namespace) -> int:
    from git_mgit.filters import merge_driver

    try:
        return merge_driver.run(args.base, args.ours, args.theirs, args.path or args.ours)
    except MgitError as exc:  # git shows the file as conflicted; say why in one line
        raise MgitError(f"{args.path or args.ours}: cannot merge: {exc}") from exc
