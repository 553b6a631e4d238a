"""The byte layout of one stored object (a git blob holding one chunk).

    magic "MGOB" | version u8 | codec u8 | width u8 | flags u8 | dtype (u8 len + ascii)
    raw_len u64 | content_hash 32B | depth u8 | [base_hash 32B, delta codecs only]
    [step f64, qdelta only]
    frame_size u32 | nplanes u8 | per plane: nframes u32, per frame: mode u8, stored_len u32
    payload: the frames in table order (planes most significant first); `raw` has no
    table and the payload is the chunk itself.

`qdelta` (lossy, written only by `git mgit compress --lossy`; qdelta.py) stores
integers, one per chunk element: `width` is their byte width (1, 2 or 4), which
need not be the dtype's, so its planes hold raw_len / dtype width elements;
`step` is the quantization step of its floats.

All integers little-endian. The header is self-describing so fsck, repack and
multi-resolution readers need nothing but the blob; the content hash is the
BLAKE3 of the decoded chunk and is verified on every decode.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from enum import IntEnum

from git_mgit.errors import ObjectCorrupt
from git_mgit.tensors.dtypes import DTYPES, sign_below_exponent

MAGIC = b"MGOB"
# 2: FLAG_SIGN_BELOW_EXPONENT may be set. Version 1 objects (sign rotated to bit 0) still
# decode; the bump makes an older git-mgit refuse new objects by name, not by a hash mismatch.
VERSION = 2
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


FLAG_ROTATE = 1  # float sign bit moved before the split: to bit 0 (a rotation) unless ...
FLAG_SIGN_BELOW_EXPONENT = 2  # ... this is set too: to just below the exponent (planes.py)
_FLAGS = FLAG_ROTATE | FLAG_SIGN_BELOW_EXPONENT
QDELTA_DTYPES = ("F16", "BF16", "F32", "F64")
_FIXED = struct.Struct("<4sBBBBB")
_STEP = struct.Struct("<d")
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
    step: float = 0.0  # qdelta only: what one unit of its integers is worth
    sign_below_exponent: bool = False  # with rotate: FLAG_SIGN_BELOW_EXPONENT

    @property
    def sign_at(self) -> int | None:
        """The bit each element's sign was moved to before the split (planes.split), or None."""
        if not self.rotate:
            return None
        return sign_below_exponent(self.dtype) if self.sign_below_exponent else 0

    @property
    def element_size(self) -> int:
        """Bytes of the decoded chunk per plane element: the float's width for qdelta."""
        if self.codec == Codec.QDELTA:
            return DTYPES[self.dtype].bits // 8
        return self.width

    @property
    def payload_len(self) -> int:
        if self.codec == Codec.RAW:
            return self.raw_len
        return sum(n for plane in self.frames for _, n in plane)

    def pack(self) -> bytes:
        dt = self.dtype.encode("ascii")
        flags = (FLAG_ROTATE if self.rotate else 0) | (
            FLAG_SIGN_BELOW_EXPONENT if self.sign_below_exponent else 0
        )
        out = [_FIXED.pack(MAGIC, VERSION, self.codec, self.width, flags, len(dt)), dt]
        out.append(struct.pack("<Q", self.raw_len) + self.content_hash + bytes([self.depth]))
        if self.codec.is_delta:
            assert self.base_hash is not None
            out.append(self.base_hash)
        if self.codec == Codec.QDELTA:
            out.append(_STEP.pack(self.step))
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
        if not 1 <= version <= VERSION or flags & ~_FLAGS:
            raise ObjectCorrupt(
                f"object format version {version} with flags {flags:#x} is not one this "
                "git-mgit reads (written by a newer one? upgrade git-mgit)"
            )
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
        hdr.sign_below_exponent = bool(flags & FLAG_SIGN_BELOW_EXPONENT)
        if hdr.codec.is_delta:
            hdr.base_hash = bytes(mv[pos : pos + 32])
            pos += 32
        if hdr.codec == Codec.QDELTA:
            (hdr.step,) = _STEP.unpack_from(mv, pos)
            pos += _STEP.size
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
    if hdr.sign_below_exponent:
        at = sign_below_exponent(hdr.dtype)
        if not hdr.rotate or at is None or not 0 < at < hdr.width * 8 - 1:
            raise ObjectCorrupt(f"object moves the sign of {hdr.dtype} to an impossible bit")
    if hdr.codec == Codec.QDELTA and (
        hdr.dtype not in QDELTA_DTYPES or hdr.rotate or hdr.width > 4 or not 0 < hdr.step < math.inf
    ):
        raise ObjectCorrupt("qdelta object has an impossible dtype, width or step")
    size = hdr.element_size
    if len(hdr.frames) != hdr.width or hdr.raw_len % size or hdr.frame_size <= 0:
        raise ObjectCorrupt("object plane table does not match its element width")
    plane_len = hdr.raw_len // size
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
