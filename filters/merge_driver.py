"""git's merge.mgit.driver: three-way merge of model versions, tensor by tensor, never interactive.

git runs it with the base, ours and theirs versions of a tracked file (their
manifests) in temporary files; the merged manifest goes back into the ours
file. The decisions are git_mgit.merge's; this module is the git side:
strategies from `git mgit merge` (environment) and mgit.toml, the report on
stderr, and the lineage records of a finished merge (lineage/pending.py).

On a conflict the file keeps ours for each conflicting tensor (a loadable
model), the driver names each tensor and the commands that finish the job,
and exits 1, so git marks the file conflicted.
"""

from __future__ import annotations

import sys
from pathlib import Path

from git_mgit import config, repoconfig
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.lineage import pending
from git_mgit.merge import Outcome, merge_manifests
from git_mgit.merge.strategy import Rules
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import object_id


def blob_id(data: bytes) -> str:
    return object_id("blob", [data]).hex()


def merge_texts(
    repo: Repo, path: str, base: bytes | None, ours: bytes, theirs: bytes, rules: Rules
) -> Outcome:
    """Merge three manifest texts (base None: no common ancestor) with `rules` first, then mgit.toml."""
    cfg = repoconfig.load(repo.worktree)
    decl = cfg.model_at(path)
    store = ChunkStore(repo)
    try:
        return merge_manifests(
            None if base is None else mf.parse(base),
            mf.parse(ours),
            mf.parse(theirs),
            store,
            config.load(repo),
            rules + Rules.parse(list(cfg.merge.items())),
            decl.independent if decl else (),
            path,
        )
    finally:
        store.close()


def remember(
    repo: Repo, path: str, outcome: Outcome, base: bytes | None, ours: bytes, theirs: bytes
) -> None:
    """Hold back the lineage records of a finished merge until its version is committed."""
    if outcome.same_as is not None or outcome.conflicts:
        return
    pending.record(
        repo,
        path,
        blob_id(outcome.manifest.render()),
        (blob_id(ours), blob_id(theirs)),
        None if base is None else blob_id(base),
        {name: str(s) for name, s in outcome.settled},
        outcome.dependent,
    )


def report(path: str, outcome: Outcome) -> None:
    def say(line: str) -> None:
        print(line, file=sys.stderr)

    if outcome.settled:
        listed = ", ".join(f"{name} ({s})" for name, s in outcome.settled)
        say(f"git-mgit: {path}: settled by strategy: {listed}")
    if outcome.dependent is not None and not outcome.conflicts:
        ours, theirs = outcome.dependent
        say(
            f"git-mgit: {path}: both sides changed tensors that may depend on each other "
            f"(ours: {', '.join(ours)}; theirs: {', '.join(theirs)}); merged, and recorded "
            "as a possible conflict: run `git mgit test --pending` once committed"
        )
    if not outcome.conflicts:
        return
    say(
        f"git-mgit: {path}: {len(outcome.conflicts)} conflict(s), changed differently on both sides:"
    )
    width = max(len(c.name) for c in outcome.conflicts)
    for c in outcome.conflicts:
        why = f"  ({c.reason})" if c.reason else ""
        say(f"    {c.name:<{width}}  ours: {c.ours}, theirs: {c.theirs}{why}")
    q = f"'{path}'" if " " in path else path
    say("  the file holds ours for them meanwhile; finish with one of:")
    say(f"    git mgit resolve {q} --strategy average        (or average:ALPHA, task-arithmetic)")
    say(f"    git mgit resolve {q} --ours | --theirs | --strategy base")
    say(f"    git mgit resolve {q} --tensor 'PATTERN=STRATEGY' ...   (per tensor name)")
    say("  then `git commit`; or set strategies per pattern under [merge] in mgit.toml")


def run(base_file: str, ours_file: str, theirs_file: str, path: str) -> int:
    base, ours, theirs = (Path(p).read_bytes() for p in (base_file, ours_file, theirs_file))
    if not (mf.looks_like_manifest(ours) and mf.looks_like_manifest(theirs)) or (
        base and not mf.looks_like_manifest(base)
    ):
        print(
            f"git-mgit: {path}: cannot merge: not every side is a git-mgit manifest; "
            f"pick one with `git checkout --ours/--theirs -- {path}`, then `git add {path}`",
            file=sys.stderr,
        )
        return 1
    repo = find_repo()
    outcome = merge_texts(repo, path, base or None, ours, theirs, Rules.from_env())
    Path(ours_file).write_bytes(outcome.manifest.render())
    remember(repo, path, outcome, base or None, ours, theirs)
    report(path, outcome)
    return 1 if outcome.conflicts else 0
