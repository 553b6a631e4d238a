"""Version refs: `refs/mgit/v/<version>` and `refs/mgit/v/<version>.<base>[.<base>...]`.

A version is a manifest blob's object id. Its ref files the objects of its
chunks that none of its bases has; a delta object in it is a delta of a chunk
of the version or of a base. The names alone describe the graph of bases, so
one `git ls-remote` tells a client every ref the closure of a version needs.
See docs/storage.md, "Transfer follows the checkout".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from git_mgit.store.lookup import VERSION_PREFIX

MAX_BASES = 4
_ID = r"(?:[0-9a-f]{40}|[0-9a-f]{64})"
_NAME = re.compile(rf"({_ID})((?:\.{_ID}){{0,{MAX_BASES}}})")


@dataclass(frozen=True, order=True)
class VersionRef:
    version: str
    bases: tuple[str, ...]
    commit: str = ""

    @property
    def name(self) -> str:
        return VERSION_PREFIX + ".".join((self.version, *self.bases))

    @property
    def whole(self) -> bool:
        return not self.bases

    @property
    def message(self) -> str:
        """The commit message of the ref's commit (it is part of what names the commit)."""
        return f"git-mgit version {self.version}\n" + "".join(f"\nbases {b}\n" for b in self.bases)


def parse(refname: str, commit: str = "") -> VersionRef | None:
    """The version ref a ref name spells, or None for any other ref."""
    if not refname.startswith(VERSION_PREFIX):
        return None
    match = _NAME.fullmatch(refname[len(VERSION_PREFIX) :])
    if match is None:
        return None
    bases = tuple(match[2].split(".")[1:]) if match[2] else ()
    return VersionRef(match[1], bases, commit)


class Published:
    """The version refs one repository holds (a remote's listing, or this clone's refs)."""

    def __init__(self, refs: Iterable[VersionRef]) -> None:
        self.by_version: dict[str, list[VersionRef]] = {}
        for ref in sorted(refs, key=lambda r: (len(r.bases), r.name)):
            self.by_version.setdefault(ref.version, []).append(ref)

    @classmethod
    def from_listing(cls, refs: Mapping[str, str]) -> Published:
        """From refname -> commit (what `git ls-remote` or `for-each-ref` lists)."""
        return cls(r for name, commit in refs.items() if (r := parse(name, commit)) is not None)

    def holds(self, version: str) -> bool:
        return version in self.by_version

    def best(self, version: str) -> VersionRef | None:
        """The ref a fetch takes: fewest bases (whole first), then by name."""
        refs = self.by_version.get(version)
        return refs[0] if refs else None

    def refs(self) -> list[VersionRef]:
        return [r for refs in self.by_version.values() for r in refs]

    def closure(self, versions: Iterable[str], here: Callable[[str], bool]) -> list[VersionRef]:
        """The refs checking out `versions` needs: each one's best ref, then its bases'.

        A base `here` says is complete in this clone is left out, and so are its
        own bases. Wanted versions without a ref are skipped (the caller sees what
        is still missing afterwards).
        """
        out: dict[str, VersionRef] = {}
        todo = list(versions)
        while todo:
            v = todo.pop()
            if v in out:
                continue
            ref = self.best(v)
            if ref is None:
                continue
            out[v] = ref
            todo.extend(b for b in ref.bases if b not in out and not here(b))
        return sorted(out.values())

    def grounded(self, version: str, without: str) -> bool:
        """Whether a fetch of `version` still ends at whole refs once the ref named `without`
        is gone: each version's best ref left (what closure() takes), through its bases,
        never comes back to a version on the way, nor reaches one with no ref."""

        def down(v: str, path: frozenset[str]) -> bool:
            ref = next((r for r in self.by_version.get(v, ()) if r.name != without), None)
            if v in path or ref is None:
                return False
            return all(down(b, path | {v}) for b in ref.bases)

        return down(version, frozenset())

    def hanging(self, version: str) -> int:
        """The most levels of versions chained onto `version` (refs naming it as a base)."""
        children: dict[str, list[str]] = {}
        for ref in self.refs():
            for b in ref.bases:
                children.setdefault(b, []).append(ref.version)
        depth, seen = 0, {version}
        level = [version]
        while True:
            level = [c for v in level for c in children.get(v, ()) if c not in seen]
            if not level:
                return depth
            seen.update(level)
            depth += 1
