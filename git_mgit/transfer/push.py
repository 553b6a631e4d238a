"""Push: publish the versions the pushed commits bring, to the store the remote uses.

Run by the pre-push hook (before git sends the branches) and by
`git mgit push`. One `git ls-remote` tells what the remote holds; the
versions it lacks are laid out (layout.py) and written here (publish.py);
the remote's store (stores/choice.py: version refs in its git repository,
its Git LFS endpoint, or an S3 bucket) then sends them, bases first, and
deletes the refs re-publishing replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from git_mgit import config, hashing
from git_mgit.console.progress import format_size
from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer import history, layout, notes, publish
from git_mgit.transfer.publish import Written
from git_mgit.transfer.remotes import Listing, push_listing, remember, remembered
from git_mgit.transfer.stores.blobs import BlobStoreError, Pointer
from git_mgit.transfer.stores.choice import REFS, Choice, choose, recorded_store
from git_mgit.transfer.stores.gitpush import push_limit
from git_mgit.transfer.stores.pointers import pointed
from git_mgit.transfer.stores.registry import Opening, store_for
from git_mgit.transfer.trace import tracer
from git_mgit.transfer.versions import Published
from git_mgit.worktree.checkedout import CheckedOut

ZERO = "0" * 40
_trace = tracer("push")


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
    sent: int = 0  # bytes of objects sent (estimated for git pushes)
    uploaded: int = 0  # objects uploaded to a blob store
    store: Choice | None = None  # where they went


def pre_push(
    repo: Repo, remote: str, updates: Sequence[Update], listing: Listing | None = None
) -> Report:
    """Publish what the updates bring, and push the notes meanwhile; raises MgitError to stop
    the push.
    `listing`: push_listing(repo, remote), begun earlier."""
    tips = [u.local_oid for u in updates if u.local_oid != ZERO]
    old = [u.remote_oid for u in updates if u.remote_oid != ZERO]
    with notes.pushed_meanwhile(repo, remote):
        return push_versions(repo, remote, tips, old, {u.remote_ref for u in updates}, listing)


def push_versions(
    repo: Repo,
    remote: str,
    tips: Sequence[str],
    old_tips: Sequence[str],
    moving: set[str],
    started: Listing | None = None,
) -> Report:
    """Publish every version the commits `tips` bring that the remote lacks.

    `old_tips` are the remote refs' values the push replaces (their versions may be
    re-published as deltas of the new ones); `moving` names those remote refs;
    `started`: the remote's listing (push_listing), begun earlier.
    """
    opening = Opening(repo, remote, "upload")  # while the remote lists its refs
    try:
        return _push_versions(repo, remote, tips, old_tips, moving, started, opening)
    finally:
        opening.close()


def _push_versions(
    repo: Repo,
    remote: str,
    tips: Sequence[str],
    old_tips: Sequence[str],
    moving: set[str],
    started: Listing | None,
    opening: Opening,
) -> Report:
    settings = config.load(repo)
    report = Report()
    listing = remembered(repo, started or push_listing(repo, remote))
    _trace(f"the remote lists {len(listing)} refs")
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
        if not pushed.versions and not pushed.tips:
            return report  # no model in what the push brings
        recorded = recorded_store(repo, remote, listing)
        report.store = choose(repo, remote, recorded, holds_versions=bool(published.by_version))
        cands = candidates(store, pushed, published, held, rotate=report.store.kind == REFS)
        if not cands.publish:
            return report
        _refuse_missing(store, cands)
        # the version checked out is read from its file, not decoded (to sample, to encode)
        read = CheckedOut.of(
            repo, {v: (x.path, x.manifest) for v, x in cands.versions.items()}
        ).read
        # the remote's whole versions among those involved, where their pointer refs are here:
        # what their chunks cost whole, and a checkpoint's frozen layers, filed as they are
        held = [r for v in cands.versions if (r := published.best(v)) is not None and r.whole]
        filed = {} if report.store.kind == REFS else pointed(repo, held).get(report.store.url, {})
        there = {h: p for h, p in filed.items() if isinstance(p, Pointer)}  # not those inline
        sizes = {h: p.size for h, p in there.items()}
        estimates = layout.estimate(store, cands, settings.max_chain_depth, read, sizes)
        plan = layout.decide(cands, estimates, settings.fetch_budget, settings.max_chain_depth)
        _trace(f"{len(plan.choices)} versions to publish to the {report.store.kind} store")
        target = store_for(repo, remote, report.store, opening)
        report.replaced = list(plan.replaced.values())
        try:
            with target.sending(store, there) as receiver:  # a blob store's uploads begin meanwhile
                report.published = publish.write(store, cands, plan, receiver, read)
                _trace(f"written: {sum(len(w.objects) for w in report.published)} objects")
                sent = target.publish(
                    store, report.published, listing, report.replaced, push_limit(repo)
                )
        except BlobStoreError as exc:
            if exc.absent and report.store.guessed:
                raise BlobStoreError(_not_there(repo, remote, report.store, exc)) from exc
            raise
        report.pushes, report.sent, report.uploaded = sent.pushes, sent.bytes, sent.uploaded
        _trace(f"sent: {sent.uploaded} objects uploaded, {sent.pushes} git pushes")
        # what it holds now, for commands that stay offline
        gone = set(report.replaced)
        held_now = {n: c for n, c in listing.items() if n not in gone}
        remember(repo, remote, held_now | {w.ref.name: w.ref.commit for w in report.published})
    finally:
        store.close()
    return report


def _not_there(repo: Repo, remote: str, store: Choice, exc: BlobStoreError) -> str:
    """A store `mgit.store auto` only guessed is not there: say why it was chosen, and how to
    keep the tensor objects in the remote's git repository instead."""
    named = repo.config(f"remote.{remote}.url") is not None  # else a URL, pushed to as it is
    key = f"remote.{remote}.mgitStore" if named else "mgit.store"
    return (
        f"{exc}; or, where {remote} has no such store, keep tensor objects in its git "
        f"repository: `git config {key} refs` (git-mgit chose {store.describe()} because "
        f"{store.reason})"
    )


def candidates(
    store: ChunkStore,
    pushed: history.Pushed,
    published: Published,
    held: dict,
    rotate: bool = True,
) -> layout.Candidates:
    """What to publish (versions the remote lacks, tips it has no whole ref of), which newer
    versions each may lean on, which older one each is stored against here (and how), and
    which of the remote's whole versions may be re-published (`rotate`: on a store that
    deletes what it replaces; a Git LFS store or a bucket keeps the whole objects anyway,
    so a delta beside them would add bytes, and work to a push; there a new tip may lean on
    the remote's whole version instead, layout._tip)."""
    leans = set() if rotate else pushed.edges  # where a tip may lean on its whole parent
    tips = {v for v in pushed.tips if not _held_as_tip(published, v, leans)}
    fresh = [v for v in pushed.versions if not published.holds(v)]
    publish_list = list(dict.fromkeys([*fresh, *(v for v in pushed.tips if v in tips)]))
    cands = layout.Candidates(pushed.known, publish_list, tips, lean_tips=not rotate)
    wanted = set(publish_list)
    for older, newer in sorted(pushed.edges):
        if newer not in wanted:
            continue
        if older in wanted:
            cands.children.setdefault(older, []).append(newer)
            cands.parents.setdefault(newer, older)
            continue
        best = published.best(older)
        if best is None or not best.whole:
            continue
        if older not in held and published.grounded(older, without=best.name):
            # Whole only while it was a tip: it has a delta ref too, which fetches take now
            # (one that leads to whole refs, not back to it through a version leaning on it).
            cands.retire[older] = best.name
            continue
        if store.missing([c.content_hash for c in pushed.known[older].manifest.chunks()]):
            continue
        cands.parents.setdefault(newer, older)  # whole on the remote: it may lean on it
        if older in held or older in cands.rotations or not rotate:
            continue
        if len(published.by_version[older]) > 1:
            # It has a delta ref already (pushed on another branch before it was a tip),
            # whose bases may lean on it in turn: deleting its whole ref for another delta
            # could leave refs that lead only to each other. It stays whole.
            continue
        # The remote's previous tip, whole until now: it may become a delta of the new one.
        cands.rotations[older] = published.hanging(older)
        cands.replaced[older] = best.name
        cands.children.setdefault(older, []).append(newer)
    _families(store, pushed, published, cands)
    cands.stored = layout.stored_forms(store, cands)
    return cands


def _held_as_tip(published: Published, v: str, edges: set[tuple[str, str]]) -> bool:
    """Whether the remote holds `v` as a tip should be: whole, or as a push to a store where
    tips may lean left it (layout._tip): a delta of one version before it, among `edges`
    ((older, newer) pairs; none on other stores), that the remote holds whole. A version
    held as a delta of a newer one (a tag on an old commit) is not."""
    best = published.best(v)
    if best is None or best.whole:
        return best is not None
    if len(best.bases) != 1 or (best.bases[0], v) not in edges:
        return False
    base = published.best(best.bases[0])
    return base is not None and base.whole


def _families(
    store: ChunkStore, pushed: history.Pushed, published: Published, cands: layout.Candidates
) -> None:
    """Tips that may be deltas of their base model: its version at the same commit, where
    mgit.toml (read as data) declares it a parent and it is, or will be, published whole."""
    worktree = store.repo.worktree
    if worktree is None or not (worktree / "mgit.toml").is_file():
        return
    from git_mgit import repoconfig  # tomlkit: only for repositories that declare models

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


def describe(report: Report) -> str:
    """One line for the user: what the push published."""
    whole = sum(1 for w in report.published if w.ref.whole)
    head = f"published {len(report.published)} model version(s) ({whole} whole), "
    if report.store is not None and report.store.kind != "refs":
        return (
            head + f"{report.uploaded} object(s), {format_size(report.sent)} uploaded to "
            f"{report.store.describe()}"
        )
    return head + f"{format_size(report.sent)} in {report.pushes} push(es)"
