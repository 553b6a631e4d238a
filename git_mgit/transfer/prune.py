"""`git mgit prune`: free local disk from objects a remote holds and nothing here needs soon.

Kept: every chunk the index, HEAD, a checkout younger than mgit.pruneKeep
(HEAD's reflog) or a commit no remote-tracking ref reaches needs, with the
delta bases its reads take. Of the other chunks, exactly those a remote
holds go: chunks of a version the remote has a version ref of (one
`git ls-remote` per remote; an unreachable remote holds nothing). Extra
encodings of a kept chunk go too: the one reads take stays. The refs that
filed a dropped object are replaced by one anchor of what they held and is
kept; `git repack -a -d` then frees the space.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from git_mgit.gitcmd import Repo, approxidate
from git_mgit.modelfile.tracked import tracked_files, with_bases
from git_mgit.store import anchors, keep
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import ANCHOR_PREFIX, anchor_tips, filed_by
from git_mgit.transfer import availability, history


@dataclass
class Report:
    dropped: int = 0  # objects
    freed: int = 0  # their stored bytes
    kept: int = 0  # chunks kept
    unreachable: list[str] = field(default_factory=list)  # remotes that could not be asked


def keep_versions(repo: Repo, store: ChunkStore, since: str) -> dict[str, history.Version]:
    """The versions prune must keep whole here."""
    out: dict[str, history.Version] = {}
    for f in tracked_files(repo, store.reader):  # the index
        if f.manifest is not None:
            out[f.blob] = history.Version(f.blob, f.path, f.manifest)
    limit = approxidate(repo, since)
    recent = ["HEAD"] if repo.git("rev-parse", "--verify", "--quiet", "HEAD", check=False) else []
    reflog = repo.git("log", "-g", "--format=%H %gd", "--date=unix", "HEAD", check=False)
    for line in reflog.splitlines():
        commit, _, selector = line.partition(" ")
        stamp = selector.rpartition("{")[2].rstrip("}")
        if stamp.isdigit() and int(stamp) >= limit:
            recent.append(commit)
    out.update(history.at_commits(repo, store.reader, recent))
    local = repo.git("for-each-ref", "--format=%(objectname)", "refs/heads", "refs/tags").split()
    pushed = repo.git("for-each-ref", "--format=%(objectname)", "refs/remotes").split()
    unpushed = history.pushed(repo, store.reader, local, pushed)  # not on any remote
    out.update(unpushed.versions)
    out.update({v: ver for v, ver in unpushed.tips.items() if v in unpushed.versions})
    return out


def held_by_remotes(repo: Repo, store: ChunkStore, report: Report) -> set[bytes]:
    """Chunks of the versions some remote has a version ref of (whose manifests are here).

    A remote that cannot be reached now holds nothing, whatever it held before.
    """
    found = availability.ask(repo)
    report.unreachable = found.unreachable
    held: set[bytes] = set()
    for name, published in found.published.items():
        if name in found.unreachable:
            continue
        versions = history.manifests(repo, store.reader, dict.fromkeys(published.by_version, ""))
        for v in versions.values():
            held.update(c.content_hash for c in v.manifest.chunks())
    return held


def prune(repo: Repo, store: ChunkStore, since: str, dry_run: bool = False) -> Report:
    report = Report()
    store.cache.refresh()
    wanted = keep_versions(repo, store, since).values()
    retain = {c.content_hash: v.path for v in wanted for c in v.manifest.chunks()}
    held = held_by_remotes(repo, store, report)
    retain.update((h, "") for h in store.cache.all() if h not in held)  # only copy: stays
    chosen: dict[bytes, str] = {}
    for h in with_bases(store, retain):
        loc = store.locate(h)
        if loc is not None:
            chosen[h] = loc[0]
    report.kept = len(chosen)
    refs = anchor_tips(repo)
    filings = filed_by(repo, refs.values())
    filed = {ref: filings[commit] for ref, commit in refs.items()}
    sizes: dict[str, int] = {}
    drop_refs, fold = [], {}
    for ref, objects in filed.items():
        if all(chosen.get(h) == oid for h, oid, _ in objects):
            continue
        drop_refs.append(ref)
        for h, oid, size in objects:
            if chosen.get(h) == oid:
                fold[h] = oid
            else:
                sizes[oid] = size
    retained = {
        oid for ref, objects in filed.items() if ref not in drop_refs for _, oid, _ in objects
    }
    gone = {oid: n for oid, n in sizes.items() if oid not in retained and oid not in fold.values()}
    report.dropped, report.freed = len(gone), sum(gone.values())
    if dry_run or not drop_refs:
        return report
    lines = [f"delete {ref} {refs[ref]}\n" for ref in drop_refs]
    if fold:
        commit = anchors.commit_objects(
            repo, sorted((h, bytes.fromhex(o)) for h, o in fold.items())
        )
        lines.append(f"create {ANCHOR_PREFIX}{commit} {commit}\n")
    repo.git("update-ref", "--stdin", input="".join(lines).encode())
    store.invalidate()
    store.cache.rebuild()
    with keep.lifted(repo):
        repo.git("repack", "-a", "-d", "-q")
    return report
