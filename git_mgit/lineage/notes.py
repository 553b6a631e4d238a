"""Reading and writing `refs/notes/mgit` in bulk.

`git notes add` costs a process and a commit per annotated object, and
git-fast-import refuses notes on blobs; lineage edits touch many versions at
once (an inference run, a cascade), so notes are written here directly: new
note blobs, a rebuilt notes tree and one commit go into one pack, then the
ref moves with a compare-and-swap. A concurrent writer makes the swap fail;
the edit is then re-applied on the new tip (records are a union, so
re-applying is always safe).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from git_mgit.errors import MgitError
from git_mgit.gitcmd import GitError, Repo
from git_mgit.store.gitobjects import commit_body, tree_body
from git_mgit.store.packwriter import PackWriter

NOTES_REF = "refs/notes/mgit"
_HEX40 = re.compile(r"[0-9a-f]{40}")
_ATTEMPTS = 5
_FALLBACK_IDENT = "git-mgit <git-mgit@localhost>"


@dataclass
class Notes:
    """A snapshot of the notes ref: annotated object id -> note text."""

    tip: str | None
    texts: dict[str, str] = field(default_factory=dict)
    # every tree entry (path -> (mode, blob id)), to rewrite the tree without losing any
    entries: dict[str, tuple[str, str]] = field(default_factory=dict)


def load(repo: Repo, ref: str = NOTES_REF) -> Notes:
    """All notes under `ref` in two git calls (ls-tree, one cat-file batch)."""
    tip = repo.git("rev-parse", "--verify", "--quiet", ref + "^{commit}", check=False) or None
    notes = Notes(tip)
    if tip is None:
        return notes
    blobs: dict[str, str] = {}
    for entry in repo.git_bytes("ls-tree", "-r", "-z", tip).split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.decode().partition("\t")
        mode, kind, oid = meta.split()
        notes.entries[path] = (mode, oid)
        target = path.replace("/", "")
        if kind == "blob" and _HEX40.fullmatch(target):
            blobs[target] = oid
    for target, data in zip(blobs, repo.cat_blobs(list(blobs.values())), strict=True):
        notes.texts[target] = (data or b"").decode("utf-8", "replace")
    return notes


def _ident(repo: Repo) -> tuple[str, int]:
    """The user's committer identity (as git resolves it) and the time to stamp."""
    line = repo.git("var", "GIT_COMMITTER_IDENT", check=False)
    m = re.fullmatch(r"(.+ <[^<>]*>) (\d+) [+-]\d{4}", line)
    if m:
        return m.group(1), int(m.group(2))
    return _FALLBACK_IDENT, int(time.time())


def _build_tree(pack: PackWriter, entries: Mapping[str, tuple[str, str]]) -> bytes:
    """Write nested trees for path -> (mode, hex id); returns the root tree id."""
    children: dict[str, dict[str, tuple[str, str]]] = {}
    files: list[tuple[str, bytes, bytes]] = []
    for path, (mode, oid) in entries.items():
        head, sep, rest = path.partition("/")
        if sep:
            children.setdefault(head, {})[rest] = (mode, oid)
        else:
            files.append((mode, head.encode(), bytes.fromhex(oid)))
    for name, sub in children.items():
        files.append(("40000", name.encode(), _build_tree(pack, sub)))
    return pack.add("tree", [tree_body(files)])


def _fanout(target: str) -> str:
    return f"{target[:2]}/{target[2:]}"


def write(
    repo: Repo,
    edit: Callable[[Notes], Mapping[str, str]],
    message: str,
    ref: str = NOTES_REF,
) -> Notes:
    """Apply `edit` (snapshot -> {object id: new note text}) and commit it on `ref`.

    `edit` is called again on a fresh snapshot if another writer moved the
    ref meanwhile. Returns the snapshot the edit was applied to, updated.
    """
    for _ in range(_ATTEMPTS):
        notes = load(repo, ref)
        changes = edit(notes)
        if not changes:
            return notes
        entries = dict(notes.entries)
        paths = {p.replace("/", ""): p for p in entries}
        ident, stamp = _ident(repo)
        with PackWriter(repo.objects_dir) as pack:
            for target, text in changes.items():
                blob = pack.add("blob", [text.encode()]).hex()
                entries[paths.get(target, _fanout(target))] = ("100644", blob)
            root = _build_tree(pack, entries).hex()
            body = commit_body(root, [notes.tip] if notes.tip else [], message + "\n", ident, stamp)
            commit = pack.add("commit", [body]).hex()
            pack.finish()
        try:
            repo.git("update-ref", "-m", f"git-mgit: {message}", ref, commit, notes.tip or "0" * 40)
        except GitError:
            continue  # someone else wrote notes: re-apply on their tip
        notes.tip = commit
        notes.texts.update(changes)
        return notes
    raise MgitError(f"{ref} kept moving while git-mgit wrote lineage notes; run the command again")
