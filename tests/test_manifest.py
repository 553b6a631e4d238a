"""Manifest text: canonical rendering, strict parsing, chunk arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_mgit.errors import ManifestError
from git_mgit.modelfile import manifest as mf

H = [bytes([i]) * 32 for i in range(8)]


def sample() -> mf.Manifest:
    return mf.Manifest(
        "safetensors",
        140,
        40,
        [
            mf.Segment("header", 0, 20, (H[0],)),
            mf.Segment("tensor", 20, 80, (H[1], H[2]), 'odd "name" é.weight', "F32", (4, 5)),
            mf.Segment("tensor", 100, 0, (), "empty", "BF16", (0, 3)),
            mf.Segment("tensor", 100, 4, (H[3],), "scalar", "I32", ()),
            mf.Segment("bytes", 104, 36, (H[4],)),
        ],
    )


def test_render_parse_round_trip_and_chunks() -> None:
    m = sample()
    text = m.render()
    assert text.startswith(b"mgit-manifest 1\nkind safetensors\nsize 140\nchunk 40\n")
    assert mf.parse(text) == m
    assert [(c.offset, c.length) for c in m.chunks()] == [
        (0, 20),
        (20, 40),
        (60, 40),
        (100, 4),
        (104, 36),
    ]
    assert b'tensor "scalar" I32 [] 100 4 b3:' in text


@given(names=st.lists(st.text(min_size=0, max_size=20), min_size=1, max_size=5, unique=True))
@settings(max_examples=100)
def test_any_tensor_name_round_trips(names: list[str]) -> None:
    segs = [
        mf.Segment("tensor", i * 4, 4, (H[i % 8],), n, "F32", (1,)) for i, n in enumerate(names)
    ]
    m = mf.Manifest("safetensors", 4 * len(names), 64, segs)
    assert mf.parse(m.render()) == m


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.replace(b"size 140", b"size 141"), "cover"),
        (lambda t: t.replace(b"chunk 40", b"chunk 0"), "positive"),
        (lambda t: t.replace(b"mgit-manifest 1", b"mgit-manifest 9"), "version"),
        (lambda t: t.replace(b" 20 80 ", b" 21 80 "), "tile"),
        (lambda t: t.replace(b"kind safetensors", b"kind weird"), "kind"),
        (lambda t: t[:-1], "newline"),
        (lambda t: t.replace(b"[4,5]", b"[4, 5]"), "shape"),
        (lambda t: t.replace(b"size 140", b"size 0140"), "integer"),
        (lambda t: t + b"bogus 140 0\n", "unknown segment"),
        (lambda t: t.replace(b"kind safetensors", b"kind  safetensors"), "kind"),
    ],
)
def test_damaged_manifests_are_rejected(mutate, message: str) -> None:
    text = mutate(sample().render())
    with pytest.raises(ManifestError, match=message):
        mf.parse(text)


def test_missing_chunk_hash_is_rejected() -> None:
    text = sample().render()
    one = b" b3:" + H[2].hex().encode()
    with pytest.raises(ManifestError, match="chunk hashes"):
        mf.parse(text.replace(one, b""))


def test_looks_like_manifest() -> None:
    assert mf.looks_like_manifest(sample().render())
    assert not mf.looks_like_manifest(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")


@settings(max_examples=200, deadline=None)
@given(names=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5, unique=True))
def test_tensor_table_reads_what_parse_reads(names: list[str]) -> None:
    """The query's fast reader agrees with the strict parser on any tensor name (quotes,
    backslashes, newlines, non-ASCII) and on empty shapes."""
    segments, offset = [mf.Segment("header", 0, 8, (H[0],))], 8
    for i, name in enumerate(names):
        shape = ((i + 1, 2), (), (0, 3))[i % 3]
        length = 4 * (shape[0] * shape[1] if shape else 1)
        hashes = (H[1],) if length else ()
        segments.append(mf.Segment("tensor", offset, length, hashes, name, "F32", shape))
        offset += length
    text = mf.Manifest("safetensors", offset, 64, segments).render()
    expected = [(s.name, s.dtype, s.shape, s.length) for s in mf.parse(text).segments[1:]]
    assert [tuple(t) for t in mf.tensor_table(text)] == expected
