"""Smudge: rebuild a file byte-for-byte from its manifest, streaming.

Chunks are decoded a block at a time (a few MiB) on worker threads, a few
blocks ahead of the one being written, and each block is hashed while it is
still in cache: memory stays at a few blocks whatever the chunk size, and
nothing chunk-sized is ever allocated or paged in. Text that is not a
manifest passes through unchanged: a repository cloned before tracking began
must still check out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from git_mgit import codecs, hashing
from git_mgit.console.progress import Progress
from git_mgit.errors import ManifestError, ObjectCorrupt, ObjectMissing
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chunkstore import ChunkStore

if TYPE_CHECKING:
    from git_mgit.codecs.decoder import ChunkDecoder

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
    """Write the file `m` describes; raises before writing anything if a chunk is missing.

    A chunk found corrupt raises after some of its bytes were written: the
    caller must tell git to discard the output (status=error, or exit 1).
    """
    fill(m, list(m.chunks()), path, store, lambda block, _: write(block))  # in file order


def fill(
    m: mf.Manifest,
    chunks: list[mf.Chunk],
    path: str,
    store: ChunkStore,
    write_at: Callable[[memoryview, int], object],
) -> None:
    """Decode `chunks` of the file `m` describes (in file order) and hand each block to
    `write_at` with its offset in the file; raises as smudge() does."""
    missing = store.missing([c.content_hash for c in chunks])
    if missing:
        raise ObjectMissing(
            f"{path}: {len(missing)} tensor object(s) are missing, e.g. {hashing.to_text(missing[0])}; "
            "run `git mgit fetch` (or push them from the clone that has them)"
        )
    progress = Progress(f"git-mgit: checking out {path}", m.size)
    progress.update(m.size - sum(c.length for c in chunks))  # written already

    def decoders() -> Iterator[ChunkDecoder]:
        for chunk in chunks:
            decoder = store.decoder(chunk.content_hash)
            if decoder.size != chunk.length:
                raise ObjectCorrupt(
                    f"chunk {hashing.to_text(chunk.content_hash)} decodes to {decoder.size} "
                    f"bytes, the manifest says {chunk.length}"
                )
            yield decoder

    places = iter(chunks)
    at = left = 0
    try:
        for block in codecs.stream(decoders()):
            while not left:  # blocks never straddle chunks
                chunk = next(places)
                at, left = chunk.offset, chunk.length
            write_at(block, at)
            at, left = at + len(block), left - len(block)
            progress.update(len(block))
    except ObjectCorrupt as exc:
        raise ObjectCorrupt(f"{path}: {exc}; run `git mgit fsck`") from exc
    finally:
        progress.finish()
