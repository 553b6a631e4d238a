"""Byte-for-byte round trips through the real clean and smudge paths.

Property tests cover every dtype, 0-d and empty tensors, odd lengths, NaN
payloads, -0.0, denormals, metadata, out-of-order names and files that are
not safetensors at all; hostile headers must be stored opaque quickly.
"""

from __future__ import annotations

import io
import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_mgit.config import Settings
from git_mgit.gitcmd import find_repo
from git_mgit.modelfile import manifest as mf
from git_mgit.modelfile.clean import clean
from git_mgit.modelfile.smudge import parse_or_none, smudge
from git_mgit.store.chunkstore import ChunkStore
from tests.gitsandbox import init_repo
from tests.strategies import build_safetensors, non_safetensors_bytes, safetensors_files

SMALL = Settings(chunk_size=4096)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChunkStore]:
    repo = init_repo(tmp_path_factory.mktemp("rt") / "repo")
    s = ChunkStore(find_repo(repo))
    yield s
    s.close()


def round_trip(store: ChunkStore, data: bytes, settings: Settings = SMALL) -> mf.Manifest:
    warnings: list[str] = []
    text = clean(io.BytesIO(data), "m.safetensors", store, settings, warn=warnings.append)
    assert (
        clean(io.BytesIO(data), "m.safetensors", store, settings, warn=warnings.append) == text
    ), "manifest must be a function of the bytes alone"
    m = parse_or_none(text, "m.safetensors")
    assert m is not None and m.size == len(data)
    out = bytearray()
    smudge(m, "m.safetensors", store, out.extend)
    assert bytes(out) == data
    return m


_HYPO = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_HYPO
@given(data=safetensors_files())
def test_valid_files_round_trip_as_safetensors(store: ChunkStore, data: bytes) -> None:
    assert round_trip(store, data).kind == "safetensors"


@_HYPO
@given(data=non_safetensors_bytes())
def test_invalid_files_round_trip_as_opaque(store: ChunkStore, data: bytes) -> None:
    assert round_trip(store, data).kind == "opaque"


@_HYPO
@given(data=st.binary(max_size=20_000))
def test_arbitrary_bytes_round_trip(store: ChunkStore, data: bytes) -> None:
    round_trip(store, data)


def weights(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n, dtype=np.float32) * 0.02


def test_large_tensors_are_chunked_element_aligned(store: ChunkStore) -> None:
    data = build_safetensors(
        [("w", "F32", (3000,), weights(3000, 1).tobytes()), ("b", "F64", (7,), b"\1" * 56)]
    )
    m = round_trip(store, data)
    w = m.tensors()["w"]
    assert len(w.hashes) == 3 and all(c.length % 4 == 0 for c in m.chunks() if c.segment is w)


def test_truncated_and_trailing_bytes_keep_every_byte(store: ChunkStore) -> None:
    data = build_safetensors(
        [("a", "F32", (2000,), weights(2000, 2).tobytes()), ("b", "F32", (10,), b"\0" * 40)]
    )
    for variant in (data[:-1], data[: len(data) // 2], data + b"trailing", data[:9]):
        assert round_trip(store, variant).kind == "opaque"


def header_file(header: bytes, data: bytes = b"", declared: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if declared is None else declared) + header + data


HOSTILE = {
    "length larger than file": header_file(
        b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4, 1 << 40
    ),
    "json bomb": header_file(b"[" * 100_000 + b"]" * 100_000),
    "negative offsets": header_file(
        b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}', b"\0" * 4
    ),
    "overlapping offsets": header_file(
        b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}',
        b"\0" * 6,
    ),
    "shape disagrees": header_file(
        b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"\0" * 4
    ),
    "not json": header_file(b"\xff\xfe garbage", b"x" * 100),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_headers_are_stored_opaque(store: ChunkStore, name: str) -> None:
    start = time.monotonic()
    assert round_trip(store, HOSTILE[name]).kind == "opaque"
    assert time.monotonic() - start < 30, "hostile input must be handled in bounded time"


def test_a_million_tensors_are_stored_opaque(store: ChunkStore) -> None:
    entries = ",".join(
        f'"t{i}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
        for i in range(1_000_000)
    )
    data = header_file(("{" + entries + "}").encode(), b"\0" * 1_000_000)
    m = round_trip(store, data, Settings())
    assert m.kind == "opaque" and len(m.segments) == 1


def test_metadata_and_name_order_survive(store: ChunkStore) -> None:
    tensors = [
        ("z", "BF16", (4,), b"\x80\x00" * 4),
        ("a", "F16", (), b"\x00\x80"),
        ("m", "BOOL", (0, 3), b""),
    ]
    data = build_safetensors(
        tensors, metadata={"format": "pt", "note": json.dumps({"x": 1})}, order=[2, 0, 1], pad=5
    )
    m = round_trip(store, data)
    assert [s.name for s in m.segments if s.kind == "tensor"] == ["z", "a", "m"]


def test_identical_tensors_are_stored_once(store: ChunkStore, tmp_path: Path) -> None:
    w = weights(5000, 9).tobytes()
    data = build_safetensors([("x", "F32", (5000,), w), ("y", "F32", (5000,), w)])
    m = round_trip(store, data)
    assert m.tensors()["x"].hashes == m.tensors()["y"].hashes
