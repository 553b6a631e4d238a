"""On-demand fetch: the objects the wanted model versions need, in one batch per remote.

One `git ls-remote` lists the remote's version refs; the closure of the
wanted versions along their bases (minus what is complete here) is fetched
with one `git fetch` of exact ref names, which git's negotiation trims to the
objects this clone lacks (a fresh clone fetches its tips' refs by name beside
the listing: guess.py). Version refs of a pointer store (Git LFS, S3) hold
pointers: the objects they name and this clone lacks are then downloaded, one
batch per store (stores/pointers.py). A remote that predates version refs
gets its anchors fetched whole, as before.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from git_mgit.errors import MgitError, ObjectMissing
from git_mgit.gitcmd import GitError, Repo, anonymized, env_for
from git_mgit.modelfile import manifest as mf
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.gitobjects import object_id
from git_mgit.store.lookup import (
    ANCHOR_PREFIX,
    RECORD_REF,
    VERSION_PREFIX,
    anchor_objects,
    anchor_tips,
)
from git_mgit.transfer import guess, notes
from git_mgit.transfer.local import LocalCopy, git_dir_at, remote_url
from git_mgit.transfer.remotes import (
    Listing,
    RemoteUnreachable,
    candidates,
    fetch_listing,
    remembered,
    transfer,
)
from git_mgit.transfer.stores import pointers, registry
from git_mgit.transfer.stores.choice import S3
from git_mgit.transfer.versions import Published, VersionRef

_ROUNDS = 3  # a ref re-published between our listing and our fetch: list again


def version_id(manifest_bytes: bytes) -> str:
    """The object id git gives a manifest blob: the version's name."""
    return object_id("blob", [manifest_bytes]).hex()


@dataclass
class Outcome:
    refs: int = 0  # version refs fetched
    unreachable: dict[str, str] = field(default_factory=dict)  # remote -> why
    failed: dict[str, str] = field(default_factory=dict)  # remote -> what its store said
    missing: dict[str, mf.Manifest] = field(default_factory=dict)  # still not here, by version


def missing_versions(
    store: ChunkStore, wanted: Mapping[str, mf.Manifest]
) -> dict[str, mf.Manifest]:
    return {v: m for v, m in wanted.items() if store.missing([c.content_hash for c in m.chunks()])}


def fetch_versions(
    store: ChunkStore,
    wanted: Mapping[str, mf.Manifest],
    remote: str | None = None,
    arrived: pointers.Arrived | None = None,
) -> Outcome:
    """Fetch what checking out `wanted` (version id -> manifest) needs and is not here.

    Tries `remote`, else the default remote, then the others, until nothing is
    missing; merges each remote's lineage notes on the way. Never raises for a
    remote that could not be reached or could not give the objects: the outcome says
    which and why, and what is still missing.
    `arrived` is told of each object a blob store sends, as it comes.
    """
    out = Outcome(missing=missing_versions(store, wanted))
    if not out.missing:
        return out  # no remote asked, no git run
    names = iter([remote] if remote else candidates(store.repo))
    while out.missing and (name := next(names, None)) is not None:
        try:
            out.refs += _fetch_from(store, name, out.missing, arrived)
        except RemoteUnreachable as exc:
            out.unreachable[name] = str(exc)
            continue
        except (MgitError, OSError) as exc:  # a store's refusal, a ref git could not set...
            out.failed[name] = str(exc)
            store.invalidate()
            out.missing = missing_versions(store, out.missing)
            continue
        store.invalidate()
        out.missing = missing_versions(store, out.missing)
    return out


def ensure_local(store: ChunkStore, wanted: Iterable[tuple[str, mf.Manifest]]) -> None:
    """Fetch what the manifests in `wanted` ((a name for messages, manifest) pairs) lack, in
    one batch; raise ObjectMissing naming the first still missing objects, and what to do.

    Commands that read tensors call this first (diff, test, query, load, ...).
    """
    by_version = {version_id(m.render()): (name, m) for name, m in wanted}
    out = fetch_versions(store, {v: m for v, (_, m) in by_version.items()})
    if out.missing:
        v = next(iter(out.missing))
        raise missing_error(by_version[v][0], store, out.missing[v], out)


def missing_error(path: str, store: ChunkStore, m: mf.Manifest, out: Outcome) -> ObjectMissing:
    """One line naming the file, why its objects are not here, and what to run."""
    count = len(store.missing([c.content_hash for c in m.chunks()]))
    if out.failed:
        why = next(iter(out.failed.values()))
        return ObjectMissing(f"{path}: {count} tensor object(s) could not be fetched: {why}")
    if out.unreachable:
        name, why = next(iter(out.unreachable.items()))
        return ObjectMissing(
            f"{path}: {count} tensor object(s) are not here and {why}; reconnect and run the "
            f"command again (`git mgit fetch {name} --all` fetches everything for offline work)"
        )
    return ObjectMissing(
        f"{path}: {count} tensor object(s) are not here and no remote has them; "
        "push them from the clone that has them (`git push` there), then `git mgit fetch`"
    )


def _fetch_from(
    store: ChunkStore,
    remote: str,
    wanted: Mapping[str, mf.Manifest],
    arrived: pointers.Arrived | None,
) -> int:
    """One listing and one fetch (again if the remote changed in between); refs fetched."""
    repo = store.repo
    complete: dict[str, bool] = {}

    def here(version: str) -> bool:
        if version not in complete:
            data = store.reader.read(version)
            m = mf.parse(bytes(data)) if data is not None and mf.looks_like_manifest(data) else None
            complete[version] = m is not None and not store.missing(
                [c.content_hash for c in m.chunks()]
            )
        return complete[version]

    notes_ref = notes.remote_notes_ref(remote)
    url = remote_url(repo, remote)
    source = git_dir_at(repo, url)
    # A fresh checkout's listing and its likely refs, begun before the filter loaded; else a
    # fresh clone's refs by name, beside the listing (guess.py). The listing decides.
    ahead, guessed = guess.ahead.take(remote) if source is None else (None, None)
    if source is None and ahead is None and guessed is None:
        guessed = guess.begin(repo, remote, url, wanted)
    if guessed is not None or ahead is not None:  # its store's client too, most likely LFS's
        registry.warm_up()
    relisted: dict[str, str] | None = None  # what the remote lists after a fetch failed
    for attempt in range(_ROUNDS):
        try:
            listing = relisted or _listing(repo, remote, ahead if attempt == 0 else None)
        finally:
            if guessed is not None:
                guessed.wait()
        if attempt == 0 and RECORD_REF in listing and guessed is None and ahead is None:
            # A blob store's client, while git fetches. A remote on this machine has no LFS
            # endpoint in its URL, so its store is most likely a bucket: importing the LFS
            # client too would only take the GIL from the fetch's own threads (0.18 s of a
            # 54 MiB S3 clone's thread time).
            registry.warm_up(*([S3] if source is not None else []))
        published = Published.from_listing(listing)
        local = anchor_tips(repo)
        closure = published.closure(wanted, here)
        refs = [r for r in closure if local.get(r.name) != r.commit]
        targets = {r.name: r.commit for r in refs}
        if any(not published.holds(v) for v in wanted):
            # Pushed before version refs existed: every anchor, as then.
            targets |= {
                name: oid
                for name, oid in listing.items()
                if name.startswith(ANCHOR_PREFIX) and local.get(name) != oid
            }
        if not targets:
            if guessed is not None:  # it brought the refs, and the notes with them
                notes.merge_fetched(repo, notes_ref)
            pointers.resolve(store, remote, closure, arrived=arrived)  # refs here, not objects
            return 0
        theirs = listing.get(notes.NOTES_REF)
        if theirs is not None and theirs != repo.git(
            "rev-parse", "--verify", "--quiet", notes_ref, check=False
        ):
            targets[notes_ref] = theirs
        keep_replaced(repo, {local[n] for n in targets if n in local})
        if source is not None and not _pointing(source, refs) and _lend(store, source, targets):
            rest = [r for r in closure if r.name not in targets]
            pointers.resolve(store, remote, rest, arrived=arrived)
            return len(refs)
        try:
            # By object id: git then skips listing the refs again (one round trip less).
            specs = [f"+{commit}:{name}" for name, commit in targets.items()]
            transfer(repo, "fetch", "--no-tags", "--no-write-fetch-head", remote, *specs)
        except GitError as exc:
            relisted = _moved(repo, remote, targets) if attempt + 1 < _ROUNDS else None
            if relisted is not None:
                continue  # re-published and collected meanwhile: fetch what it lists now
            raise RemoteUnreachable(f"fetching from {anonymized(remote)} failed ({exc})") from exc
        break
    else:
        return 0
    notes.merge_fetched(repo, notes_ref)
    pointers.resolve(store, remote, closure, arrived=arrived)
    return len(refs)


def _moved(repo: Repo, remote: str, asked: Mapping[str, str]) -> dict[str, str] | None:
    """The remote's listing now, if a version ref `asked` names points elsewhere in it (a
    push re-published it and the old commit was collected: git's `not our ref`, which
    reaches git-mgit only where git's stderr is not the terminal's); else None."""
    try:
        now = _listing(repo, remote, None)
    except RemoteUnreachable:
        return None
    moved = any(now.get(n) != c for n, c in asked.items() if n.startswith(VERSION_PREFIX))
    return now if moved else None


def _listing(repo: Repo, remote: str, ahead: Listing | None) -> dict[str, str]:
    """What the remote lists: the listing begun ahead, if it got an answer (it could not ask
    for credentials), else a listing begun now."""
    if ahead is not None:
        try:
            return remembered(repo, ahead)
        except RemoteUnreachable:
            pass
    return remembered(repo, fetch_listing(repo, remote))


def keep_replaced(repo: Repo, commits: set[str]) -> None:
    """Anchor the objects local version refs file before a fetch moves those refs (a remote
    that migrated stores republished them as pointers): what is here stays here."""
    if commits:
        objects = sorted(
            {(h, bytes.fromhex(o)) for h, o, _ in anchor_objects(repo, sorted(commits), [])}
        )
        if objects:
            anchors.set_ref(repo, anchors.commit_objects(repo, objects))


def _pointing(source: Path, refs: list[VersionRef]) -> bool:
    """Whether some of `refs` in the repository at `source` are a pointer store's."""
    if not refs:
        return False
    batch = subprocess.run(
        ["git", "cat-file", "--batch"],
        cwd=source,
        env=env_for(source),
        input="".join(f"{r.commit}\n" for r in refs).encode(),
        capture_output=True,
        check=False,
    ).stdout
    return b"\nstore " in batch


def _lend(store: ChunkStore, source: Path, targets: dict[str, str]) -> bool:
    """From a remote on this machine: its objects are read in place while a thread copies
    them here (the store's close() waits for it); False to use git fetch instead."""
    try:
        copy = LocalCopy(store.repo, source, targets)
    except (OSError, ValueError, subprocess.CalledProcessError):
        return False
    notes_ref = next((n for n in targets if n.startswith(notes.NOTES_REMOTES)), None)

    def done() -> None:
        try:
            copy.wait()
        except MgitError as exc:  # what was read from the remote is checked out all the same
            print(f"git-mgit: warning: {exc}; the objects stay on the remote", file=sys.stderr)
            return
        if notes_ref is not None:
            notes.merge_fetched(store.repo, notes_ref)

    store.borrow(source, copy.entries, done)
    copy.start()
    return True
