"""Smudge: rebuild a file byte-for-byte from its manifest, streaming.

Each chunk is decoded (and its BLAKE3 verified) on a background thread while
the previous one is being written, so memory stays at a few chunks. Text that
is not a manifest passes through unchanged: a repository cloned before
tracking began must still check out.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from git_mgit import hashing
from git_mgit import manifest as mf
from git_mgit.errors import ManifestError, ObjectCorrupt, ObjectMissing
from git_mgit.progress import Progress
from git_mgit.store.chunkstore import ChunkStore

Write = Callable[[memoryview | bytes], object]


def parse_or_none(data: bytes, path: str) -> mf.Manifest | None:
    """The manifest in `data`, None for pass-through content; damaged manifests raise."""
    if not mf.looks_like_manifest(data):
        return None
    try:
        return mf.parse(data)
    except ManifestError as exc:
        raise ManifestError(
            f"{path}: the stored manifest is damaged ({exc}); restore it with `git checkout <good-rev> -- {path}`"
        ) from exc


def missing_chunks(m: mf.Manifest, store: ChunkStore) -> list[bytes]:
    return store.missing([c.content_hash for c in m.chunks()])


def smudge(m: mf.Manifest, path: str, store: ChunkStore, write: Write) -> None:
    """Write the file `m` describes; raises before writing anything if a chunk is missing."""
    missing = missing_chunks(m, store)
    if missing:
        raise ObjectMissing(
            f"{path}: {len(missing)} tensor object(s) are missing, e.g. {hashing.to_text(missing[0])}; "
            "run `git mgit fetch` (or push them from the clone that has them)"
        )
    chunks = list(m.chunks())
    progress = Progress(f"git-mgit: checking out {path}", m.size)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mgit-decode") as pool:
        ahead = pool.submit(store.get_raw, chunks[0].content_hash) if chunks else None
        try:
            for i, chunk in enumerate(chunks):
                assert ahead is not None
                raw = ahead.result()
                ahead = (
                    pool.submit(store.get_raw, chunks[i + 1].content_hash)
                    if i + 1 < len(chunks)
                    else None
                )
                if len(raw) != chunk.length:
                    raise ObjectCorrupt(
                        f"{path}: chunk {hashing.to_text(chunk.content_hash)} decodes to {len(raw)} bytes, "
                        f"the manifest says {chunk.length}; run `git mgit fsck`"
                    )
                write(memoryview(raw))
                progress.update(len(raw))
                del raw
        except ObjectCorrupt as exc:
            msg = str(exc)
            raise ObjectCorrupt(
                msg if msg.startswith(path) else f"{path}: {msg}; run `git mgit fsck`"
            ) from exc
        finally:
            if ahead is not None:
                ahead.cancel()
            progress.finish()
