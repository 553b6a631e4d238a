"""`git mgit fetch`: the objects of chosen model versions, ahead of any checkout.

Which versions: HEAD's (the default), the newest N of every path on every
branch and tag (and the remote's branches), every one in their history, or
those in named commits. The notes come along; the objects are fetched in one
batch (fetch.fetch_versions), as a checkout would.
"""

from __future__ import annotations

from dataclasses import dataclass

from git_mgit.gitcmd import Repo
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer import history, notes
from git_mgit.transfer.fetch import Outcome, fetch_versions


@dataclass(frozen=True)
class Selection:
    recent: int | None = None  # the N newest versions of every path
    everything: bool = False  # every version in history
    revs: tuple[str, ...] = ()  # the versions in these commits (default HEAD)


def refs_for(repo: Repo, remote: str) -> list[str]:
    """Local branches and tags, and the remote's branches as last fetched."""
    out = repo.git(
        "for-each-ref",
        "--format=%(objectname)",
        "refs/heads",
        "refs/tags",
        f"refs/remotes/{remote}",
    )
    return list(dict.fromkeys(out.split()))


def chosen(
    repo: Repo, store: ChunkStore, remote: str, sel: Selection
) -> dict[str, history.Version]:
    if sel.everything or sel.recent is not None:
        return history.recent(repo, store.reader, refs_for(repo, remote), sel.recent)
    revs = [repo.git("rev-parse", "--verify", f"{r}^{{commit}}") for r in sel.revs or ("HEAD",)]
    return history.at_commits(repo, store.reader, revs)


def prefetch(repo: Repo, store: ChunkStore, remote: str, sel: Selection) -> tuple[int, Outcome]:
    """Fetch the notes and what the selected versions lack; (versions selected, outcome)."""
    notes.fetch(repo, remote)
    versions = chosen(repo, store, remote, sel)
    wanted = {v: ver.manifest for v, ver in versions.items()}
    return len(versions), fetch_versions(store, wanted, remote)


def describe(count: int, out: Outcome) -> str:
    return f"{count} model version(s): every object is here ({out.refs} version ref(s) fetched)"
