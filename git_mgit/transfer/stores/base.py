"""The interface every store implements: publish a push's version refs and their objects.

Planning (layout.py) and writing (publish.py) are the same for every store:
they leave version refs here that file the planned objects. A store sends
them to the remote its own way (refs.py: in git; pointers.py: the bytes to a
blob store, pointer files in git), and may start while they are written
(sending(): a pointer store uploads each new object as it is encoded). Fetching needs
no store object: every version ref says in its commit where its objects are (pointers.resolve).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from git_mgit.gitcmd import Repo
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.transfer.stores.blobs import Pointer
from git_mgit.transfer.stores.choice import Choice

if TYPE_CHECKING:  # fetching needs no store's publishing side (the encoder's imports)
    from git_mgit.transfer.publish import Receiver, Written


@dataclass
class Sent:
    pushes: int = 0  # `git push` runs that carried objects
    bytes: int = 0  # object bytes sent (git) or uploaded (blob store)
    uploaded: int = 0  # objects uploaded to a blob store


class Store(ABC):
    """Where one remote keeps the tensor objects of the versions pushed to it."""

    def __init__(self, repo: Repo, remote: str, choice: Choice) -> None:
        self.repo, self.remote, self.choice = repo, remote, choice

    @contextmanager
    def sending(
        self, store: ChunkStore, there: Mapping[bytes, Pointer] | None = None
    ) -> Iterator[Receiver | None]:
        """Around writing a push's objects and publish(): where to hand objects as they
        are encoded or become readable, for a store that sends them while the rest are
        written. None (this default): they wait for publish(). `there`: chunk hash ->
        the object a blob store holds for it whole, which the receiver files as it is."""
        yield None

    @abstractmethod
    def publish(
        self,
        store: ChunkStore,
        written: Sequence[Written],
        listing: dict[str, str],
        gone: Sequence[str],
        limit: int,
    ) -> Sent:
        """Send the `written` version refs (bases first) and their objects to the remote,
        then delete its refs named in `gone`; `listing` is what the remote listed,
        `limit` the most one `git push` may carry."""
