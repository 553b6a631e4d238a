"""Block-by-block decoding through delta chains: exact bytes, and every level verified."""

from __future__ import annotations

import numpy as np
import pytest

from git_mgit import codecs, hashing
from git_mgit.codecs import codec
from git_mgit.codecs.decoder import BytesSource, ChunkDecoder, Level, decode_all, stream
from git_mgit.codecs.objectformat import Codec
from git_mgit.errors import ObjectCorrupt

RNG = np.random.default_rng(11)


def blob(raw: bytes, dtype: str, base: tuple[bytes, int] | None = None) -> bytearray:
    b = None if base is None else codecs.Base(base[0], hashing.digest(base[0]), base[1])
    enc = codecs.encode(raw, dtype, hashing.digest(raw), b)
    return bytearray(b"".join(bytes(p) for p in enc.parts))


def new_low_bytes(raw: bytes) -> bytes:
    """Every element's least significant byte replaced: a delta whose low plane is noise."""
    x = np.frombuffer(raw, np.uint8).reshape(-1, 4).copy()
    x[:, 0] = RNG.integers(0, 256, len(x), dtype=np.uint8)
    return x.tobytes()


def chain(monkeypatch: pytest.MonkeyPatch, n: int) -> tuple[list[bytearray], list[bytes]]:
    """Three levels: a `raw` bottom, then deltas with 1000- and 4096-element frames."""
    bottom = RNG.integers(0, 256, n * 4, dtype=np.uint8).tobytes()  # noise: stored raw
    middle = new_low_bytes(bottom)
    top = new_low_bytes(middle)
    monkeypatch.setattr(codec, "FRAME_SIZE", 1000)
    b0, b1 = blob(bottom, "F32"), blob(middle, "F32", (bottom, 0))
    monkeypatch.setattr(codec, "FRAME_SIZE", 4096)
    b2 = blob(top, "F32", (middle, 1))
    return [b0, b1, b2], [bottom, middle, top]


def levels(blobs: list[bytearray]) -> list[Level]:
    return [Level(BytesSource(b)) for b in blobs]


def test_a_chain_whose_frames_do_not_line_up_decodes_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blobs, raws = chain(monkeypatch, 50_003)  # odd: the last block and frames are partial
    lv = levels(blobs)
    assert lv[0].header.codec == Codec.RAW
    assert lv[1].header.codec.is_delta and lv[2].header.codec.is_delta
    assert [x.header.frame_size for x in lv[1:]] == [1000, 4096]
    chunk = ChunkDecoder(lv)
    assert chunk.blocks == -(-50_003 // 4096)
    assert decode_all(chunk) == raws[2]
    assert b"".join(bytes(b) for b in stream([chunk])) == raws[2]
    # every block alone, in any order
    for i in reversed(range(chunk.blocks)):
        a, b = chunk.span(i)
        assert [bytes(x) for x in chunk.decode_block(i)] == [r[a:b] for r in raws]


def test_a_known_base_ends_the_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    blobs, raws = chain(monkeypatch, 10_000)
    top = Level(BytesSource(blobs[2]))
    assert decode_all(ChunkDecoder([top], raws[1])) == raws[2]
    with pytest.raises(ObjectCorrupt, match="without a base"):
        ChunkDecoder([top])
    with pytest.raises(ObjectCorrupt, match="different length"):
        ChunkDecoder([top], raws[1][:-4])


def test_levels_must_link_up(monkeypatch: pytest.MonkeyPatch) -> None:
    blobs, _ = chain(monkeypatch, 10_000)
    lv = levels(blobs)
    with pytest.raises(ObjectCorrupt, match="link up"):
        ChunkDecoder([lv[0], lv[2]])


def forged(raw: bytes, base: tuple[bytes, int] | None) -> bytearray:
    """An object whose frames are all valid but decode to `raw` with its last bit flipped."""
    wrong = bytearray(raw)
    wrong[-1] ^= 0x01
    obj = blob(bytes(wrong), "F32", base)
    at = obj.index(hashing.digest(wrong))  # the header's content hash: claim the right one
    obj[at : at + 32] = hashing.digest(raw)
    return obj


@pytest.mark.parametrize("level", [0, 2])
def test_a_corrupt_level_is_caught_after_the_chunks_last_block(
    monkeypatch: pytest.MonkeyPatch, level: int
) -> None:
    first = RNG.standard_normal(20_000).astype(np.float32).tobytes()
    blobs, raws = chain(monkeypatch, 30_000)
    base = None if level == 0 else (raws[1], 1)
    blobs[level] = forged(raws[level], base)
    chunks = [ChunkDecoder(levels([blob(first, "F32")])), ChunkDecoder(levels(blobs))]
    got = bytearray()
    with pytest.raises(ObjectCorrupt, match="does not decode to"):
        for block in stream(chunks):
            got += block
    # the first chunk went out whole and verified; the broken one was caught only at its end
    assert got[: len(first)] == first
    assert len(got) == len(first) + len(raws[2])
