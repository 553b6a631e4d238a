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

A bare remote stores a push of fewer than receive.unpackLimit (default 100)
objects as loose objects, deflating every one again at its default level:
for tensor objects, which are already compressed, that is most of a push's
time, and every later fetch of them deflates them once more until the remote
repacks. So a push carrying tensor objects also force-updates a pad ref to
a commit of 100 tiny unique blobs: the remote keeps the pack as sent. The
ref is refs/mgit/pad/<this clone's id>, so clones pushing at the same
moment never race for it (a clone pushes one thing at a time).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from git_mgit import config, hashing, repoconfig
from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo
from git_mgit.progress import format_size
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import VERSION_PREFIX, anchor_objects
from git_mgit.transfer import history, layout, notes, publish
from git_mgit.transfer.publish import Written
from git_mgit.transfer.remotes import list_versions, ls_remote, transfer
from git_mgit.transfer.versions import Published, VersionRef

ZERO = "0" * 40
PARTIAL_PREFIX = "refs/mgit/partial/"
_ENTRY_OVERHEAD = 200  # tree entries and pack headers per object, in the size estimate
_MARGIN = 0.95  # of mgit.maxPushSize: what git adds to our estimate stays under it
_ATTEMPTS = 3  # pushes of a batch that raced another clone's
PAD_PREFIX = "refs/mgit/pad/"
PAD_OBJECTS = 100  # git's default receive.unpackLimit
PAD_FROM = 1 << 20  # pushes of fewer object bytes stay as they are: loose is cheap there


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
    here = repo.existing([*tips, *old_tips, *listing.values()])
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
        _send(repo, remote, report, listing, limit)
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
    _families(store, pushed, published, cands)
    return cands


def _families(
    store: ChunkStore, pushed: history.Pushed, published: Published, cands: layout.Candidates
) -> None:
    """Tips that may be deltas of their base model: its version at the same commit, where
    mgit.toml (read as data) declares it a parent and it is, or will be, published whole."""
    worktree = store.repo.worktree
    if worktree is None or not (worktree / "mgit.toml").is_file():
        return
    try:
        cfg = repoconfig.load(worktree)
    except MgitError:
        return
    for versions in pushed.by_tip.values():
        at_path = {ver.path: v for v, ver in versions.items()}
        for v, ver in versions.items():
            decl = cfg.model_at(ver.path)
            if v not in cands.tips or decl is None:
                continue
            for name in decl.parents:
                parent = cfg.models.get(name)
                base = at_path.get(parent.path) if parent is not None else None
                whole = base in cands.tips or any(
                    r.whole for r in published.by_version.get(base, ())
                )
                if base is not None and base != v and whole:
                    cands.family.setdefault(v, []).append(base)


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


def _send(repo: Repo, remote: str, report: Report, listing: dict[str, str], limit: int) -> None:
    """Push the written version refs in batches under `limit`, then delete what they replace.

    A pushed ref's commit has no parent the remote knows, so git sends every object
    its tree files, shared ones included (the remote keeps one copy once it repacks):
    a batch's size is its refs' objects, each counted once.
    """
    batch: list[Written] = []
    in_batch: set[str] = set()
    size = 0
    for w in report.published:
        objects = dict(w.objects.values())
        need = sum(n + _ENTRY_OVERHEAD for oid, n in objects.items() if oid not in in_batch)
        if batch and size + need > limit:
            _flush(repo, remote, batch, report)
            batch, in_batch, size = [], set(), 0
            need = sum(objects.values()) + _ENTRY_OVERHEAD * len(objects)
        report.sent += need
        if need > limit:
            _send_in_parts(repo, remote, w, listing, limit, report)
            continue
        batch.append(w)
        in_batch.update(objects)
        size += need
    _flush(repo, remote, batch, report)
    # What re-publishing replaced, and parts a push that was cut off left behind.
    leftovers = [PARTIAL_PREFIX + w.ref.name.removeprefix(VERSION_PREFIX) for w in report.published]
    gone = [*report.replaced, *(name for name in leftovers if name in listing)]
    if gone:
        _push(repo, remote, [f":{name}" for name in gone])
    for name in leftovers:
        repo.git("update-ref", "-d", name, check=False)


def _flush(repo: Repo, remote: str, batch: list[Written], report: Report) -> None:
    """Push a batch of version refs. Another clone publishing one of them at the same
    moment makes git refuse ours: its ref is as good (the same version, complete),
    so what the remote then has counts as done and the rest is pushed again."""
    todo = [w.ref.name for w in batch]
    payload = sum(n for w in batch for _, n in w.objects.values())
    for attempt in range(_ATTEMPTS):
        if not todo:
            return
        try:
            _push(repo, remote, [f"+{name}:{name}" for name in todo], payload)
            report.pushes += 1
            return
        except MgitError:
            if attempt + 1 == _ATTEMPTS:
                raise
            there = ls_remote(repo, remote, *todo)
            todo = [name for name in todo if name not in there]


def _send_in_parts(
    repo: Repo, remote: str, w: Written, listing: dict[str, str], limit: int, report: Report
) -> None:
    """A version larger than the limit, part by part on refs/mgit/partial/<name>.

    Part k's tree files the objects of parts 1..k and its parent is part k-1, so
    git sends just the part's own objects; the version's commit then takes the
    last part as its parent (same tree: git sends the commit alone). A cut-off
    push resumes from the part the remote has.
    """
    partial = PARTIAL_PREFIX + w.ref.name.removeprefix(VERSION_PREFIX)
    parent = listing.get(partial)
    done: dict[bytes, bytes] = {}
    if parent is not None and parent in repo.existing([parent]):
        done = {h: bytes.fromhex(oid) for h, oid, _ in anchor_objects(repo, [parent], [])}
    else:
        parent = None  # nothing there, or another clone's parts: start a chain of our own
    todo = sorted((h, oid, n) for h, (oid, n) in w.objects.items() if h not in done)
    parts: list[list[tuple[bytes, str]]] = [[]]
    sizes: list[int] = [0]
    for h, oid, n in todo:
        if parts[-1] and sizes[-1] + n + _ENTRY_OVERHEAD > limit:
            parts.append([])
            sizes.append(0)
        parts[-1].append((h, oid))
        sizes[-1] += n + _ENTRY_OVERHEAD
    for i, (objects, payload) in enumerate(zip(parts, sizes, strict=True), 1):
        done.update((h, bytes.fromhex(oid)) for h, oid in objects)
        message = f"git-mgit part {i} of {len(parts)} of {w.ref.name}\n"
        parent = anchors.commit_objects(
            repo, sorted(done.items()), [parent] if parent else [], 0, message
        )
        repo.git("update-ref", partial, parent)
        _push(repo, remote, [f"+{partial}:{partial}"], payload)
        report.pushes += 1
    final = anchors.commit_objects(
        repo, sorted(done.items()), [parent] if parent else [], 0, w.ref.message
    )
    repo.git("update-ref", w.ref.name, final)
    w.ref = VersionRef(w.ref.version, w.ref.bases, final)
    _push(repo, remote, [f"+{w.ref.name}:{w.ref.name}", f":{partial}"])
    repo.git("update-ref", "-d", partial)


def _push(repo: Repo, remote: str, specs: list[str], payload: int = 0) -> None:
    """One `git push` that never re-runs our hook; padded when it carries `payload` bytes
    of tensor objects (see the module docstring)."""
    if payload >= PAD_FROM:
        specs = [*specs, f"+{_pad(repo)}:{PAD_PREFIX}{_clone_id(repo)}"]
    try:
        transfer(repo, "push", "--no-verify", remote, *specs)
    except GitError as exc:
        hint = (
            "the remote refused the pack's size: lower `git config mgit.maxPushSize`"
            if "exceeds maximum allowed size" in exc.detail
            else "run the push again: it resumes where it stopped"
        )
        raise MgitError(f"pushing tensor objects to {remote} failed ({exc}); {hint}") from exc


def _pad(repo: Repo) -> str:
    """A commit of PAD_OBJECTS blobs no remote has yet (unique to this push)."""
    nonce = f"{time.time_ns()} {os.getpid()}"
    blobs = [f"git-mgit pad {nonce} {i}\n".encode() for i in range(PAD_OBJECTS)]
    return anchors.commit_blobs(repo, blobs, "git-mgit pad: keeps a push a pack on the remote\n")


def _clone_id(repo: Repo) -> str:
    """A random name for this clone, made once (.git/mgit/clone-id)."""
    path = repo.mgit_dir / "clone-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.write_text(os.urandom(8).hex() + "\n")
        return path.read_text().strip()


def describe(report: Report) -> str:
    """One line for the user: what the push published."""
    whole = sum(1 for w in report.published if w.ref.whole)
    return (
        f"published {len(report.published)} model version(s) ({whole} whole), "
        f"{format_size(report.sent)} in {report.pushes} push(es)"
    )
