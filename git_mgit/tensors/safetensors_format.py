"""Streaming safetensors header reader: it never touches tensor data.

A safetensors file is an 8-byte little-endian header length N, N bytes of
UTF-8 JSON, then the data buffer. The JSON maps each tensor name to
`{"dtype", "shape", "data_offsets": [begin, end]}` (offsets relative to the
buffer) plus an optional `"__metadata__"` map of strings.

`parse_header` accepts what the reference implementation (`SafeTensors::
read_metadata` and `Metadata::validate` in safetensors/src/tensor.rs,
checked against the installed wheel) accepts, so that every file a
framework can load is stored tensor by tensor and every other file is
stored opaque. Mirrored rules that are easy to get wrong:

- the JSON may be surrounded by any JSON whitespace (space, tab, CR, LF),
  not only the spaces writers pad with; nothing else may follow it;
- `"__metadata__": null` is the same as no metadata;
- integers are u64: `-0`, `1.0`, `1e3` and anything above 2**64 - 1 are
  rejected, as are `true` and strings;
- sorted by (begin, end), each tensor must begin where the previous one
  ended, starting at 0: no holes, no overlaps. A zero-length tensor may
  therefore share its offset with a neighbour's begin or end, but not sit
  inside another tensor;
- lengths are counted in u64 with the reference's overflow rule (see
  `dtypes.nbytes`), and packed sub-byte tensors must fill whole bytes.

Where the reference is more lenient we are stricter, because a file we
reject is still stored, byte for byte, as opaque chunks:

- duplicate keys are rejected at every level (the reference silently keeps
  the last duplicate tensor name or metadata key: readers that keep the
  first one would see a different file);
- a tensor entry may hold only dtype, shape and data_offsets (the
  reference ignores other fields, which would force us to parse arbitrary
  nested JSON: no JSON bomb can reach a recursive parser here);
- at most MAX_TENSORS tensors, MAX_METADATA_ENTRIES metadata entries and
  MAX_DIMS dimensions, so that parse time and memory stay proportional to
  a small multiple of the header size and hostile headers fail fast;
- the header length limit is the reference's own (100,000,000 bytes).

The JSON is read with a small hand-written parser for exactly this shape
of document; strings go through the standard library's C `scanstring`
(same escapes and control-character rules as serde_json), integer arrays
through one regular expression.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import scanstring

from git_mgit.errors import NotSafetensors
from git_mgit.tensors.dtypes import DTYPES, U64_MAX, nbytes

MAX_HEADER_BYTES = 100_000_000  # the reference's MAX_HEADER_SIZE (100 MB, not MiB)
MAX_TENSORS = 100_000  # beyond this, the file is stored opaque (hostile or absurd)
MAX_METADATA_ENTRIES = 100_000  # same bound for the `__metadata__` map
MAX_DIMS = 64  # numpy 2 NPY_MAXDIMS; no framework loads a tensor with more dimensions
# What a file git-lfs has not downloaded holds in place of the model (its pointer's first
# line): such a file is not safetensors, and saying why tells the user what to run.
GIT_LFS_SPEC = b"version https://git-lfs.github.com/spec/v1"

_FIELDS = ("dtype", "shape", "data_offsets")
_WS = re.compile(r"[ \t\n\r]*")
_UINT = r"(?:0|[1-9][0-9]*)"
# Repetitions are bounded: sre keeps state for each repetition of a group, so
# an unbounded `(...)*` over a 100 MB array would take gigabytes.
_UINT_ARRAY = re.compile(
    rf"\[[ \t\n\r]*(?:{_UINT}[ \t\n\r]*(?:,[ \t\n\r]*{_UINT}[ \t\n\r]*){{0,{MAX_DIMS - 1}}})?\]"
)
_ARRAY_ITEM = re.compile(rf"[ \t\n\r]*{_UINT}[ \t\n\r]*[,\]]")
# The compact form serde_json (every safetensors writer) emits: one regex
# match instead of a dozen small steps. Anything else takes the general path.
_CANONICAL_ENTRY = re.compile(
    rf'\{{"dtype":"([A-Z0-9_]{{1,16}})","shape":\[({_UINT}(?:,{_UINT}){{0,{MAX_DIMS - 1}}})?\],'
    rf'"data_offsets":\[({_UINT}),({_UINT})\]\}}'
)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's place in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the FILE (8 + header_len + data_offsets[0])
    end: int  # absolute, exclusive


@dataclass(frozen=True)
class Header:
    """A validated header: where each tensor lies and how long the file must be."""

    header_len: int  # N from the 8-byte little-endian prefix
    data_start: int  # 8 + N
    file_size: int  # the exact total size this header implies
    tensors: tuple[TensorInfo, ...]  # sorted by begin (file order), NOT by name
    metadata: dict[str, str] | None


def header_length(prefix: bytes | memoryview) -> int:
    """N from the first 8 bytes: how many header bytes to read next."""
    if len(prefix) < 8:
        raise NotSafetensors(f"file is {len(prefix)} bytes, too short for the 8-byte header length")
    n = int.from_bytes(prefix[:8], "little")
    if n == 0:
        raise NotSafetensors("header length is 0")
    if n > MAX_HEADER_BYTES:
        raise NotSafetensors(f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    return n


def why_not(head: bytes, exc: NotSafetensors) -> str:
    """Why a file that begins with `head` is not safetensors: `exc`, or, for a Git LFS
    pointer (a model git-lfs has not downloaded), that and what to run."""
    if head.startswith(GIT_LFS_SPEC):
        return (
            "a Git LFS pointer, not the model: run `git lfs pull` to download it, then add it again"
        )
    return str(exc)


def parse_header(buf: bytes | memoryview) -> Header:
    """Validate the first 8 + N bytes of a file; any bytes after them are ignored."""
    n = header_length(buf[:8])
    if len(buf) < 8 + n:
        raise NotSafetensors(
            f"header length {n} runs past the end of the file ({len(buf) - 8} bytes follow the prefix)"
        )
    try:
        text = str(memoryview(buf)[8 : 8 + n], "utf-8")  # no copy of the raw bytes
    except UnicodeDecodeError as exc:
        raise NotSafetensors(f"header is not valid UTF-8 (file byte {8 + exc.start})") from None
    entries, metadata = _Parser(text).document()
    data_start = 8 + n
    infos = sorted(
        (
            TensorInfo(name, dtype, shape, data_start + b, data_start + e)
            for name, dtype, shape, b, e in entries
        ),
        key=lambda t: (t.begin, t.end, t.name),
    )
    _check_tiling(infos, data_start)
    return Header(n, data_start, infos[-1].end if infos else data_start, tuple(infos), metadata)


def _check_tiling(infos: list[TensorInfo], data_start: int) -> None:
    """The data buffer must be entirely indexed: each tensor starts where the last ended."""
    at, prev = data_start, None
    for t in infos:
        if prev is not None and t.begin < at:
            raise NotSafetensors(
                f"tensor {_q(t.name)}: data_offsets {_rel(t, data_start)} overlap "
                f"{_q(prev.name)} {_rel(prev, data_start)}"
            )
        if t.begin > at:
            after = f"after {_q(prev.name)}" if prev else "at the start of the data"
            raise NotSafetensors(
                f"tensor {_q(t.name)}: data_offsets begin at {t.begin - data_start}, "
                f"leaving bytes {at - data_start}..{t.begin - data_start} {after} unindexed"
            )
        at, prev = t.end, t


def _rel(t: TensorInfo, data_start: int) -> str:
    """A tensor's offsets as written in the header."""
    return f"[{t.begin - data_start}, {t.end - data_start}]"


def _uint(name: str, field: str, digits: str) -> int:
    """A JSON integer (already matched as digits) as u64, like serde's usize."""
    if len(digits) < 20:  # fewer than 20 digits always fit in u64
        return int(digits)
    digits = digits.strip(" \t\n\r")
    if len(digits) > 20 or int(digits) > U64_MAX:
        raise NotSafetensors(f"tensor {_q(name)}: {field} value {digits[:24]} exceeds 2**64 - 1")
    return int(digits)


def _q(s: str) -> str:
    """A name quoted for a one-line message, shortened if huge."""
    r = repr(s)
    return r if len(r) <= 80 else r[:76] + "...'"


_Entry = tuple[str, str, tuple[int, ...], int, int]


class _Parser:
    """A recursive-descent reader for the one JSON shape a header may have."""

    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, pos: int, message: str) -> NotSafetensors:
        """A malformed-JSON error, located so that a hex dump finds it."""
        byte = 8 + len(self.text[:pos].encode("utf-8"))
        return NotSafetensors(f"header JSON at file byte {byte}: {message}")

    def found(self, pos: int) -> str:
        """What sits at `pos`, for messages."""
        snippet = self.text[pos : pos + 24]
        if not snippet:
            return "end of header"
        return repr(snippet + "...") if pos + 24 < len(self.text) else repr(snippet)

    def ws(self, pos: int) -> int:
        """The position after any JSON whitespace at `pos`."""
        if self.text[pos : pos + 1] in ("", "{", "}", '"', ",", ":", "["):  # the common case
            return pos
        m = _WS.match(self.text, pos)
        return m.end() if m else pos

    def punct(self, pos: int, char: str, after: str) -> int:
        """Skip whitespace, `char` and whitespace: the position after them."""
        pos = self.ws(pos)
        if not self.text.startswith(char, pos):
            raise self.fail(pos, f"expected {char!r} {after}, found {self.found(pos)}")
        return self.ws(pos + 1)

    def separator(self, pos: int, close: str, after: str) -> tuple[int, bool]:
        """After a member: (position, True) past ',' or (position, False) past `close`."""
        pos = self.ws(pos)
        char = self.text[pos : pos + 1]
        if char == ",":
            return self.ws(pos + 1), True
        if char == close:
            return pos + 1, False
        raise self.fail(pos, f"expected ',' or {close!r} {after}, found {self.found(pos)}")

    def string(self, pos: int, what: str) -> tuple[str, int]:
        """A JSON string at `pos` (named `what` in messages) and the position after it."""
        if not self.text.startswith('"', pos):
            raise self.fail(pos, f"expected {what} (a string), found {self.found(pos)}")
        try:
            value, end = scanstring(self.text, pos + 1, True)
        except json.JSONDecodeError as exc:
            reason = re.sub(r"( starting)? at$", "", exc.msg)
            raise self.fail(exc.pos, f"invalid string ({reason})") from None
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise self.fail(pos, f"{what} contains an unpaired surrogate escape") from None
        return value, end

    def document(self) -> tuple[list[_Entry], dict[str, str] | None]:
        """The whole header: tensor entries in JSON order, and the metadata."""
        text = self.text
        pos = self.ws(0)
        if not text.startswith("{", pos):
            raise self.fail(pos, f"the header must be a JSON object, found {self.found(pos)}")
        pos = self.ws(pos + 1)
        entries: list[_Entry] = []
        names: set[str] = set()
        metadata: dict[str, str] | None = None
        seen_metadata = False
        more = not text.startswith("}", pos)
        pos = pos if more else pos + 1
        while more:
            key, pos = self.string(pos, "a tensor name")
            pos = self.punct(pos, ":", "after a tensor name")
            if key == "__metadata__":
                if seen_metadata:
                    raise NotSafetensors("duplicate key '__metadata__'")
                seen_metadata = True
                metadata, pos = self.metadata(pos)
            else:
                if key in names:
                    raise NotSafetensors(f"duplicate tensor name {_q(key)}")
                if len(names) == MAX_TENSORS:
                    raise NotSafetensors(f"more than {MAX_TENSORS} tensors")
                names.add(key)
                entry, pos = self.tensor(key, pos)
                entries.append(entry)
            pos, more = self.separator(pos, "}", "between tensors")
        pos = self.ws(pos)
        if pos != len(text):
            raise self.fail(pos, f"unexpected {self.found(pos)} after the JSON object")
        return entries, metadata

    def metadata(self, pos: int) -> tuple[dict[str, str] | None, int]:
        """The `__metadata__` value: null, or an object of strings kept in JSON order."""
        if self.text.startswith("null", pos):
            return None, pos + 4
        if not self.text.startswith("{", pos):
            raise self.fail(
                pos, f"__metadata__ must be an object of strings, found {self.found(pos)}"
            )
        pos = self.ws(pos + 1)
        metadata: dict[str, str] = {}
        more = not self.text.startswith("}", pos)
        pos = pos if more else pos + 1
        while more:
            key, pos = self.string(pos, "a metadata key")
            pos = self.punct(pos, ":", "after a metadata key")
            value, end = self.string(pos, f"the value of __metadata__[{_q(key)}]")
            if key in metadata:
                raise NotSafetensors(f"duplicate __metadata__ key {_q(key)}")
            if len(metadata) == MAX_METADATA_ENTRIES:
                raise NotSafetensors(f"more than {MAX_METADATA_ENTRIES} __metadata__ entries")
            metadata[key] = value
            pos, more = self.separator(end, "}", "in __metadata__")
        return metadata, pos

    def tensor(self, name: str, pos: int) -> tuple[_Entry, int]:
        """One tensor entry, checked on its own (the tiling is checked later)."""
        m = _CANONICAL_ENTRY.match(self.text, pos)
        if m is not None:
            dtype, dims, begin, end = m.groups()
            shape = tuple(_uint(name, "shape", d) for d in dims.split(",")) if dims else ()
            offsets = (_uint(name, "data_offsets", begin), _uint(name, "data_offsets", end))
            pos = m.end()
        else:
            dtype, shape, offsets, pos = self.general_tensor(name, pos)
        if dtype not in DTYPES:
            raise NotSafetensors(f"tensor {_q(name)}: unknown dtype {_q(dtype)}")
        if len(offsets) != 2:
            raise NotSafetensors(
                f"tensor {_q(name)}: data_offsets must be [begin, end], found {len(offsets)} value(s)"
            )
        begin, end = offsets
        if end < begin:
            raise NotSafetensors(
                f"tensor {_q(name)}: data_offsets [{begin}, {end}] end before they begin"
            )
        try:
            need = nbytes(dtype, shape)
        except ValueError as exc:
            raise NotSafetensors(f"tensor {_q(name)}: {exc}") from None
        if end - begin != need:
            raise NotSafetensors(
                f"tensor {_q(name)}: {dtype} shape {shape} needs {need} bytes, offsets give {end - begin}"
            )
        return (name, dtype, shape, begin, end), pos

    def general_tensor(
        self, name: str, pos: int
    ) -> tuple[str, tuple[int, ...], tuple[int, ...], int]:
        """A tensor entry in any spacing, key order and escaping."""
        if not self.text.startswith("{", pos):
            raise self.fail(pos, f"tensor {_q(name)}: expected an object, found {self.found(pos)}")
        pos = self.ws(pos + 1)
        dtype: str | None = None
        arrays: dict[str, tuple[int, ...]] = {}
        more = not self.text.startswith("}", pos)
        pos = pos if more else pos + 1
        while more:
            key, pos = self.string(pos, f"a field name of tensor {_q(name)}")
            if key not in _FIELDS:
                raise self.fail(
                    pos,
                    f"tensor {_q(name)}: unexpected field {_q(key)} (allowed: dtype, shape, data_offsets)",
                )
            if key in arrays or (key == "dtype" and dtype is not None):
                raise NotSafetensors(f"tensor {_q(name)}: duplicate field {key!r}")
            pos = self.punct(pos, ":", "after a field name")
            if key == "dtype":
                dtype, pos = self.string(pos, f"the dtype of tensor {_q(name)}")
            else:
                arrays[key], pos = self.uint_array(pos, name, key)
            pos, more = self.separator(pos, "}", f"in tensor {_q(name)}")
        if dtype is None:
            raise NotSafetensors(f"tensor {_q(name)}: missing field 'dtype'")
        for key in _FIELDS[1:]:
            if key not in arrays:
                raise NotSafetensors(f"tensor {_q(name)}: missing field {key!r}")
        return dtype, arrays["shape"], arrays["data_offsets"], pos

    def uint_array(self, pos: int, name: str, field: str) -> tuple[tuple[int, ...], int]:
        """An array of at most MAX_DIMS u64 values, rejected before conversion if longer."""
        m = _UINT_ARRAY.match(self.text, pos)
        if m is None:
            items, at = self.leading_items(pos)
            if items > MAX_DIMS and field == "shape":
                raise NotSafetensors(f"tensor {_q(name)}: shape has more than {MAX_DIMS} entries")
            if items > MAX_DIMS:
                raise NotSafetensors(
                    f"tensor {_q(name)}: data_offsets must be [begin, end], found over {MAX_DIMS} values"
                )
            raise self.fail(
                at,
                f"tensor {_q(name)}: {field} must be an array of non-negative integers, "
                f"found {self.found(at)}",
            )
        commas = self.text.count(",", pos, m.end())
        if field == "data_offsets" and commas > 1:
            raise NotSafetensors(
                f"tensor {_q(name)}: data_offsets must be [begin, end], found {commas + 1} values"
            )
        body = self.text[pos + 1 : m.end() - 1]
        if not body.strip(" \t\n\r"):
            return (), m.end()
        return tuple(_uint(name, field, d) for d in body.split(",")), m.end()

    def leading_items(self, pos: int) -> tuple[int, int]:
        """How many u64 items open the array at `pos` (counted up to MAX_DIMS + 1),
        and where the first thing that is not one sits."""
        if not self.text.startswith("[", pos):
            return 0, pos
        at, items = pos + 1, 0
        while items <= MAX_DIMS and (m := _ARRAY_ITEM.match(self.text, at)):
            at, items = m.end(), items + 1
        return items, self.ws(at)
