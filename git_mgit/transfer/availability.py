"""Where objects that are not here can be had: which remotes publish which versions.

Commands that stay offline (status, ls-files, du) use what each remote
listed when last asked (remotes.list_versions keeps it); fsck and prune ask.
A chunk is "on a remote" when a version holding it has a version ref there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from git_mgit.gitcmd import Repo
from git_mgit.transfer.remotes import RemoteUnreachable, list_versions, recorded_versions, remotes
from git_mgit.transfer.versions import Published


@dataclass
class Availability:
    published: dict[str, Published] = field(default_factory=dict)  # remote -> its version refs
    unreachable: list[str] = field(default_factory=list)  # asked, but could not be reached
    unknown: list[str] = field(default_factory=list)  # never asked

    def holder(self, version: str) -> str | None:
        """A remote that has a version ref of `version`."""
        return next((r for r, p in self.published.items() if p.holds(version)), None)


def known(repo: Repo) -> Availability:
    """From what each remote listed when last asked: no network."""
    out = Availability()
    for name in remotes(repo):
        listing = recorded_versions(repo, name)
        if listing is None:
            out.unknown.append(name)
        else:
            out.published[name] = Published.from_listing(listing)
    return out


def ask(repo: Repo) -> Availability:
    """Ask every remote now; one that cannot be reached counts with what it last listed."""
    out = Availability()
    for name in remotes(repo):
        try:
            out.published[name] = Published.from_listing(list_versions(repo, name))
        except RemoteUnreachable:
            out.unreachable.append(name)
            listing = recorded_versions(repo, name)
            if listing is not None:
                out.published[name] = Published.from_listing(listing)
    return out
