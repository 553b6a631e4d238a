"""Carrying out a storage plan: only object refs change, never a commit.

Chunks whose chosen base differs from their object's are re-encoded from
their verified bytes (decoded through the old objects); chunks that keep
their base but sit at a new chain depth get a new header on the same
payload; the rest keep their object. One new anchor files every object
(rewritten or kept), and one `update-ref --stdin` transaction swaps it for
the anchors read at the start, so a concurrent `git add` (a new anchor)
is never lost. Until that transaction, the old anchors keep everything
reachable: an interrupted repack leaves just an unreferenced pack for
`git gc`. Afterwards every rewritten chunk is decoded and verified through
the new anchor; if one fails, the old anchors are restored.

The superseded objects become unreachable; `git mgit gc` reclaims them
once they are past the grace period (`--prune=now` at once).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from git_mgit import codecs
from git_mgit.codecs import codec
from git_mgit.codecs.objectformat import parse_header
from git_mgit.console.progress import Progress
from git_mgit.errors import MgitError, ObjectCorrupt
from git_mgit.gitcmd import GitError, Repo
from git_mgit.planning.graph import ROOT, Plan
from git_mgit.repack.costs import Costed
from git_mgit.repack.survey import Survey
from git_mgit.store import anchors
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.decoded import DecodedChunks
from git_mgit.store.lookup import ANCHOR_PREFIX, anchor_tips
from git_mgit.store.packwriter import PackWriter


@dataclass
class Outcome:
    reencoded: int = 0
    restamped: int = 0  # same payload, new chain depth in the header
    kept: int = 0
    before: int = 0  # stored bytes of the planned chunks
    after: int = 0
    anchor: str | None = None


@contextmanager
def _lock(store: ChunkStore) -> Iterator[None]:
    path = store.repo.mgit_dir / "repack.lock"
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        raise MgitError(
            f"another repack is running ({path} exists); remove it if no repack is"
        ) from None
    os.close(fd)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def _order(plan: Plan) -> list[int]:
    """Nodes with every base before the chunks stored as its deltas."""
    children: dict[int, list[int]] = {}
    for e in plan.chosen:
        children.setdefault(e.src, []).append(e.dst)
    out, stack = [], list(reversed(children.get(ROOT, [])))
    while stack:
        v = stack.pop()
        out.append(v)
        stack.extend(reversed(children.get(v, [])))
    return out


def _restamped(store: ChunkStore, h: bytes, depth: int) -> list[bytes | memoryview]:
    source = store.source(h)
    data = source.view(0, source.size)
    hdr = parse_header(data)
    hdr.depth = depth
    return [hdr.pack(), data[hdr.header_len :]]


def apply(store: ChunkStore, sv: Survey, costed: Costed, plan: Plan) -> Outcome:
    """Write the plan's objects and swap the anchors; raises MgitError and changes nothing on failure."""
    repo = store.repo
    with _lock(store):
        store.cache.refresh()
        tips = anchor_tips(repo, (ANCHOR_PREFIX,))  # version refs mirror remotes: kept
        objects = {h: loc[0] for h in store.cache.all() if (loc := store.locate(h)) is not None}
        out = Outcome()
        written: dict[bytes, tuple[bytes, int]] = {}  # hash -> (oid20, stored size)
        depth: dict[bytes, int] = {}
        decoded = DecodedChunks(store)
        pack = PackWriter(repo.objects_dir)
        progress = Progress("repacking", sum(c.length for c in sv.chunks.values()))
        try:
            for v in _order(plan):
                h = costed.nodes[v]
                info = sv.chunks[h]
                src = plan.chosen[v].src
                base = None if src == ROOT else costed.nodes[src]
                hdr = store.level(h).header
                out.before += store.locate(h)[1]
                current = hdr.base_hash if hdr.codec.is_delta else None
                want = 0 if base is None else depth[base] + 1
                if current == base and hdr.depth == want:
                    out.kept += 1
                    out.after += store.locate(h)[1]
                    depth[h] = want
                elif current == base:
                    parts = _restamped(store, h, want)
                    written[h] = (pack.add("blob", parts), sum(len(p) for p in parts))
                    out.restamped += 1
                    depth[h] = want
                else:
                    based = None
                    if base is not None:
                        based = codecs.Base(decoded.get(base), base, depth[base])
                    enc = codec.encode(
                        decoded.get(h), info.dtype, h, based, max_depth=255, delta_gain=math.inf
                    )
                    written[h] = (pack.add("blob", enc.parts), enc.size)
                    out.reencoded += 1
                    depth[h] = enc.header.depth
                if h in written:
                    out.after += written[h][1]
                progress.update(info.length)
            if not written:
                pack.abort()
                return out
            objects.update({h: oid.hex() for h, (oid, _) in written.items()})
            commit = anchors.write_anchor(
                pack, sorted((h, bytes.fromhex(oid)) for h, oid in objects.items())
            )
            pack.finish()
        except BaseException:
            pack.abort()
            raise
        finally:
            progress.finish()
        _swap(repo, tips, {ANCHOR_PREFIX + commit: commit})
        out.anchor = commit
        try:
            _verify(store, written)
        except ObjectCorrupt as exc:
            _swap(repo, {ANCHOR_PREFIX + commit: commit}, tips)
            store.invalidate()
            raise MgitError(
                f"repack wrote an object that does not verify ({exc}); the old objects are back "
                "in place, nothing was lost; please report this"
            ) from exc
        return out


def _swap(repo: Repo, old: dict[str, str], new: dict[str, str]) -> None:
    """Delete `old` refs and create `new` ones (refname -> commit) in one transaction."""
    lines = [f"delete {ref} {c}\n" for ref, c in old.items()]
    lines += [f"create {ref} {c}\n" for ref, c in new.items()]
    try:
        repo.git("update-ref", "--stdin", input="".join(lines).encode())
    except GitError as exc:
        raise MgitError(
            f"repack: the object refs changed while it ran ({exc}); nothing was changed, "
            "run `git mgit repack` again"
        ) from exc


def _verify(store: ChunkStore, written: dict[bytes, tuple[bytes, int]]) -> None:
    """Decode every rewritten chunk through the new anchor (BLAKE3 checked on every level)."""
    store.invalidate()
    store.cache.refresh()
    progress = Progress("verifying", len(written), counting=True)
    try:
        for h, (oid, _) in written.items():
            codecs.decode_all(store.decoder(h, oid=oid.hex()))
            progress.update(1)
    finally:
        progress.finish()
