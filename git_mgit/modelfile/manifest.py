"""The manifest: what git stores for a tracked model file (the clean output).

Canonical UTF-8 text, one line per segment in file order, so `git diff` on a
manifest is readable and the same bytes always give the same manifest:

    mgit-manifest 1
    kind safetensors
    size 1048664
    chunk 67108864
    header 0 88 b3:<64 hex>
    tensor "encoder.weight" F32 [512,512] 88 1048576 b3:<64 hex>
    bytes 1048664 10 b3:<64 hex>

`header` is the 8-byte length prefix plus the JSON header, `tensor` one
tensor's data, `bytes` anything stored opaque (a file the parser rejected, or
a tail it could not account for). Segments tile the file exactly. A segment
longer than `chunk` is split into chunks of that size (element-aligned,
since every element width divides it); one content hash per chunk.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from git_mgit import hashing
from git_mgit.errors import ManifestError

MAGIC = b"mgit-manifest "
VERSION = 1
FIRST_LINE = MAGIC + str(VERSION).encode() + b"\n"
KINDS = ("safetensors", "opaque")
# A tensor line's name (a JSON string, unrolled so the regex runs fast), dtype, shape, length.
_TENSOR_LINE = re.compile(
    rb'^tensor "([^"\\\n]*(?:\\.[^"\\\n]*)*)" (\S+) \[([0-9,]*)\] [0-9]+ ([0-9]+)', re.M
)
_SHAPE = re.compile(r"\[(?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*\]|\[\]")
_INT = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class Segment:
    kind: str  # "header" | "tensor" | "bytes"
    offset: int
    length: int
    hashes: tuple[bytes, ...]
    name: str | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None

    def render(self) -> str:
        hashes = "".join(" " + hashing.to_text(h) for h in self.hashes)
        if self.kind == "tensor":
            name = json.dumps(self.name, ensure_ascii=False)
            shape = "[" + ",".join(map(str, self.shape or ())) + "]"
            return f"tensor {name} {self.dtype} {shape} {self.offset} {self.length}{hashes}"
        return f"{self.kind} {self.offset} {self.length}{hashes}"


@dataclass(frozen=True)
class Chunk:
    """One stored chunk: where it lies in the file and what it hashes to."""

    segment: Segment
    index: int
    offset: int
    length: int
    content_hash: bytes


@dataclass
class Manifest:
    kind: str
    size: int
    chunk_size: int
    segments: list[Segment] = field(default_factory=list)

    def render(self) -> bytes:
        lines = [
            FIRST_LINE.decode().rstrip("\n"),
            f"kind {self.kind}",
            f"size {self.size}",
            f"chunk {self.chunk_size}",
            *(s.render() for s in self.segments),
        ]
        return ("\n".join(lines) + "\n").encode("utf-8")

    def chunks(self) -> Iterator[Chunk]:
        for seg in self.segments:
            for i, h in enumerate(seg.hashes):
                start = seg.offset + i * self.chunk_size
                yield Chunk(seg, i, start, min(self.chunk_size, seg.offset + seg.length - start), h)

    def tensors(self) -> dict[str, Segment]:
        return {s.name: s for s in self.segments if s.kind == "tensor" and s.name is not None}


class TensorEntry(NamedTuple):
    """What a manifest says of one tensor, without its content hashes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    length: int  # bytes

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def tensor_table(data: bytes) -> list[TensorEntry]:
    """The tensors a manifest lists, read from their lines alone.

    Ten times faster than parse(), which also verifies the hashes, the tiling
    and the canonical form: for read-only questions over thousands of
    versions (`git mgit query`), where a damaged manifest is fsck's business.
    """
    return [
        TensorEntry(
            json.loads(b'"' + name + b'"') if b"\\" in name else name.decode("utf-8"),
            dtype.decode(),
            _dims(shape),
            int(length),
        )
        for name, dtype, shape, length in _TENSOR_LINE.findall(data)
    ]


@lru_cache(maxsize=4096)
def _dims(shape: bytes) -> tuple[int, ...]:
    return tuple(int(d) for d in shape.split(b",")) if shape else ()


def chunk_count(length: int, chunk_size: int) -> int:
    return -(-length // chunk_size)


def looks_like_manifest(data: bytes | memoryview) -> bool:
    """True if the blob claims to be a manifest (it may still fail to parse)."""
    return bytes(data[: len(MAGIC)]) == MAGIC


def parse(data: bytes) -> Manifest:
    """Parse a manifest strictly; only canonical text is accepted."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError("manifest is not UTF-8") from exc
    if not text.endswith("\n"):
        raise ManifestError("manifest does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 4 or lines[0] != FIRST_LINE.decode().rstrip("\n"):
        first = lines[0][:40] if lines else ""
        raise ManifestError(f"unsupported manifest version line {first!r}; upgrade git-mgit")
    kind = _field(lines[1], "kind")
    if kind not in KINDS:
        raise ManifestError(f"unknown manifest kind {kind!r}")
    m = Manifest(kind, _int(_field(lines[2], "size")), _int(_field(lines[3], "chunk")))
    if m.chunk_size <= 0:
        raise ManifestError("manifest chunk size must be positive")
    pos = 0
    for line in lines[4:]:
        seg = _segment(line)
        if seg.offset != pos:
            raise ManifestError(f"manifest segments do not tile the file at offset {pos}")
        if len(seg.hashes) != chunk_count(seg.length, m.chunk_size):
            raise ManifestError(f"manifest segment at {pos} has the wrong number of chunk hashes")
        pos += seg.length
        m.segments.append(seg)
    if pos != m.size:
        raise ManifestError(f"manifest segments cover {pos} bytes, size says {m.size}")
    if m.render() != data:
        raise ManifestError("manifest is not in canonical form")
    return m


def _field(line: str, key: str) -> str:
    k, _, v = line.partition(" ")
    if k != key:
        raise ManifestError(f"manifest line {line[:40]!r}: expected {key!r}")
    return v


def _int(text: str) -> int:
    if not _INT.fullmatch(text):
        raise ManifestError(f"manifest: {text[:40]!r} is not a non-negative integer")
    return int(text)


def _hashes(words: list[str]) -> tuple[bytes, ...]:
    try:
        return tuple(hashing.from_text(w) for w in words)
    except ValueError as exc:
        raise ManifestError(f"manifest: {exc}") from exc


def _segment(line: str) -> Segment:
    kind, _, rest = line.partition(" ")
    if kind in ("header", "bytes"):
        words = rest.split(" ")
        if len(words) < 2:
            raise ManifestError(f"manifest line {line[:60]!r} is incomplete")
        return Segment(kind, _int(words[0]), _int(words[1]), _hashes(words[2:]))
    if kind != "tensor":
        raise ManifestError(f"manifest line {line[:60]!r}: unknown segment kind")
    try:
        name, end = json.JSONDecoder().raw_decode(rest)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"manifest line {line[:60]!r}: bad tensor name") from exc
    words = rest[end:].split(" ")
    if not isinstance(name, str) or len(words) < 5 or words[0] != "":
        raise ManifestError(f"manifest line {line[:60]!r} is incomplete")
    dtype, shape = words[1], words[2]
    if not _SHAPE.fullmatch(shape):
        raise ManifestError(f"manifest line {line[:60]!r}: bad shape")
    dims = tuple(int(d) for d in shape[1:-1].split(",")) if shape != "[]" else ()
    return Segment("tensor", _int(words[3]), _int(words[4]), _hashes(words[5:]), name, dtype, dims)
