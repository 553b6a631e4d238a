"""The safetensors header reader and dtype table, checked against the reference.

The reference is the installed `safetensors` package (the Rust crate's
`read_metadata`): every valid file must parse to the tensors it reports,
every file it rejects must be rejected here, and hostile headers must fail
fast with a message a user can act on.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from git_mgit.errors import NotSafetensors
from git_mgit.tensors.dtypes import DTYPES, U64_MAX, nbytes
from git_mgit.tensors.safetensors_format import (
    MAX_DIMS,
    MAX_HEADER_BYTES,
    MAX_METADATA_ENTRIES,
    MAX_TENSORS,
    Header,
    TensorInfo,
    header_length,
    parse_header,
)
from tests.strategies import (
    build_safetensors,
    non_safetensors_bytes,
    safetensors_files,
    shapes,
    tensor_specs,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def with_header(header: str | bytes, data: bytes = b"") -> bytes:
    """A file from literal header text, so tests can write any JSON, valid or not."""
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(raw)) + raw + data


def entry(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, object]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def reference(blob: bytes) -> list[tuple[str, dict]] | None:
    """What the reference implementation makes of a whole file, or None if it rejects it."""
    try:
        return safetensors.deserialize(blob)
    except Exception:
        return None


def accepts(blob: bytes) -> bool:
    """Whether `blob` is one complete valid file by our reader."""
    try:
        return parse_header(blob).file_size == len(blob)
    except NotSafetensors:
        return False


def rejection(blob: bytes) -> str:
    with pytest.raises(NotSafetensors) as info:
        parse_header(blob)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- valid files --------------------------------------------------------------


@FAST
@given(blob=safetensors_files())
def test_valid_files_parse_like_the_reference(blob: bytes) -> None:
    header = parse_header(blob)
    ref = reference(blob)
    assert ref is not None
    assert header.file_size == len(blob)
    assert header.data_start == 8 + header.header_len == 8 + struct.unpack("<Q", blob[:8])[0]
    assert [t.begin for t in header.tensors] == sorted(t.begin for t in header.tensors)
    ours = {t.name: t for t in header.tensors}
    assert sorted(ours) == sorted(name for name, _ in ref)
    for name, view in ref:
        t = ours[name]
        assert (t.dtype, list(t.shape)) == (view["dtype"], view["shape"])
        assert blob[t.begin : t.end] == bytes(view["data"])
    as_json = json.loads(blob[8 : header.data_start])
    assert header.metadata == as_json.get("__metadata__")
    assert len(header.tensors) == len(as_json) - ("__metadata__" in as_json)


@FAST
@given(specs=tensor_specs(), data=st.data())
def test_tensors_come_in_file_order_whatever_the_json_order(
    specs: list, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(specs))))
    header = parse_header(build_safetensors(specs, order=order))
    # Data lies in spec order; zero-length tensors that share an offset tie-break by name.
    expected = sorted(
        enumerate(specs),
        key=lambda p: (sum(len(s[3]) for s in specs[: p[0]]), len(p[1][3]), p[1][0]),
    )
    assert [t.name for t in header.tensors] == [s[0] for _, s in expected]
    assert [t.end - t.begin for t in header.tensors] == [len(s[3]) for _, s in expected]


def test_file_written_by_safetensors_numpy(tmp_path: Path) -> None:
    arrays = {
        "embed.weight": np.arange(15, dtype=np.float32).reshape(3, 5),
        "scalar": np.array(-0.0),
        "empty": np.zeros((0, 4), dtype=np.float16),
        "mask": np.array([True, False, True]),
        "ids": np.array([-1, 2**40], dtype=np.int64),
        "bytes": np.frombuffer(b"\x00\xff\x7f", dtype=np.uint8),
    }
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(arrays, path, metadata={"format": "np", "note": "ü"})
    blob = path.read_bytes()
    header = parse_header(blob[: 8 + header_length(blob[:8])])
    assert header.file_size == len(blob)
    assert header.metadata == {"format": "np", "note": "ü"}
    with safetensors.safe_open(path, framework="numpy") as f:
        assert sorted(f.keys()) == sorted(t.name for t in header.tensors)
        for t in header.tensors:
            assert list(t.shape) == f.get_slice(t.name).get_shape()
            assert t.dtype == f.get_slice(t.name).get_dtype()
            assert blob[t.begin : t.end] == f.get_tensor(t.name).tobytes()


def test_header_fields_and_absolute_offsets() -> None:
    blob = build_safetensors(
        [("b", "F32", (2,), bytes(8)), ("a", "U8", (3,), b"abc")], metadata={"k": "v"}, pad=5
    )
    header = parse_header(blob)
    n = struct.unpack("<Q", blob[:8])[0]
    assert header == Header(
        header_len=n,
        data_start=8 + n,
        file_size=8 + n + 11,
        tensors=(
            TensorInfo("b", "F32", (2,), 8 + n, 8 + n + 8),
            TensorInfo("a", "U8", (3,), 8 + n + 8, 8 + n + 11),
        ),
        metadata={"k": "v"},
    )
    assert blob[header.tensors[1].begin : header.tensors[1].end] == b"abc"


@pytest.mark.parametrize(
    ("header", "data", "names"),
    [
        ("{}", b"", []),
        ('{"__metadata__":null}', b"", []),
        ('{"__metadata__":{}}', b"", []),
        (" \t\r\n{}\n\t  ", b"", []),  # any JSON whitespace, before or after
        ('{"x":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}', bytes(8), ["x"]),  # 0-d
        # Zero-length tensors may share a neighbour's begin or end, or each other's.
        (
            json.dumps(
                {
                    "z1": entry("F32", [0], 0, 0),
                    "a": entry("U8", [2], 0, 2),
                    "z2": entry("I64", [3, 0], 2, 2),
                    "z0": entry("BF16", [0], 2, 2),
                }
            ),
            b"ab",
            ["z1", "a", "z0", "z2"],
        ),
        # Element counts fold left to right in u64: a leading 0 saves a huge shape.
        (
            '{"e":{"dtype":"U8","shape":[0,18446744073709551615,4],"data_offsets":[0,0]}}',
            b"",
            ["e"],
        ),
        # Packed sub-byte types are fine when they fill whole bytes.
        (
            json.dumps({"f4": entry("F4", [2, 3], 0, 3), "f6": entry("F6_E3M2", [4], 3, 6)}),
            bytes(6),
            ["f4", "f6"],
        ),
        # Escapes are decoded in names, dtypes, field names and the metadata key.
        (
            '{"__metad\\u0061ta__":{"k":"v"},"\\ud83d\\ude00\\n":{"dt\\u0079pe":"U\\u0038",'
            '"data_offsets":[ 0 , 1 ],"shape":[\n1\n]}}',
            b"\x00",
            ["\N{GRINNING FACE}\n"],
        ),
        (
            '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"k":"v"}}',
            b"\x00",
            ["a"],
        ),
    ],
)
def test_valid_edge_cases_match_the_reference(header: str, data: bytes, names: list[str]) -> None:
    blob = with_header(header, data)
    assert reference(blob) is not None
    parsed = parse_header(blob)
    assert parsed.file_size == len(blob)
    assert [t.name for t in parsed.tensors] == names


def test_metadata_null_and_missing_differ_from_empty() -> None:
    assert parse_header(with_header("{}")).metadata is None
    assert parse_header(with_header('{"__metadata__":null}')).metadata is None
    assert parse_header(with_header('{"__metadata__":{}}')).metadata == {}
    assert parse_header(with_header('{"__metadata__":{"b":"1","a":"2"}}')).metadata == {
        "b": "1",
        "a": "2",
    }


def test_buffer_may_extend_past_the_header() -> None:
    blob = build_safetensors([("t", "I32", (2, 2), bytes(16))])
    assert parse_header(memoryview(blob)) == parse_header(blob[: 8 + header_length(blob)])


# --- differential: mutated headers ---------------------------------------------

MUTATIONS = st.one_of(
    st.tuples(st.just("offset"), st.integers(0, 1), st.integers(-3, 3)),
    st.tuples(st.just("shape"), st.sampled_from(sorted(DTYPES)).flatmap(shapes)),
    st.tuples(st.just("dtype"), st.sampled_from([*sorted(DTYPES), "F128", "f32", "", "F8_E4M3FN"])),
    st.tuples(st.just("drop")),
    st.tuples(st.just("swap_offsets")),
    st.tuples(st.just("data"), st.integers(-2, 2)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=tensor_specs(), mutation=MUTATIONS, data=st.data())
def test_mutated_headers_are_judged_like_the_reference(
    specs: list, mutation: tuple, data: st.DataObject
) -> None:
    """Break a valid header one way at a time: we accept exactly what the reference accepts."""
    assume(specs)
    blob = build_safetensors(specs)
    n = struct.unpack("<Q", blob[:8])[0]
    header, payload = json.loads(blob[8 : 8 + n]), blob[8 + n :]
    names = sorted(header)
    name = data.draw(st.sampled_from(names))
    kind = mutation[0]
    if kind == "offset":
        header[name]["data_offsets"][mutation[1]] += mutation[2]
    elif kind == "shape":
        header[name]["shape"] = list(mutation[1])
    elif kind == "dtype":
        header[name]["dtype"] = mutation[1]
    elif kind == "drop":
        del header[name]
    elif kind == "swap_offsets":
        other = data.draw(st.sampled_from(names))
        header[name]["data_offsets"], header[other]["data_offsets"] = (
            header[other]["data_offsets"],
            header[name]["data_offsets"],
        )
    else:
        payload = payload + bytes(mutation[1]) if mutation[1] >= 0 else payload[: mutation[1]]
    mutated = with_header(json.dumps(header), payload)
    assert accepts(mutated) == (reference(mutated) is not None)


TOKENS = [
    "0",
    "7",
    "-0",
    "-1",
    "1.0",
    "1e0",
    "true",
    "null",
    '"3"',
    "[]",
    "{}",
    "18446744073709551615",
    "18446744073709551616",
]
SPACES = st.sampled_from(["", " ", "\t", "\n", "\r\n  "])


@st.composite
def header_texts(draw: st.DrawFn) -> tuple[str, int]:
    """Header JSON written token by token, and a data length: mostly valid numbers in
    odd spacing, sometimes an odd token, a missing field or a wrong length."""
    sp = draw(SPACES)

    def array(values: list[int]) -> str:
        items = [str(v) for v in values]
        if draw(st.integers(0, 3)) == 0:  # one odd token, inserted or replacing a number
            at = draw(st.integers(0, len(items)))
            items[at : at + draw(st.integers(0, 1))] = [draw(st.sampled_from(TOKENS))]
        return "[" + sp + f"{sp},{sp}".join(items) + sp + "]"

    members, at = [], 0
    for name in draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True)):
        dtype = draw(st.sampled_from(["U8", "F32", "F4", "BOOL", "u8"]))
        shape = draw(st.lists(st.integers(0, 3), max_size=2))
        try:
            size = nbytes(dtype, shape)
        except ValueError:  # unknown dtype, or F4 that ends mid-byte: no length is right
            size = draw(st.integers(0, 2))
        fields = {
            "dtype": json.dumps(dtype),
            "shape": array(shape),
            "data_offsets": array([at, at + size]),
        }
        at += size
        keys = draw(st.permutations(sorted(fields)))[: draw(st.sampled_from([3, 3, 3, 2]))]
        body = f",{sp}".join(f'"{k}"{sp}:{sp}{fields[k]}' for k in keys)
        members.append(f'"{name}"{sp}:{sp}{{{sp}{body}{sp}}}')
    if draw(st.booleans()):
        metadata = draw(st.sampled_from(['{"k":"v"}', "null", '{"k":1}', "[]", '{"k":"v",}']))
        members.insert(draw(st.integers(0, len(members))), '"__metadata__":' + metadata)
    text = draw(SPACES) + "{" + f",{sp}".join(members) + "}" + draw(SPACES)
    return text, max(0, at + draw(st.sampled_from([0, 0, 0, 1, -1])))


@settings(max_examples=300, deadline=None)
@given(written=header_texts())
def test_hand_written_headers_are_judged_like_the_reference(written: tuple[str, int]) -> None:
    blob = with_header(written[0], bytes(written[1]))
    assert accepts(blob) == (reference(blob) is not None)


# --- files that are not valid safetensors --------------------------------------


@FAST
@given(blob=non_safetensors_bytes())
def test_non_safetensors_bytes_are_never_taken_for_a_valid_file(blob: bytes) -> None:
    assert not accepts(blob)
    assert reference(blob) is None


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x01\x00\x00", "file is 3 bytes, too short for the 8-byte header length"),
        (bytes(8), "header length is 0"),
        (
            struct.pack("<Q", 9_999_999_999) + b"{}",
            "header length 9999999999 exceeds the 100000000-byte limit",
        ),
        (
            struct.pack("<Q", 64) + b"{}",
            "header length 64 runs past the end of the file (2 bytes follow the prefix)",
        ),
        (with_header(b'{"\xff":1}'), "header is not valid UTF-8 (file byte 10)"),
    ],
)
def test_broken_prefix_or_encoding(blob: bytes, message: str) -> None:
    assert rejection(blob) == message


def tensor_json(**fields: object) -> str:
    """One tensor 't' (U8, 4 bytes) with some fields replaced by raw JSON text."""
    parts = {"dtype": '"U8"', "shape": "[4]", "data_offsets": "[0, 4]"} | fields
    return (
        "{" + '"t": {' + ", ".join(f'"{k}": {v}' for k, v in parts.items() if v is not None) + "}}"
    )


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("[]", "the header must be a JSON object, found '[]'"),
        ("\ufeff{}", "the header must be a JSON object"),
        ("{} x", "unexpected 'x' after the JSON object"),
        ("{}\x00", "unexpected '\\x00' after the JSON object"),
        ('{"a" 1}', "expected ':' after a tensor name, found '1}'"),
        (
            '{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}',
            "expected ',' or '}' between tensors, found end of header",
        ),
        ('{"\\ud800":{}}', "a tensor name contains an unpaired surrogate escape"),
        ('{"a\tb":{}}', "invalid string (Invalid control character)"),
        ('{"t": [[[[[[[[', "tensor 't': expected an object, found '[[[[[[[['"),
        (
            tensor_json(shape="[4.0]"),
            "tensor 't': shape must be an array of non-negative integers, found '4.0]",
        ),
        (tensor_json(shape="[-0]"), "found '-0]"),
        (tensor_json(shape="[true]"), "found 'true]"),
        (tensor_json(shape="[4"), "shape must be an array of non-negative integers"),
        (tensor_json(shape='"4"'), 'found \'"4"'),
        (
            tensor_json(data_offsets="[-4, 0]"),
            "tensor 't': data_offsets must be an array of non-negative integers, found '-4, 0]",
        ),
        (
            tensor_json(data_offsets="[0, 4, 4]"),
            "tensor 't': data_offsets must be [begin, end], found 3 values",
        ),
        (
            tensor_json(data_offsets="[4]"),
            "tensor 't': data_offsets must be [begin, end], found 1 value(s)",
        ),
        (
            tensor_json(data_offsets="[4, 0]"),
            "tensor 't': data_offsets [4, 0] end before they begin",
        ),
        (
            tensor_json(shape="[18446744073709551616]"),
            "tensor 't': shape value 18446744073709551616 exceeds 2**64 - 1",
        ),
        (tensor_json(dtype='"F128"'), "tensor 't': unknown dtype 'F128'"),
        (tensor_json(dtype='"u8"'), "tensor 't': unknown dtype 'u8'"),
        (tensor_json(dtype="8"), "expected the dtype of tensor 't' (a string), found '8"),
        (tensor_json(shape=None), "tensor 't': missing field 'shape'"),
        (
            tensor_json(extra="1"),
            "tensor 't': unexpected field 'extra' (allowed: dtype, shape, data_offsets)",
        ),
        (tensor_json(shape="[3]"), "tensor 't': U8 shape (3,) needs 3 bytes, offsets give 4"),
        (
            tensor_json(shape="[" + ",".join(["1"] * (MAX_DIMS + 1)) + "]"),
            f"tensor 't': shape has more than {MAX_DIMS} entries",
        ),
        (
            tensor_json(shape="[9223372036854775808, 4, 0]"),
            "tensor 't': element count of shape (9223372036854775808, 4, 0) overflows 64 bits",
        ),
        (tensor_json(shape="[4611686018427387904]", dtype='"F32"'), "overflows 64 bits"),
        (
            '{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}',
            "tensor 't': F4 shape (3,) holds 12 bits, not whole bytes",
        ),
        (
            '{"t":{"dtype":"F4","shape":[],"data_offsets":[0,1]}}',
            "tensor 't': F4 shape () holds 4 bits, not whole bytes",
        ),
        (
            '{"t":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}',
            "tensor 't': duplicate field 'dtype'",
        ),
        ('{"__metadata__":[]}', "__metadata__ must be an object of strings, found '[]}'"),
        (
            '{"__metadata__":{"k":1}}',
            "expected the value of __metadata__['k'] (a string), found '1}}'",
        ),
        (
            '{"__metadata__":{"k":{"deep":"x"}}}',
            "expected the value of __metadata__['k'] (a string)",
        ),
        ('{"__metadata__":{},"__metadata__":{}}', "duplicate key '__metadata__'"),
        ('{"__metadata__":{"k":"1","k":"2"}}', "duplicate __metadata__ key 'k'"),
        (
            '{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}',
            "duplicate tensor name 't'",
        ),
    ],
)
def test_malformed_headers_say_what_is_wrong(header: str, message: str) -> None:
    assert message in rejection(with_header(header, bytes(4)))


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        (
            {"a": entry("U8", [2], 0, 2), "b": entry("U8", [2], 1, 3)},
            "tensor 'b': data_offsets [1, 3] overlap 'a' [0, 2]",
        ),
        (
            {"a": entry("U8", [2], 0, 2), "b": entry("U8", [2], 0, 2)},
            "tensor 'b': data_offsets [0, 2] overlap 'a' [0, 2]",
        ),
        (
            {"a": entry("U8", [4], 0, 4), "z": entry("U8", [0], 2, 2)},
            "tensor 'z': data_offsets [2, 2] overlap 'a' [0, 4]",
        ),
        (
            {"a": entry("U8", [2], 0, 2), "b": entry("U8", [2], 4, 6)},
            "tensor 'b': data_offsets begin at 4, leaving bytes 2..4 after 'a' unindexed",
        ),
        (
            {"a": entry("U8", [2], 3, 5)},
            "tensor 'a': data_offsets begin at 3, leaving bytes 0..3 at the start of the data unindexed",
        ),
        (
            {"a": entry("U8", [2], 0, 2), "z": entry("U8", [0], 9, 9)},
            "tensor 'z': data_offsets begin at 9, leaving bytes 2..9 after 'a' unindexed",
        ),
    ],
)
def test_offsets_must_tile_the_data(tensors: dict, message: str) -> None:
    blob = with_header(json.dumps(tensors), bytes(6))
    assert reference(blob) is None
    assert rejection(blob) == message


def test_deviations_from_the_reference_are_the_documented_ones() -> None:
    """Stricter than the reference on purpose: such files are stored opaque, byte for byte."""
    lenient = [
        '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
        '{"__metadata__":{"k":"1","k":"2"},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
        '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":[[1]]}}',
        '{"t":{"dtype":"U8","shape":[' + ",".join(["1"] * 65) + '],"data_offsets":[0,1]}}',
    ]
    for header in lenient:
        blob = with_header(header, b"\x00")
        assert reference(blob) is not None
        assert not accepts(blob)


# --- hostile headers: bounded time and memory ----------------------------------


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("[" * 100_000, "the header must be a JSON object"),
        ('{"a":' * 100_000, "tensor 'a': unexpected field 'a'"),
        ('{"t":{"dtype":"U8","shape":' + "[" * 100_000, "tensor 't': shape must be an array"),
        (
            '{"__metadata__":{"k":' + "[" * 100_000,
            "expected the value of __metadata__['k'] (a string)",
        ),
        (
            '{"t":{"dtype":"U8","shape":[' + "0," * 500_000 + "0]",
            "shape has more than 64 entries",
        ),
        ('{"t":{"dtype":"U8","shape":[' + "9" * 1_000_000 + "]", "exceeds 2**64 - 1"),
    ],
)
def test_json_bombs_fail_fast_in_little_memory(header: str, message: str) -> None:
    blob = with_header(header)
    tracemalloc.start()
    try:
        text = rejection(blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message in text
    assert peak < 4 * len(blob) + 1_000_000  # the decoded text and one slice, nothing per level


def test_a_million_tensors_are_refused_after_the_limit_not_after_parsing() -> None:
    template = '"%d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}'
    blob = with_header("{" + ",".join(template % (i, i, i + 1) for i in range(10**6)) + "}")
    assert len(blob) > 50_000_000
    assert rejection(blob) == f"more than {MAX_TENSORS} tensors"


def test_the_tensor_limit_itself_is_allowed() -> None:
    entries = ",".join(
        f'"w{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}' for i in range(MAX_TENSORS)
    )
    header = parse_header(with_header("{" + entries + "}"))
    assert len(header.tensors) == MAX_TENSORS
    assert (
        header.tensors[0].name == "w0" and header.tensors[-1].name == "w99999"
    )  # ties sort by name


def test_metadata_entries_are_bounded_too() -> None:
    entries = ",".join(f'"k{i}":""' for i in range(MAX_METADATA_ENTRIES + 1))
    assert rejection(with_header('{"__metadata__":{' + entries + "}}")) == (
        f"more than {MAX_METADATA_ENTRIES} __metadata__ entries"
    )


# --- header_length --------------------------------------------------------------


def test_header_length_reads_eight_little_endian_bytes() -> None:
    assert header_length(struct.pack("<Q", 1234) + b"ignored") == 1234
    assert header_length(memoryview(struct.pack("<Q", MAX_HEADER_BYTES))) == MAX_HEADER_BYTES
    with pytest.raises(NotSafetensors, match="exceeds"):
        header_length(struct.pack("<Q", MAX_HEADER_BYTES + 1))
    with pytest.raises(NotSafetensors, match="exceeds"):
        header_length(b"\xff" * 8)


# --- the dtype table --------------------------------------------------------------


def test_dtype_layouts_add_up() -> None:
    for dt in DTYPES.values():
        if dt.kind == "float":
            assert dt.bits == dt.signed + dt.exponent_bits + dt.mantissa_bits
        elif dt.kind == "complex":
            assert dt.bits == 2 * (1 + dt.exponent_bits + dt.mantissa_bits)
        else:
            assert (dt.exponent_bits, dt.mantissa_bits) == (0, 0)
            assert dt.signed == (dt.kind == "int")
        assert dt.itemsize == (dt.bits // 8 if dt.bits >= 8 else None)
    assert (
        DTYPES["BF16"].exponent_bits,
        DTYPES["F16"].exponent_bits,
        DTYPES["F64"].mantissa_bits,
    ) == (8, 5, 52)
    assert not DTYPES["F8_E8M0"].signed


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_reference_knows_each_dtype_with_our_width(name: str) -> None:
    """Eight elements take exactly `bits` bytes in the reference too, and not one more or less."""
    need = nbytes(name, [8])
    assert need == DTYPES[name].bits
    for length in (need - 1, need, need + 1):
        blob = with_header(json.dumps({"t": entry(name, [8], 0, length)}), bytes(length))
        assert (reference(blob) is not None) == (length == need) == accepts(blob)


def test_reference_knows_no_other_dtype() -> None:
    for name in ["F8_E4M3FN", "U4", "I4", "C128", "F32 ", "bf16", "float32"]:
        blob = with_header(json.dumps({"t": entry(name, [0], 0, 0)}))
        assert reference(blob) is None
        assert "unknown dtype" in rejection(blob)


def test_nbytes_rules() -> None:
    assert nbytes("F32", []) == 4
    assert nbytes("F32", [0, 7]) == 0
    assert nbytes(DTYPES["C64"], [3]) == 24
    assert nbytes("F4", [2, 3]) == 3
    assert nbytes("F6_E2M3", [4]) == 3
    assert nbytes("U8", [0, U64_MAX, 4]) == 0
    for dtype, shape, reason in [
        ("F4", [3], "not whole bytes"),
        ("F6_E3M2", [2], "not whole bytes"),
        ("U8", [U64_MAX, 2, 0], "overflows 64 bits"),
        ("F64", [2**61], "overflows 64 bits"),
        ("U8", [-1], "negative dimension"),
        ("Q8", [1], "unknown dtype"),
    ]:
        with pytest.raises(ValueError, match=reason):
            nbytes(dtype, shape)
