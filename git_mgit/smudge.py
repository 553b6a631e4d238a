"""Smudge: rebuild a file byte-for-byte from its manifest, streaming.

Each chunk is decoded (and its BLAKE3 verified) on a background thread while
the previous one is being written, so memory stays at a few chunks. Text that
is not a manifest passes through unchanged: a repository cloned before
tracking began must still check out.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

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
    # Three stages overlap: read chunk i+2's object, decode chunk i+1, write chunk i.
    with (
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="mgit-read") as reader,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="mgit-decode") as decoder,
    ):
        reads: dict[int, Future[bytearray]] = {}
        decodes: dict[int, Future[bytearray]] = {}

        def read(i: int) -> None:
            if i < len(chunks) and i not in reads and i not in decodes:
                reads[i] = reader.submit(store.read_object, chunks[i].content_hash)

        def decode(i: int) -> None:
            if i < len(chunks) and i not in decodes:
                read(i)
                decodes[i] = decoder.submit(_decode, store, chunks[i].content_hash, reads.pop(i))

        try:
            for i, chunk in enumerate(chunks):
                decode(i)
                decode(i + 1)
                read(i + 2)
                raw = decodes.pop(i).result()
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
            for f in (*reads.values(), *decodes.values()):
                f.cancel()
            progress.finish()


def _decode(store: ChunkStore, content_hash: bytes, read: Future[bytearray]) -> bytearray:
    return store.get_raw(content_hash, read.result())
