"""Finish conflicted merges of model files by applying strategies to the conflicting tensors.

git mgit resolve model.safetensors --strategy average
git mgit resolve --theirs                             # every conflicted model file
git mgit resolve m.safetensors --tensor 'head.*=theirs' --strategy task-arithmetic

Reads the base, ours and theirs versions git left in the index (stages 1-3),
merges them again with these rules first (then mgit.toml's [merge]), and
only if nothing is left in conflict: stages the result, writes the working
file, and holds the merge's lineage records until it is committed.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.merge import strategy
from git_mgit.merge.strategy import Rules
from git_mgit.modelfile import manifest as mf


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", help="conflicted model files (default: all of them)")
    strategy.add_arguments(parser)
    parser.add_argument("--ours", action="store_true", help="same as --strategy ours")
    parser.add_argument("--theirs", action="store_true", help="same as --strategy theirs")


def unmerged(repo: Repo) -> dict[str, dict[int, tuple[str, str]]]:
    """path (repository-relative) -> {stage: (mode, blob id)} for every conflicted path."""
    out: dict[str, dict[int, tuple[str, str]]] = {}
    listing = repo.git_bytes("ls-files", "-u", "-z", "--full-name")
    for entry in listing.split(b"\0"):
        if entry:
            info, _, path = entry.decode("utf-8", "surrogateescape").partition("\t")
            mode, oid, stage = info.split()
            out.setdefault(path, {})[int(stage)] = (mode, oid)
    return out


def _rules(args: argparse.Namespace) -> Rules:
    picked = [s for s, on in (("ours", args.ours), ("theirs", args.theirs)) if on]
    if args.strategy:
        picked.append(args.strategy)
    if len(picked) > 1:
        raise MgitError("give one of --strategy, --ours and --theirs")
    rules = Rules.from_command_line(args.tensor, picked[0] if picked else None)
    if not rules.rules:
        raise MgitError(
            "say how to settle the conflicts: --strategy S, --ours, --theirs or --tensor"
        )
    return rules


def _relative(repo: Repo, path: str) -> str:
    assert repo.worktree is not None
    return Path(os.path.relpath(Path(path).resolve(), repo.worktree.resolve())).as_posix()


def resolve_one(repo: Repo, path: str, stages: dict[int, tuple[str, str]], rules: Rules) -> bool:
    from git_mgit.filters.merge_driver import merge_texts, remember, report

    if 2 not in stages or 3 not in stages:
        side = "ours" if 2 not in stages else "theirs"
        raise MgitError(
            f"{path}: deleted in {side}: keep it with `git add {path}` or drop it with `git rm {path}`"
        )
    texts = {n: repo.git_bytes("cat-file", "blob", oid) for n, (_, oid) in stages.items()}
    if not all(mf.looks_like_manifest(t) for t in texts.values()):
        raise MgitError(f"{path}: not every side is a git-mgit manifest; resolve it with git")
    base, ours, theirs = texts.get(1), texts[2], texts[3]
    outcome = merge_texts(repo, path, base, ours, theirs, rules)
    report(path, outcome)
    if outcome.conflicts:
        return False
    data = outcome.manifest.render()
    oid = repo.git("hash-object", "-w", "--stdin", "--no-filters", input=data)
    repo.git("update-index", "--cacheinfo", f"{stages[2][0]},{oid},{path}")
    repo.git("checkout", "--", path)  # the working file, through the smudge filter
    remember(repo, path, outcome, base, ours, theirs)
    settled = ", ".join(sorted({str(s) for _, s in outcome.settled})) or "no strategy needed"
    print(f"resolved {path}: {len(outcome.settled)} conflict(s) settled ({settled})")
    return True


def run(args: argparse.Namespace) -> int:
    rules = _rules(args)
    repo = find_repo()
    if repo.worktree is None:
        raise MgitError("resolve needs a working tree")
    conflicted = unmerged(repo)
    paths = [_relative(repo, p) for p in args.paths] or sorted(conflicted)
    if not paths:
        raise MgitError("nothing is conflicted")
    for p in paths:
        if p not in conflicted:
            raise MgitError(f"{p} is not conflicted (see `git status`)")
    failed = [p for p in paths if not resolve_one(repo, p, conflicted[p], rules)]
    if failed:
        raise MgitError(
            f"still conflicted: {', '.join(failed)}; give strategies for what is listed above"
        )
    print("all resolved: `git commit` concludes the merge")
    return 0
