"""The byte layout of one stored object (a git blob holding one chunk).

    magic "MGOB" | version u8 | codec u8 | width u8 | flags u8 | dtype (u8 len + ascii)
    raw_len u64 | content_hash 32B | depth u8 | [base_hash 32B, delta codecs only]
    frame_size u32 | nplanes u8 | per plane: nframes u32, per frame: mode u8, stored_len u32
    payload: the frames in table order (planes most significant first); `raw` has no
    table and the payload is the chunk itself.

All integers little-endian. The header is self-describing so fsck, repack and
multi-resolution readers need nothing but the blob; the content hash is the
BLAKE3 of the decoded chunk and is verified on every decode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from git_mgit.errors import ObjectCorrupt

MAGIC = b"MGOB"
VERSION = 1
MAX_RAW_LEN = 1 << 40


class Codec(IntEnum):
    RAW = 0
    PLANES = 1
    XOR = 2
    SUB = 3
    QDELTA = 4

    @property
    def is_delta(self) -> bool:
        return self in (Codec.XOR, Codec.SUB, Codec.QDELTA)


class FrameMode(IntEnum):
    STORED = 0
    ZSTD = 1


FLAG_ROTATE = 1
_FIXED = struct.Struct("<4sBBBBB")
_FRAME = struct.Struct("<BI")


@dataclass
class ObjectHeader:
    codec: Codec
    dtype: str
    width: int
    rotate: bool
    raw_len: int
    content_hash: bytes
    depth: int = 0
    base_hash: bytes | None = None
    frame_size: int = 0
    # frames[p] = [(mode, stored_len), ...] for plane p (0 = most significant)
    frames: list[list[tuple[int, int]]] = field(default_factory=list)
    header_len: int = 0

    @property
    def payload_len(self) -> int:
        if self.codec == Codec.RAW:
            return self.raw_len
        return sum(n for plane in self.frames for _, n in plane)

    def pack(self) -> bytes:
        dt = self.dtype.encode("ascii")
        flags = FLAG_ROTATE if self.rotate else 0
        out = [_FIXED.pack(MAGIC, VERSION, self.codec, self.width, flags, len(dt)), dt]
        out.append(struct.pack("<Q", self.raw_len) + self.content_hash + bytes([self.depth]))
        if self.codec.is_delta:
            assert self.base_hash is not None
            out.append(self.base_hash)
        out.append(struct.pack("<IB", self.frame_size, len(self.frames)))
        for plane in self.frames:
            out.append(struct.pack("<I", len(plane)))
            out.extend(_FRAME.pack(m, n) for m, n in plane)
        return b"".join(out)


def parse_header(buf: bytes | memoryview) -> ObjectHeader:
    """Parse and sanity-check a header; ObjectCorrupt on anything inconsistent."""
    mv = memoryview(buf)
    try:
        magic, version, codec, width, flags, dlen = _FIXED.unpack_from(mv, 0)
        if magic != MAGIC:
            raise ObjectCorrupt("not a git-mgit object (bad magic)")
        if version != VERSION:
            raise ObjectCorrupt(f"object format version {version} is newer than this git-mgit")
        pos = _FIXED.size
        dtype = bytes(mv[pos : pos + dlen]).decode("ascii")
        pos += dlen
        (raw_len,) = struct.unpack_from("<Q", mv, pos)
        content_hash = bytes(mv[pos + 8 : pos + 40])
        depth = mv[pos + 40]
        pos += 41
        hdr = ObjectHeader(
            Codec(codec), dtype, width, bool(flags & FLAG_ROTATE), raw_len, content_hash, depth
        )
        if hdr.codec.is_delta:
            hdr.base_hash = bytes(mv[pos : pos + 32])
            pos += 32
        hdr.frame_size, nplanes = struct.unpack_from("<IB", mv, pos)
        pos += 5
        for _ in range(nplanes):
            (nframes,) = struct.unpack_from("<I", mv, pos)
            pos += 4
            if nframes > raw_len + 1:
                raise ObjectCorrupt("frame table larger than the chunk")
            hdr.frames.append(
                [_FRAME.unpack_from(mv, pos + i * _FRAME.size) for i in range(nframes)]
            )
            pos += nframes * _FRAME.size
        hdr.header_len = pos
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise ObjectCorrupt(f"object header is truncated or malformed ({exc})") from exc
    _check(hdr)
    return hdr


def _check(hdr: ObjectHeader) -> None:
    if hdr.raw_len > MAX_RAW_LEN or hdr.width not in (1, 2, 4, 8) or len(hdr.content_hash) != 32:
        raise ObjectCorrupt("object header has impossible sizes")
    if hdr.codec == Codec.RAW:
        return
    if len(hdr.frames) != hdr.width or hdr.raw_len % hdr.width or hdr.frame_size <= 0:
        raise ObjectCorrupt("object plane table does not match its element width")
    plane_len = hdr.raw_len // hdr.width
    expected = -(-plane_len // hdr.frame_size)
    if any(len(p) != expected for p in hdr.frames):
        raise ObjectCorrupt("object frame count does not match its length")
    for plane in hdr.frames:
        for i, (mode, n) in enumerate(plane):
            raw = min(hdr.frame_size, plane_len - i * hdr.frame_size)
            if mode not in (FrameMode.STORED, FrameMode.ZSTD) or (
                mode == FrameMode.STORED and n != raw
            ):
                raise ObjectCorrupt("object frame table is inconsistent")
