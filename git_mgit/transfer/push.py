"""Push: publish the versions the pushed commits bring, under the host's size limit.

Run by the pre-push hook (before git sends the branches) and by
`git mgit push`. One `git ls-remote` tells what the remote holds; the
versions it lacks are laid out (layout.py), written here (publish.py) and
sent as version refs, bases first, several per `git push` while their new
objects fit in mgit.maxPushSize. A version larger than that goes as a chain
of parts on refs/mgit/partial/<name>, each part a commit whose tree holds
the next objects and whose parent is the part before; its ref is then
created on the remote (sending just the commit and trees) and the partial
ref deleted. A push cut off part-way resumes: the parts already on the
remote are not sent again, and the chain continues from the remote's last part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from git_mgit import config, hashing
from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo
from git_mgit.progress import format_size
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import VERSION_PREFIX
from git_mgit.store.packwriter import PackWriter
from git_mgit.transfer import history, layout, notes, publish
from git_mgit.transfer.publish import Written
from git_mgit.transfer.remotes import list_versions, transfer
from git_mgit.transfer.versions import Published

ZERO = "0" * 40
PARTIAL_PREFIX = "refs/mgit/partial/"
_ENTRY_OVERHEAD = 200  # tree entries and pack headers per object, in the size estimate
_MARGIN = 0.95  # of mgit.maxPushSize: what git adds to our estimate stays under it


@dataclass(frozen=True)
class Update:
    """One line of pre-push's input: what git is about to do to one remote ref."""

    local_ref: str
    local_oid: str
    remote_ref: str
    remote_oid: str


@dataclass
class Report:
    published: list[Written] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # remote refs re-publishing replaced
    pushes: int = 0  # `git push` runs that carried objects
    sent: int = 0  # estimated bytes of objects sent


def pre_push(repo: Repo, remote: str, updates: Sequence[Update]) -> Report:
    """Publish what the updates bring, then push the notes; raises MgitError to stop the push."""
    tips = [u.local_oid for u in updates if u.local_oid != ZERO]
    old = [u.remote_oid for u in updates if u.remote_oid != ZERO]
    report = push_versions(repo, remote, tips, old, {u.remote_ref for u in updates})
    notes.push(repo, remote)
    return report


def push_versions(
    repo: Repo, remote: str, tips: Sequence[str], old_tips: Sequence[str], moving: set[str]
) -> Report:
    """Publish every version the commits `tips` bring that the remote lacks.

    `old_tips` are the remote refs' values the push replaces (their versions may be
    re-published as deltas of the new ones); `moving` names those remote refs.
    """
    settings = config.load(repo)
    report = Report()
    listing = list_versions(repo, remote, f"{PARTIAL_PREFIX}*", "refs/heads/*", "refs/tags/*")
    published = Published.from_listing(listing)
    here = _existing(repo, [*tips, *old_tips, *listing.values()])
    others = {
        name.removesuffix("^{}"): oid
        for name, oid in listing.items()
        if name.startswith(("refs/heads/", "refs/tags/")) and oid in here
    }
    store = ChunkStore(repo)
    try:
        exclude = [c for c in old_tips if c in here] + [
            c for n, c in others.items() if n not in moving
        ]
        pushed = history.pushed(repo, store.reader, [t for t in tips if t in here], exclude)
        held = history.at_commits(
            repo, store.reader, [c for n, c in others.items() if n not in moving]
        )
        cands = candidates(store, pushed, published, held)
        if not cands.publish:
            return report
        _refuse_missing(store, cands)
        estimates = layout.estimate(store, cands)
        plan = layout.decide(cands, estimates, settings.fetch_budget, settings.max_chain_depth)
        report.published = publish.write(store, cands, plan)
        report.replaced = list(plan.replaced.values())
        limit = int(settings.max_push_size * _MARGIN)
        _send(repo, remote, store, report, listing, limit)
        list_versions(repo, remote)  # what it holds now, for commands that stay offline
    finally:
        store.close()
    return report


def candidates(
    store: ChunkStore, pushed: history.Pushed, published: Published, held: dict
) -> layout.Candidates:
    """What to publish (versions the remote lacks, tips it has no whole ref of), which newer
    versions each may lean on, and which of the remote's whole versions may be re-published."""
    tips = {v for v in pushed.tips if not any(r.whole for r in published.by_version.get(v, ()))}
    fresh = [v for v in pushed.versions if not published.holds(v)]
    publish_list = list(dict.fromkeys([*fresh, *(v for v in pushed.tips if v in tips)]))
    cands = layout.Candidates(pushed.known, publish_list, tips)
    wanted = set(publish_list)
    for older, newer in sorted(pushed.edges):
        if newer not in wanted:
            continue
        if older in wanted:
            cands.children.setdefault(older, []).append(newer)
            continue
        best = published.best(older)
        if best is None or not best.whole or older in held or older in cands.rotations:
            continue
        if len(published.by_version[older]) > 1:
            # Whole only while it was a tip: it has a delta ref too, which fetches take now.
            cands.retire[older] = best.name
            continue
        if store.missing([c.content_hash for c in pushed.known[older].manifest.chunks()]):
            continue
        # The remote's previous tip, whole until now: it may become a delta of the new one.
        cands.rotations[older] = published.hanging(older)
        cands.replaced[older] = best.name
        cands.children.setdefault(older, []).append(newer)
    return cands


def _refuse_missing(store: ChunkStore, cands: layout.Candidates) -> None:
    for v in cands.publish:
        version = cands.versions[v]
        missing = store.missing([c.content_hash for c in version.manifest.chunks()])
        if missing:
            raise MgitError(
                f"{version.path}: cannot push: {len(missing)} tensor object(s) of this version are "
                f"not in this clone (e.g. {hashing.to_text(missing[0])}); run `git mgit fetch --all` "
                "first, or `git push --no-verify` to push the commits without them"
            )


def _existing(repo: Repo, oids: Sequence[str]) -> set[str]:
    """Which of `oids` this clone has."""
    oids = list(dict.fromkeys(o for o in oids if o and o != ZERO))
    if not oids:
        return set()
    out = repo.git_bytes(
        "cat-file",
        "--batch-check=%(objectname) %(objecttype)",
        input="\n".join(oids).encode() + b"\n",
    ).decode()
    return {line.split()[0] for line in out.splitlines() if not line.endswith("missing")}


def _remote_objects(repo: Repo, listing: dict[str, str]) -> set[str]:
    """Objects the remote has through version refs whose commits this clone knows."""
    commits = _existing(
        repo, [c for n, c in listing.items() if n.startswith((VERSION_PREFIX, PARTIAL_PREFIX))]
    )
    if not commits:
        return set()
    out = repo.git_bytes(
        "rev-list", "--objects", "--stdin", input="".join(f"{c}\n" for c in commits).encode()
    )
    return {line.split(b" ", 1)[0].decode() for line in out.splitlines()}


def _send(
    repo: Repo, remote: str, store: ChunkStore, report: Report, listing: dict[str, str], limit: int
) -> None:
    """Push the written version refs in batches under `limit`, then delete what they replace."""
    have = _remote_objects(repo, listing)
    batch: list[Written] = []
    size = 0
    for w in report.published:
        new = {oid: n for oid, n in w.objects.values() if oid not in have}
        need = sum(new.values()) + _ENTRY_OVERHEAD * len(new)
        have.update(new)
        if need > limit:
            _flush(repo, remote, batch, report)
            batch, size = [], 0
            _send_in_parts(repo, remote, store, w, new, listing, limit, report)
            report.sent += need
            continue
        if batch and size + need > limit:
            _flush(repo, remote, batch, report)
            batch, size = [], 0
        batch.append(w)
        size += need
        report.sent += need
    _flush(repo, remote, batch, report)
    if report.replaced:
        _push(repo, remote, [f":{name}" for name in report.replaced])


def _flush(repo: Repo, remote: str, batch: list[Written], report: Report) -> None:
    if batch:
        _push(repo, remote, [f"+{w.ref.name}:{w.ref.name}" for w in batch])
        report.pushes += 1


def _send_in_parts(
    repo: Repo,
    remote: str,
    store: ChunkStore,
    w: Written,
    new: dict[str, int],
    listing: dict[str, str],
    limit: int,
    report: Report,
) -> None:
    """A version larger than the limit: its new objects part by part, then its ref."""
    partial = PARTIAL_PREFIX + w.ref.name.removeprefix(VERSION_PREFIX)
    parent = listing.get(partial)
    if parent is not None and not _existing(repo, [parent]):
        parent = None  # another clone's parts: start a chain of our own
    by_oid = {oid: h for h, (oid, _) in w.objects.items()}
    parts: list[list[tuple[bytes, bytes]]] = [[]]
    size = 0
    for oid in sorted(new, key=lambda o: by_oid[o]):
        cost = new[oid] + _ENTRY_OVERHEAD
        if parts[-1] and size + cost > limit:
            parts.append([])
            size = 0
        parts[-1].append((by_oid[oid], bytes.fromhex(oid)))
        size += cost
    for i, objects in enumerate(parts, 1):
        pack = PackWriter(repo.objects_dir)
        try:
            message = f"git-mgit part {i} of {len(parts)} of {w.ref.name}\n"
            commit = anchors.write_anchor(
                pack, objects, parents=[parent] if parent else [], timestamp=0, message=message
            )
            pack.finish()
        except BaseException:
            pack.abort()
            raise
        repo.git("update-ref", partial, commit)
        _push(repo, remote, [f"+{partial}:{partial}"])
        report.pushes += 1
        parent = commit
    _push(repo, remote, [f"+{w.ref.name}:{w.ref.name}", f":{partial}"])
    repo.git("update-ref", "-d", partial)


def _push(repo: Repo, remote: str, specs: list[str]) -> None:
    """One `git push` that never re-runs our hook."""
    try:
        transfer(repo, "push", "--no-verify", remote, *specs)
    except GitError as exc:
        hint = (
            "the remote refused the pack's size: lower `git config mgit.maxPushSize`"
            if "exceeds maximum allowed size" in exc.detail
            else "run the push again: it resumes where it stopped"
        )
        raise MgitError(f"pushing tensor objects to {remote} failed ({exc}); {hint}") from exc


def describe(report: Report) -> str:
    """One line for the user: what the push published."""
    whole = sum(1 for w in report.published if w.ref.whole)
    return (
        f"published {len(report.published)} model version(s) ({whole} whole), "
        f"{format_size(report.sent)} in {report.pushes} push(es)"
    )
