"""PackReader against packs we write and packs git itself writes.

It must return exactly what `git cat-file` returns, or None (never wrong
bytes) for anything it does not read itself: loose objects, deltified or
compressed entries, non-blobs, damaged stored blocks.
"""

from __future__ import annotations

import hashlib
import os
import random
import resource
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from git_mgit.gitcmd import find_repo
from git_mgit.store import keep, midx
from git_mgit.store.gitobjects import object_id
from git_mgit.store.packreader import PackReader, _Pack
from git_mgit.store.packwriter import PackWriter, encode_idx, entry_header
from tests.gitsandbox import init_repo, run_git
from tests.test_packwriter import MiB, anchor, cat, objects_dir

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
            pieces = reader.pieces(oid.hex())
            assert pieces is not None and b"".join(pieces) == data
    finally:
        reader.close()


def test_pieces_are_views_of_the_pack_and_outlive_the_reader(repo: Path) -> None:
    data = random.Random(4).randbytes(3 * 65535 + 11)
    (oid,) = write_blobs(repo, [data])
    reader = PackReader(objects_dir(repo))
    pieces = reader.pieces(oid.hex())
    reader.close()  # the mapping stays while a piece refers to it
    assert pieces is not None and len(pieces) == 4 and all(p.readonly for p in pieces)
    assert b"".join(pieces) == data


def _rss_file_bytes() -> int:
    """This process's resident pages that map files (a mapped pack's)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile in /proc/self/status")


def test_pieces_keep_their_pages_until_forgotten(repo: Path) -> None:
    """Pieces read map their pages into this process (they count as its memory); forget()
    lets them go, and the views still read the same bytes after."""
    data = random.Random(6).randbytes(32 * MiB)
    (oid,) = write_blobs(repo, [data])
    reader = PackReader(objects_dir(repo))
    try:
        before = _rss_file_bytes()
        pieces = reader.pieces(oid.hex())
        assert pieces is not None
        assert hashlib.sha256(b"".join(pieces)).digest() == hashlib.sha256(data).digest()
        assert _rss_file_bytes() - before > 30 * MiB
        reader.forget(oid.hex())
        assert _rss_file_bytes() - before < 2 * MiB
        assert b"".join(pieces) == data  # mapped again as they are read
    finally:
        reader.close()


def test_a_reader_holds_descriptors_only_for_the_packs_it_reads(repo: Path) -> None:
    """git-mgit's packs stay apart until git mgit gc (keep.py): a reader of hundreds must
    not hold a descriptor for each. Two a pack, at Linux's default limit of 1024, left a
    filter of 500 packs none for a pipe to git or a socket to its store."""
    oids = [write_blobs(repo, [bytes([i]) * 70_000])[0] for i in range(40)]

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    reader = PackReader(objects_dir(repo))
    try:
        assert bytes(reader.read(oids[-1].hex()) or b"") == bytes([39]) * 70_000
        assert reader.read("0" * 40) is None  # every pack looked at: none opened for it
        assert descriptors() - before <= 2  # the pack read, and its mapping
        assert bytes(reader.read(oids[0].hex()) or b"") == bytes([0]) * 70_000
        assert descriptors() - before <= 4
    finally:
        reader.close()
    assert descriptors() == before


READ_EVERY_PACK = """
import sys
import time
from pathlib import Path
from git_mgit.resources.files import allow_open_files
from git_mgit.store.packreader import PackReader
if sys.argv[2] == "raise":
    allow_open_files()
reader = PackReader(Path(sys.argv[1]))
print(sum(reader.read(oid) is not None for oid in sys.stdin.read().split()))
"""


def test_a_process_reading_more_packs_than_its_soft_limit_allows_raises_it(
    repo: Path,
) -> None:
    """Two descriptors a pack read from (the file, its mapping): a soft limit of 64 open
    files stops a reader of 40 packs, unless it raises the limit as `git-mgit` does at its
    start (resources/files.py), towards the hard one."""
    oids = [write_blobs(repo, [bytes([i]) * 70_000])[0].hex() for i in range(40)]

    def run(how: str) -> subprocess.CompletedProcess[str]:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        return subprocess.run(
            [sys.executable, "-c", READ_EVERY_PACK, str(objects_dir(repo)), how],
            input="\n".join(oids),
            capture_output=True,
            text=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard)),
        )

    assert "Too many open files" in run("keep").stderr
    raised = run("raise")
    assert raised.returncode == 0, raised.stderr
    assert raised.stdout.strip() == str(len(oids))


def test_a_pack_repacked_away_before_its_first_read_is_looked_for_again(repo: Path) -> None:
    reader = PackReader(objects_dir(repo))
    try:
        data = random.Random(3).randbytes(100_000)
        (oid,) = write_blobs(repo, [data])
        assert reader.read("0" * 40) is None  # its idx read, the pack not opened
        with keep.lifted(find_repo(repo)):
            run_git("repack", "-a", "-d", "-q", cwd=repo)  # the pack is gone, its copy new
        assert bytes(reader.read(oid.hex()) or b"") == data
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
        ours = set((objects_dir(repo) / "pack").glob("*.pack"))
        with keep.lifted(find_repo(repo)):  # as git mgit gc lets git repack
            run_git("gc", "--prune=now", "--quiet", cwd=repo)
        assert not ours & set((objects_dir(repo) / "pack").glob("*.pack"))  # rewritten
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
        assert reader.pieces(oid) is None
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


def assert_ranges_read_right(reader: PackReader, oid: str, data: bytes, seed: int) -> None:
    blob = reader.open(oid)
    assert blob is not None and blob.size == len(data)
    rng = random.Random(seed)
    n = len(data)
    spans = [(0, n), (0, 0), (n, 0), (0, min(n, 65535)), (max(0, n - 65536), min(n, 65536))]
    spans += [(a, rng.randint(0, n - a)) for a in (rng.randint(0, n) for _ in range(40))]
    for pos, size in spans:
        assert bytes(blob.view(pos, size)) == data[pos : pos + size], (pos, size)
    with pytest.raises(ValueError):
        blob.view(n - 1, 2)
    with pytest.raises(ValueError):
        blob.view(-1, 1)


def test_any_byte_range_of_our_blobs(repo: Path) -> None:
    rng = random.Random(4)
    # 40 MiB: one read spans more blocks than one preadv takes
    blobs = [rng.randbytes(n) for n in [*SIZES, 40 << 20]]
    oids = write_blobs(repo, blobs)
    reader = PackReader(objects_dir(repo))
    try:
        for i, (oid, data) in enumerate(zip(oids, blobs, strict=True)):
            assert_ranges_read_right(reader, oid.hex(), data, i)
    finally:
        reader.close()


def test_blobs_git_itself_stored_uncompressed_are_read_by_range(repo: Path) -> None:
    data = random.Random(5).randbytes(1_000_000)
    oid = run_git("hash-object", "-w", "--stdin", cwd=repo, input=data).stdout.strip().decode()
    tree = run_git("mktree", cwd=repo, input=f"100644 blob {oid}\tf\n").stdout.strip()
    commit = run_git("commit-tree", "-m", "c", tree, cwd=repo).stdout.strip()
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)
    level0 = ("-c", "pack.compression=0", "-c", "core.compression=0")
    run_git(*level0, "repack", "-adfq", cwd=repo)
    reader = PackReader(objects_dir(repo))
    try:
        assert_ranges_read_right(reader, oid, data, 6)
    finally:
        reader.close()


def test_stored_blocks_of_any_size_with_empty_ones_between(tmp_path: Path) -> None:
    # zlib's sync flushes end each piece with an empty stored block, and pieces make
    # blocks of every size: nothing may assume 65535-byte blocks 5 bytes apart.
    rng = random.Random(7)
    pieces = [rng.randbytes(n) for n in (1000, 70_000, 1, 0, 150_000, 65535)]
    z = zlib.compressobj(0)
    stream = b"".join(z.compress(p) + z.flush(zlib.Z_SYNC_FLUSH) for p in pieces) + z.flush()
    data = b"".join(pieces)
    assert zlib.decompress(stream) == data
    entry = entry_header(3, len(data)) + stream
    pack = b"PACK" + struct.pack(">II", 2, 1) + entry
    digest = hashlib.sha1(pack).digest()
    oid = object_id("blob", [data])
    pack_dir = tmp_path / "objects" / "pack"
    pack_dir.mkdir(parents=True)
    (pack_dir / f"pack-{digest.hex()}.pack").write_bytes(pack + digest)
    idx = encode_idx([(oid, 12, zlib.crc32(entry))], digest)
    (pack_dir / f"pack-{digest.hex()}.idx").write_bytes(idx)
    reader = PackReader(tmp_path / "objects")
    try:
        assert_ranges_read_right(reader, oid.hex(), data, 8)
    finally:
        reader.close()


def test_the_multi_pack_index_answers_for_the_packs_it_covers(repo: Path) -> None:
    """Past midx.UNINDEXED packs, the writer has git write a multi-pack-index; the reader
    then finds their objects through it, without reading their .idx files (damaged here, so
    a reader that read them would find nothing), and the newer packs through their own."""
    blobs = [bytes([i]) * 70_000 for i in range(midx.UNINDEXED + 3)]
    oids = [write_blobs(repo, [b])[0] for b in blobs]
    index = midx.MultiPackIndex.read(objects_dir(repo))
    assert index is not None and len(index.names) == midx.UNINDEXED
    covered = set(index.names)
    index.close()
    for idx in (objects_dir(repo) / "pack").glob("*.idx"):
        if idx.name in covered:
            idx.chmod(0o644)
            idx.write_bytes(b"not an index")
    reader = PackReader(objects_dir(repo))
    try:
        for oid, data in zip(oids, blobs, strict=True):
            assert bytes(reader.read(oid.hex()) or b"") == data
        assert reader.read("0" * 40) is None
        more = [bytes([200 + i]) * 70_000 for i in range(midx.UNINDEXED)]  # a new index
        for data, oid in zip(more, [write_blobs(repo, [b])[0] for b in more], strict=True):
            assert bytes(reader.read(oid.hex()) or b"") == data
    finally:
        reader.close()


def test_a_multi_pack_index_naming_a_pack_gone_leaves_its_objects_to_git(repo: Path) -> None:
    oids = [write_blobs(repo, [bytes([i]) * 70_000])[0] for i in range(midx.UNINDEXED)]
    index = midx.MultiPackIndex.read(objects_dir(repo))
    assert index is not None
    name, _ = index.find(oids[0]) or ("", 0)
    index.close()
    (objects_dir(repo) / "pack" / name).with_suffix(".pack").unlink()
    reader = PackReader(objects_dir(repo))
    try:
        assert reader.read(oids[0].hex()) is None
        assert bytes(reader.read(oids[1].hex()) or b"") == bytes([1]) * 70_000
    finally:
        reader.close()


def _multi_pack_index(names: list[str], rows: list[tuple[bytes, int, int]], large: bool) -> bytes:
    """A multi-pack-index as gitformat-pack describes it: rows (oid, pack, offset)."""
    rows = sorted(rows)
    pnam = b"".join(n.encode() + b"\0" for n in sorted(names))
    pnam += b"\0" * (-len(pnam) % 4)
    oidf = struct.pack(">256I", *(sum(r[0][0] <= b for r in rows) for b in range(256)))
    oidl = b"".join(r[0] for r in rows)
    ooff, loff = b"", b""
    for _, pack, offset in rows:
        if large and offset >= 2**31:
            ooff += struct.pack(">II", pack, 0x80000000 | len(loff) // 8)
            loff += struct.pack(">Q", offset)
        else:
            ooff += struct.pack(">II", pack, offset)
    chunks = [(b"PNAM", pnam), (b"OIDF", oidf), (b"OIDL", oidl), (b"OOFF", ooff)]
    chunks += [(b"LOFF", loff)] if loff else []
    at = 12 + 12 * (len(chunks) + 1)
    table = b""
    for ident, body in chunks:
        table += struct.pack(">4sQ", ident, at)
        at += len(body)
    table += struct.pack(">4sQ", b"\0" * 4, at)
    head = struct.pack(">4sBBBBI", b"MIDX", 1, 1, len(chunks), 0, len(names))
    body = head + table + b"".join(b for _, b in chunks)
    return body + hashlib.sha1(body).digest()


@pytest.mark.parametrize("large", [True, False])
def test_multi_pack_index_offsets_small_and_large(tmp_path: Path, large: bool) -> None:
    """Offsets past 2 GiB: through the large-offset chunk where there is one; without it,
    the 32 bits are the offset itself."""
    offsets = [12, 2**31 - 1, 2**31, 2**32 - 1] + ([2**32 + 5, 5 * 2**40] if large else [])
    oids = [hashlib.sha1(b"%d" % i).digest() for i in range(len(offsets))]
    names = ["pack-a.idx", "pack-b.idx"]
    rows = [(oid, i % 2, off) for i, (oid, off) in enumerate(zip(oids, offsets, strict=True))]
    (tmp_path / "pack").mkdir()
    (tmp_path / "pack" / midx.NAME).write_bytes(_multi_pack_index(names, rows, large))
    index = midx.MultiPackIndex.read(tmp_path)
    assert index is not None and index.names == names
    try:
        for oid, pack, off in rows:
            assert index.find(oid) == (names[pack], off)
        assert index.find(b"\x00" * 20) is None and index.find(b"\xff" * 20) is None
    finally:
        index.close()
    (tmp_path / "pack" / midx.NAME).write_bytes(b"MIDX\x01\x02" + b"\0" * 40)  # SHA-256 ids
    assert midx.MultiPackIndex.read(tmp_path) is None  # left to git


def test_a_miss_lists_the_pack_folder_again_only_when_it_changed(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A miss costs a stat of the folder, not a listing of every pack in it (3 ms at 2000
    packs), unless a pack came or went since the last listing."""
    (old,) = write_blobs(repo, [b"o" * 70_000])
    folder = objects_dir(repo) / "pack"
    past = time.time_ns() - 10 * 10**9  # out of the file system clock's racy window
    os.utime(folder, ns=(past, past))
    listings = []
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: listings.append(path) or real(path))
    reader = PackReader(objects_dir(repo))
    try:
        assert reader.read("0" * 40) is None and len(listings) == 1
        assert reader.read("1" * 40) is None and len(listings) == 1  # unchanged: not listed
        (new,) = write_blobs(repo, [b"n" * 70_000])  # the folder's mtime moves
        assert bytes(reader.read(new.hex()) or b"") == b"n" * 70_000 and len(listings) == 2
        assert bytes(reader.read(old.hex()) or b"") == b"o" * 70_000
    finally:
        reader.close()
