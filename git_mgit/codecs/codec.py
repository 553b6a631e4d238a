"""Encode one chunk: `raw`, `planes`, and the `xor`/`sub` deltas (decoder.py decodes).

encode() chooses the codec: byte planes when they compress, `raw` when they do
not (cheaper to decode), and a delta against the base chunk only when it is
clearly smaller than the standalone encoding and the chain stays within its
depth cap.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

import zstandard

from git_mgit.codecs import planes
from git_mgit.codecs.decoder import DELTA_OPS
from git_mgit.codecs.objectformat import Codec, FrameMode, ObjectHeader, parse_header
from git_mgit.codecs.planes import Buffer, Op
from git_mgit.codecs.workers import parallel_map

FRAME_SIZE = 1 << 20  # per-plane zstd frame: >= 1 MiB loses nothing in ratio
ZSTD_LEVEL = 1
# Level 1 with a longer minimum match and tiny match tables. To an LZ matcher a
# byte plane of weights is noise: the matches it finds are short and spurious,
# and Huffman-coding those bytes as literals instead is both faster and
# smaller. Exponent plane of N(0, 0.02) fp32 or bf16 weights: 340 -> 870 MB/s,
# 2.78x -> 3.07x; delta planes (long zero runs, found as repeat matches) and
# mantissa planes come out the same. Decoders need nothing: these are plain frames.
ZSTD_TUNING = {"min_match": 7, "hash_log": 6, "search_log": 1, "window_log": 20}
# A plane whose first frame shrinks less than this is stored raw without trying the rest.
_INCOMPRESSIBLE = 0.95
# Keep a delta only when it is at most this fraction of the standalone encoding.
DELTA_GAIN = 0.9
# Keep planes over raw only when they save at least this fraction.
_PLANES_GAIN = 0.98
_SAMPLE_WINDOWS = 4
_SAMPLE_ELEMS = 1 << 16

_local = threading.local()


def _cctx() -> zstandard.ZstdCompressor:
    c = getattr(_local, "cctx", None)
    if c is None:
        params = zstandard.ZstdCompressionParameters.from_level(ZSTD_LEVEL, **ZSTD_TUNING)
        c = _local.cctx = zstandard.ZstdCompressor(compression_params=params)
    return c


def layout(dtype: str, raw_len: int) -> tuple[int, int | None]:
    """(element width for byte planes, bit the sign moves to or None) for a dtype."""
    from git_mgit.tensors.dtypes import DTYPES, sign_below_exponent

    info = DTYPES.get(dtype)
    if info is None or info.bits < 8 or info.bits % 8:
        return 1, None
    width = info.bits // 8
    if info.kind == "complex":
        width //= 2  # a complex element is two floats
    if width not in planes.WIDTHS or raw_len % width:
        return 1, None
    return width, sign_below_exponent(dtype) if width > 1 else None


@dataclass
class Base:
    """A candidate delta base: its decoded bytes, content hash and chain depth."""

    raw: bytes | bytearray | memoryview
    content_hash: bytes
    depth: int


@dataclass
class Encoded:
    """An encoded object as parts (header first) so the writer never concatenates."""

    header: ObjectHeader
    parts: list[bytes | memoryview]

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.parts)


def _compress_planes(
    rows: list[memoryview],
) -> tuple[list[list[tuple[int, int]]], list[bytes | memoryview]]:
    """Frames of every plane, compressed in parallel frame by frame.

    A plane whose first frame does not shrink to _INCOMPRESSIBLE is stored
    raw whole (mantissa planes); in the others, each frame is stored raw
    only if zstd does not make it smaller.
    """
    width, n = len(rows), len(rows[0])
    starts = range(0, n, FRAME_SIZE)

    def frame(job: tuple[int, int], limit: float = 1.0) -> tuple[int, bytes | memoryview]:
        p, s = job
        raw = rows[p][s : s + FRAME_SIZE]
        z = _cctx().compress(raw)
        return (FrameMode.ZSTD, z) if len(z) < len(raw) * limit else (FrameMode.STORED, raw)

    firsts = parallel_map(lambda p: frame((p, 0), _INCOMPRESSIBLE), range(width))
    compressible = [mode == FrameMode.ZSTD for mode, _ in firsts]
    rest = [(p, s) for p in range(width) if compressible[p] for s in starts[1:]]
    done = dict(zip(rest, parallel_map(frame, rest), strict=True))
    results = [
        [firsts[p]]
        + [
            done[p, s] if compressible[p] else (FrameMode.STORED, rows[p][s : s + FRAME_SIZE])
            for s in starts[1:]
        ]
        for p in range(width)
    ]
    table = [[(int(m), len(b)) for m, b in res] for res in results]
    parts = [b for res in results for _, b in res]
    return table, parts


def _encode_as(
    codec: Codec,
    raw: memoryview,
    dtype: str,
    width: int,
    sign_at: int | None,
    content_hash: bytes,
    base: Base | None,
) -> Encoded:
    """`sign_at` is layout()'s, or 0 for the layout of format version 1 (tests write those)."""
    hdr = ObjectHeader(codec, dtype, width, False, len(raw), content_hash, frame_size=FRAME_SIZE)
    if codec == Codec.RAW:
        return Encoded(hdr, [hdr.pack(), raw])
    op, ref = Op.NONE, None
    if codec.is_delta:
        assert base is not None
        hdr.base_hash, hdr.depth = base.content_hash, base.depth + 1
        op, ref = DELTA_OPS[codec], base.raw
        if op == Op.SUB:
            sign_at = None  # a zigzag difference has no sign bit to move
    hdr.rotate, hdr.sign_below_exponent = sign_at is not None, bool(sign_at)
    assert hdr.sign_at == sign_at, "the header cannot describe this sign position"
    pl = planes.split(raw, width, sign_at, op, ref)
    hdr.frames, payload = _compress_planes(pl)
    return Encoded(hdr, [hdr.pack(), *payload])


def sample(buf: memoryview, width: int) -> memoryview:
    """A few windows of the chunk, the same places for any chunk of its length: what codec
    choices are made on."""
    n = len(buf) // width
    if n <= _SAMPLE_WINDOWS * _SAMPLE_ELEMS * 2:
        return buf
    step = n // _SAMPLE_WINDOWS
    return memoryview(
        b"".join(
            buf[i * step * width : (i * step + _SAMPLE_ELEMS) * width]
            for i in range(_SAMPLE_WINDOWS)
        )
    )


def sampled(raw: Buffer, dtype: str) -> tuple[memoryview, float]:
    """A chunk's sample windows and the factor that scales sizes measured on them to the chunk."""
    view = memoryview(raw).cast("B")
    width, _ = layout(dtype, len(view))
    smp = sample(view, width)
    return smp, len(view) / max(len(smp), 1)


def estimate_whole(sample: memoryview, dtype: str) -> float:
    """What the chunk a sample stands for stores standalone, per sampled byte times its length."""
    sizes = estimate(sample, dtype)
    return sizes[standalone(sizes)]


def estimate_delta(sample: memoryview, dtype: str, base_sample: memoryview) -> float:
    """What encode() would store for the sample's chunk given this base (standalone where the
    delta does not pay)."""
    sizes = estimate(sample, dtype, base_sample)
    whole = sizes[standalone(sizes)]
    delta = min(sizes[Codec.XOR], sizes[Codec.SUB])
    return delta if delta < whole * DELTA_GAIN else whole


def estimate(
    sample: memoryview, dtype: str, base_sample: memoryview | None = None
) -> dict[Codec, int]:
    """Encoded sizes of a sample (see sample()): `raw` and `planes`, and with the base
    chunk's sample, `xor` and `sub`."""
    width, sign_at = layout(dtype, len(sample))
    est = {
        Codec.RAW: len(sample),
        Codec.PLANES: _encode_as(
            Codec.PLANES, sample, dtype, width, sign_at, b"\0" * 32, None
        ).size,
    }
    if base_sample is not None:
        base = Base(base_sample, b"\0" * 32, 0)
        for codec in (Codec.XOR, Codec.SUB):
            est[codec] = _encode_as(codec, sample, dtype, width, sign_at, b"\0" * 32, base).size
    return est


def standalone(est: dict[Codec, int]) -> Codec:
    """`planes` when it saves enough to be worth decoding, else `raw`."""
    return Codec.PLANES if est[Codec.PLANES] < est[Codec.RAW] * _PLANES_GAIN else Codec.RAW


def encode_as(
    codec: Codec,
    raw: bytes | bytearray | memoryview,
    dtype: str,
    content_hash: bytes,
    base: Base | None = None,
) -> Encoded:
    """Encode one chunk with a codec chosen beforehand (a delta codec needs `base`)."""
    raw = memoryview(raw).cast("B")
    width, sign_at = layout(dtype, len(raw))
    return _encode_as(codec, raw, dtype, width, sign_at, content_hash, base)


def encode(
    raw: bytes | bytearray | memoryview,
    dtype: str,
    content_hash: bytes,
    base: Base | None = None,
    max_depth: int = 8,
    delta_gain: float = DELTA_GAIN,
) -> Encoded:
    """Encode one chunk, picking the smallest codec that the rules allow.

    A delta is kept when its estimate is at most `delta_gain` times the
    standalone one (repack passes infinity: its plan already chose the base).
    """
    raw = memoryview(raw).cast("B")
    width, sign_at = layout(dtype, len(raw))
    if base is not None and (len(base.raw) != len(raw) or base.depth + 1 > max_depth):
        base = None
    smp = sample(raw, width)
    bsample = None if base is None else sample(memoryview(base.raw).cast("B"), width)
    est = estimate(smp, dtype, bsample)
    best = standalone(est)
    if base is not None:
        cand = min((Codec.XOR, Codec.SUB), key=est.__getitem__)
        if est[cand] < min(est[Codec.PLANES], est[Codec.RAW]) * delta_gain:
            best = cand
    return _encode_as(best, raw, dtype, width, sign_at, content_hash, base)


def reversed_xor(obj: bytes | bytearray | memoryview, depth: int) -> Encoded | None:
    """An `xor` object of chunk A against base B, turned into B against base A at chain
    depth `depth`; None for any other codec.

    A XOR B is B XOR A, and the sign move and plane split that follow act on each bit
    alike, so the payload is the same bytes: only the header's two hashes and the depth
    change. A push publishing older versions as deltas of newer ones reuses the forward
    deltas `git add` wrote this way, with no decoding or compression.
    """
    view = memoryview(obj).cast("B")
    hdr = parse_header(view)
    if hdr.codec != Codec.XOR or hdr.base_hash is None:
        return None
    flipped = dataclasses.replace(
        hdr, content_hash=hdr.base_hash, base_hash=hdr.content_hash, depth=depth, header_len=0
    )
    return Encoded(flipped, [flipped.pack(), view[hdr.header_len :]])
