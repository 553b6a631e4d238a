"""PackReader against packs we write and packs git itself writes.

It must return exactly what `git cat-file` returns, or None (never wrong
bytes) for anything it does not read itself: loose objects, deltified or
compressed entries, non-blobs, damaged stored blocks.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from git_mgit.store.packreader import PackReader, _Pack
from git_mgit.store.packwriter import PackWriter, encode_idx
from tests.gitsandbox import init_repo, run_git
from tests.test_packwriter import anchor, cat, objects_dir

SIZES = [0, 1, 15, 16, 65534, 65535, 65536, 3 * 65535 + 7, 1 << 20]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo")


def write_blobs(repo: Path, blobs: list[bytes]) -> list[bytes]:
    with PackWriter(objects_dir(repo)) as pack:
        oids = [pack.add("blob", [b]) for b in blobs]
        commit = anchor(pack, oids)
        pack.finish()
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)
    return oids


def test_reads_what_git_reads_from_our_packs(repo: Path) -> None:
    rng = random.Random(1)
    blobs = [rng.randbytes(n) for n in SIZES]
    oids = write_blobs(repo, blobs)
    reader = PackReader(objects_dir(repo))
    try:
        for oid, data in zip(oids, blobs, strict=True):
            got = reader.read(oid.hex())
            assert got is not None and bytes(got) == data == cat(repo, oid)
    finally:
        reader.close()


def test_finds_packs_written_after_it_started_and_survives_gc(repo: Path) -> None:
    reader = PackReader(objects_dir(repo))
    try:
        assert reader.read("0" * 40) is None  # no packs yet
        data = random.Random(2).randbytes(200_000)
        (oid,) = write_blobs(repo, [data])
        assert bytes(reader.read(oid.hex()) or b"") == data
        # git repack reuses our stored blocks; the new pack is found, the old fd still reads.
        run_git("gc", "--prune=now", "--quiet", cwd=repo)
        fresh = PackReader(objects_dir(repo))
        assert bytes(fresh.read(oid.hex()) or b"") == data
        assert bytes(reader.read(oid.hex()) or b"") == data
        fresh.close()
    finally:
        reader.close()


def test_compressed_and_loose_objects_are_left_to_git(repo: Path) -> None:
    data = b"compressible " * 10_000
    oid = run_git("hash-object", "-w", "--stdin", cwd=repo, input=data).stdout.strip().decode()
    reader = PackReader(objects_dir(repo))
    try:
        assert reader.read(oid) is None  # loose
        tree = run_git("mktree", cwd=repo, input=f"100644 blob {oid}\tf\n").stdout.strip()
        commit = run_git("commit-tree", "-m", "c", tree, cwd=repo).stdout.strip()
        run_git("update-ref", "refs/heads/main", commit, cwd=repo)
        run_git("gc", "--prune=now", "--quiet", cwd=repo)
        assert reader.read(oid) is None  # packed, but deflated by git
        assert reader.read(tree) is None  # not a blob
        assert reader.read("HEAD") is None and reader.read("zz" * 20) is None
    finally:
        reader.close()


def test_damaged_stored_block_answers_none_not_wrong_bytes(repo: Path) -> None:
    data = random.Random(3).randbytes(100_000)
    (oid,) = write_blobs(repo, [data])
    (pack,) = (objects_dir(repo) / "pack").glob("*.pack")
    raw = bytearray(pack.read_bytes())
    at = raw.index(data[:64])
    raw[at - 2] ^= 0xFF  # LEN of the first stored block no longer matches NLEN
    pack.chmod(0o644)
    pack.write_bytes(raw)
    reader = PackReader(objects_dir(repo))
    try:
        assert reader.read(oid.hex()) is None
    finally:
        reader.close()


def test_large_offsets_are_looked_up(tmp_path: Path) -> None:
    offsets = [12, 2**31 - 1, 2**31, 2**32 + 5, 5 * 2**40]
    oids = [hashlib.sha1(b"%d" % i).digest() for i in range(len(offsets))]
    idx = tmp_path / "pack-x.idx"
    idx.write_bytes(encode_idx(zip(oids, offsets, [0] * len(oids), strict=True), b"\xaa" * 20))
    idx.with_suffix(".pack").write_bytes(b"")
    pack = _Pack(idx)
    try:
        for oid, off in zip(oids, offsets, strict=True):
            assert pack.offset(oid) == off
        assert pack.offset(b"\x00" * 20) is None and pack.offset(b"\xff" * 20) is None
    finally:
        pack.close()
