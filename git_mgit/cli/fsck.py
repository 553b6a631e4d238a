"""Verify every object here, and account for every object a manifest needs.

Each object here (every encoding of a chunk) is decoded and checked against
its BLAKE3; each version ref here is checked to file what its version needs.
A chunk a reachable manifest needs that is not here is a problem only when no
remote publishes a version that holds it: in a partial clone such chunks are
counted as remote-only. `--all` fetches every version first, so everything
is here to check.
"""

from __future__ import annotations

import argparse
import sys

from git_mgit import codecs, hashing
from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError, ObjectCorrupt, ObjectMissing
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.tracked import reachable_manifests
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import VERSION_PREFIX, anchor_tips, filed_by
from git_mgit.transfer import availability, history, prefetch
from git_mgit.transfer.remotes import default_remote
from git_mgit.transfer.stores import pointers
from git_mgit.transfer.versions import parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", "-q", action="store_true", help="print problems only")
    parser.add_argument(
        "--all", action="store_true", help="fetch every version first, then check everything"
    )


def run(args: argparse.Namespace) -> int:
    repo = find_repo()
    store = ChunkStore(repo)
    problems: list[str] = []
    notes: list[str] = []
    try:
        if args.all:
            remote = default_remote(repo)
            if remote is None:
                raise MgitError("fsck --all fetches from a remote, and this clone has none")
            prefetch.prefetch(repo, store, remote, prefetch.Selection(everything=True))
        store.cache.refresh()
        users: dict[bytes, tuple[str, str]] = {}  # chunk -> (path, version) of a manifest using it
        manifests = 0
        for oid, path, m in reachable_manifests(repo, store.reader):
            if isinstance(m, mf.ManifestError):
                problems.append(f"{path}: manifest {oid[:12]} is damaged: {m}")
                continue
            manifests += 1
            for chunk in m.chunks():
                users.setdefault(chunk.content_hash, (path, oid))
        anchored = store.cache.all()
        _account_missing(repo, users, anchored, problems, notes)
        problems += _check_version_refs(repo, store)
        checked = _verify(store, users, anchored, problems)
    finally:
        store.close()
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    for n in notes:
        print(f"git-mgit: {n}", file=sys.stderr if args.quiet else sys.stdout)
    if not args.quiet:
        print(f"checked {manifests} manifests and {checked} objects here: {len(problems)} problems")
    return 1 if problems else 0


def _account_missing(
    repo: Repo,
    users: dict[bytes, tuple[str, str]],
    anchored: dict,
    problems: list[str],
    notes: list[str],
) -> None:
    """Chunks needed but not here: remote-only where a remote publishes them, else problems."""
    missing = [h for h in users if h not in anchored]
    if not missing:
        return
    found = availability.ask(repo)
    remote_only: dict[str, int] = {}
    for h in missing:
        path, version = users[h]
        holder = found.holder(version)
        if holder is not None:
            remote_only[holder] = remote_only.get(holder, 0) + 1
        elif found.unreachable:
            problems.append(
                f"{path}: object {hashing.to_text(h)} is not here and {', '.join(found.unreachable)} "
                "could not be reached to tell whether it has it; reconnect and run `git mgit fsck`"
            )
        else:
            problems.append(
                f"{path}: object {hashing.to_text(h)} is missing and no remote has it; "
                "push it from a clone that has it"
            )
    for name, count in remote_only.items():
        unreachable = (
            " (could not be reached now: as last listed)" if name in found.unreachable else ""
        )
        notes.append(
            f"{count} object(s) are on {name} only{unreachable}: checkouts fetch them; "
            "`git mgit fsck --all` fetches and checks them"
        )


def _check_version_refs(repo: Repo, store: ChunkStore) -> list[str]:
    """Each version ref here files (or, for a pointer store, points to) every chunk of its
    version that its bases do not hold."""
    out = []
    refs = anchor_tips(repo, (VERSION_PREFIX,))
    named = {name: ref for name, commit in refs.items() if (ref := parse(name, commit))}
    wanted = {v for r in named.values() for v in (r.version, *r.bases)}
    versions = history.manifests(repo, store.reader, dict.fromkeys(wanted, ""))
    filings = filed_by(repo, (ref.commit for ref in named.values()))
    for name, ref in named.items():
        if ref.version not in versions or any(b not in versions for b in ref.bases):
            continue  # a manifest not in this clone: nothing to compare with
        filed = {h for h, _, _ in filings[ref.commit]}
        for chunks in pointers.pointed(repo, [ref]).values():  # a pointer store's ref
            filed.update(chunks)
        provided = {c.content_hash for b in ref.bases for c in versions[b].manifest.chunks()}
        lacking = [
            c.content_hash
            for c in versions[ref.version].manifest.chunks()
            if c.content_hash not in filed and c.content_hash not in provided
        ]
        if lacking:
            out.append(
                f"{name} files {len(lacking)} chunk(s) of its version neither itself nor through "
                f"its bases (e.g. {hashing.to_text(lacking[0])}); delete it with `git update-ref -d "
                f"{name}` (it is fetched again when needed)"
            )
    return out


def _verify(
    store: ChunkStore,
    users: dict[bytes, tuple[str, str]],
    anchored: dict[bytes, list[tuple[str, int]]],
    problems: list[str],
) -> int:
    """Decode every object here (each encoding of each chunk); returns how many."""
    progress = Progress(
        "git-mgit: verifying objects", sum(n for objs in anchored.values() for _, n in objs)
    )
    checked = 0
    try:
        for h, objects in anchored.items():
            where = users.get(h, ("unreferenced object", ""))[0]
            for oid, size in objects:
                try:
                    codecs.decode_all(store.decoder(h, oid=oid))
                except (ObjectCorrupt, ObjectMissing) as exc:
                    problems.append(
                        f"{where}: object {hashing.to_text(h)} ({oid[:12]}) is bad: {exc}"
                    )
                checked += 1
                progress.update(size)
    finally:
        progress.finish()
    return checked
