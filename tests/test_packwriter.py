"""PackWriter and gitobjects against the real git binary.

Every pack written here must be indistinguishable from one git wrote itself:
git reads the objects back byte for byte, `verify-pack`, `fsck --strict` and
`gc` accept it, and in-process tree/commit ids equal git's own.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import random
import stat
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_mgit.gitcmd import find_repo
from git_mgit.store import anchors, keep, midx, packwriter, writeout
from git_mgit.store.gitobjects import DIR_MODE, commit_body, object_id, tree_body
from git_mgit.store.packwriter import PackWriter, encode_idx, entry_header
from tests.gitsandbox import init_repo, run_git

MiB = 1 << 20
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
IDENT = "Mgit Test <mgit@example.invalid>"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo")


def objects_dir(repo: Path) -> Path:
    return repo / ".git" / "objects"


def pack_files(repo: Path) -> list[str]:
    return sorted(p.name for p in (objects_dir(repo) / "pack").iterdir())


def cat(repo: Path, oid: bytes) -> bytes:
    return run_git("cat-file", "blob", oid.hex(), cwd=repo, text=False).stdout


def assert_fsck_clean(repo: Path) -> None:
    proc = run_git("fsck", "--full", "--strict", "--no-progress", cwd=repo)
    report = (proc.stdout + proc.stderr).lower()
    for word in ("error", "warning", "dangling", "missing", "bad", "corrupt"):
        assert word not in report, report


def tmp_pack_size(repo: Path) -> int:
    """Size of the pack being written (git's own temp-file naming: tmp_pack_*)."""
    (tmp,) = (objects_dir(repo) / "pack").glob("tmp_pack_*")
    return tmp.stat().st_size


def anchor(pack: PackWriter, blobs: list[bytes]) -> str:
    """Add a tree and a commit referencing blobs, so fsck and gc see them as reachable."""
    tree = pack.add("tree", [tree_body((("100644", b"f%d" % i, o) for i, o in enumerate(blobs)))])
    return pack.add("commit", [commit_body(tree.hex(), [], "anchor\n", IDENT, 1700000000)]).hex()


def verify_pack_objects(repo: Path, pack: Path) -> dict[str, tuple[str, int]]:
    """{oid: (type, size)} from `git verify-pack -v`, which also re-checks every CRC and the trailer."""
    out = run_git("verify-pack", "-v", pack.with_suffix(".idx"), cwd=repo).stdout
    objs = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 5 and len(fields[0]) == 40:
            objs[fields[0]] = (fields[1], int(fields[2]))
    assert f"non delta: {len(objs)} object" in out
    return objs


def test_blobs_of_edge_sizes_round_trip_and_pass_git_checks(repo: Path) -> None:
    rng = random.Random(1)
    sizes = [0, 1, 65534, 65535, 65536, 65537, 2 * 65535, 5 * MiB + 7]
    blobs = [rng.randbytes(n) for n in sizes]
    with PackWriter(objects_dir(repo)) as pack:
        tmp = pack_files(repo)
        oids = [pack.add("blob", [b]) for b in blobs]
        commit = anchor(pack, oids)
        assert len(pack) == len(blobs) + 2
        path = pack.finish()
    assert path is not None
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)

    assert len(tmp) == 1 and tmp[0].startswith("tmp_pack_")
    trailer = path.read_bytes()[-20:]
    assert path.name == f"pack-{trailer.hex()}.pack"
    assert pack_files(repo) == [path.with_suffix(ext).name for ext in (".idx", ".keep", ".pack")]
    assert path.with_suffix(".keep").read_text() == keep.MARK  # git gc --auto leaves it alone
    for f in (path, path.with_suffix(".idx")):
        assert stat.S_IMODE(f.stat().st_mode) == 0o444

    for oid, data in zip(oids, blobs, strict=True):
        assert oid == object_id("blob", [data])
        assert run_git("cat-file", "-s", oid.hex(), cwd=repo).stdout.strip() == str(len(data))
        assert cat(repo, oid) == data
    hashed = run_git("hash-object", "--stdin", cwd=repo, input=blobs[-1]).stdout
    assert hashed.decode().strip() == oids[-1].hex()

    objs = verify_pack_objects(repo, path)
    assert {
        o.hex(): ("blob", len(b)) for o, b in zip(oids, blobs, strict=True)
    }.items() <= objs.items()
    assert objs[commit][0] == "commit"
    assert_fsck_clean(repo)


def test_parts_of_any_layout_form_one_object(repo: Path) -> None:
    """Parts of any size or item type (typed numpy views), empty ones included, form one object."""
    rng = random.Random(2)
    floats = np.arange(300_000, dtype=np.float32).reshape(600, 500)
    parts = [
        rng.randbytes(65535),
        b"",
        b"x",
        bytearray(rng.randbytes(packwriter.WINDOW + 3)),
        memoryview(floats),
        b"",
    ]
    expected = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    with PackWriter(objects_dir(repo)) as pack:
        oid = pack.add("blob", parts)
        commit = anchor(pack, [oid])
        path = pack.finish()
    assert path is not None
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)
    assert oid == hashlib.sha1(b"blob %d\0" % len(expected) + expected).digest()
    assert cat(repo, oid) == expected
    assert verify_pack_objects(repo, path)[oid.hex()] == ("blob", len(expected))
    assert_fsck_clean(repo)


def test_duplicates_are_stored_once(repo: Path) -> None:
    big = random.Random(3).randbytes(packwriter.THREAD_MIN + 5)  # hashed on the worker thread
    small = b"small blob"
    with PackWriter(objects_dir(repo)) as pack:
        a = pack.add("blob", [big])
        b = pack.add("blob", [small])  # held, written with the next large one
        size_before = pack.size
        assert pack.add("blob", [big[:10], big[10:]]) == a
        assert pack.add("blob", [small]) == b
        assert tmp_pack_size(repo) == pack.size == size_before and len(pack) == 2
        c = pack.add("blob", [b"after the duplicates"])
        commit = anchor(pack, [a, b, c])
        path = pack.finish()
    assert path is not None
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)
    assert len(verify_pack_objects(repo, path)) == 5  # 3 blobs, tree, commit
    assert cat(repo, a) == big and cat(repo, c) == b"after the duplicates"
    assert_fsck_clean(repo)


def test_small_objects_are_written_in_batches_between_large_ones(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An anchor's trees and pointer files are small: a few writes for thousands of them,
    in file order around a large object, and the pack reads back whole."""
    writes: list[int] = []
    pwritev = packwriter.os.pwritev

    def counted(fd: int, bufs: list, offset: int) -> int:
        writes.append(offset)
        return pwritev(fd, bufs, offset)

    monkeypatch.setattr(packwriter.os, "pwritev", counted)
    smalls = [f"pointer {i}\n".encode() * (1 + i % 50) for i in range(3000)]  # > IOV_MAX
    big = random.Random(5).randbytes(packwriter.SMALL * 3)
    with PackWriter(objects_dir(repo)) as pack:
        oids = [pack.add("blob", [b]) for b in smalls[:1500]]
        oids.append(pack.add("blob", [big]))
        oids += [pack.add("blob", [b]) for b in smalls[1500:]]
        commit = anchor(pack, oids)
        path = pack.finish()
    assert path is not None and len(writes) < 30  # not two or more for each object
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)
    assert cat(repo, oids[0]) == smalls[0] and cat(repo, oids[1500]) == big
    assert cat(repo, oids[-1]) == smalls[-1]
    assert_fsck_clean(repo)


@pytest.mark.parametrize("off_by", [0, 1, -1])
def test_a_pack_told_its_count_is_hashed_as_written_and_a_wrong_count_still_holds(
    repo: Path, off_by: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told how many objects it will hold, the writer hashes the pack and its CRC32s while
    writing (a duplicate, dropped, leaves no trace in them); told wrongly, it re-reads."""
    rereads = []
    reread = PackWriter._digest_and_crcs
    monkeypatch.setattr(
        PackWriter, "_digest_and_crcs", lambda self: rereads.append(1) or reread(self)
    )
    rng = random.Random(7)
    blobs = [rng.randbytes(n) for n in (0, 1, 65535, 65536, packwriter.THREAD_MIN + 9, 3 * MiB)]
    with PackWriter(objects_dir(repo), expected=len(blobs) + 2 + off_by) as pack:
        oids = []
        for b in blobs:
            oids.append(pack.add("blob", [b]))
            assert pack.add("blob", [b[:1], b[1:]]) == oids[-1]  # a duplicate of each
        commit = anchor(pack, oids)
        path = pack.finish()
    assert path is not None
    assert rereads == ([] if off_by == 0 else [1])
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)
    assert path.name == f"pack-{path.read_bytes()[-20:].hex()}.pack"
    objs = verify_pack_objects(repo, path)  # every CRC32 and the trailer, checked by git
    assert len(objs) == len(blobs) + 2
    for oid, data in zip(oids, blobs, strict=True):
        assert cat(repo, oid) == data
    assert_fsck_clean(repo)


def test_entries_built_on_threads_make_the_pack_add_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`built` frames entries on the codec pool; appended to a pack told its count, they
    give byte for byte the pack and idx that add() writes from the caller's buffers, and a
    write that fails leaves the pack's hash as it was (the next entries still verify)."""
    rng = random.Random(11)
    sizes = (0, 1, 65534, 65535, 65536, packwriter.WINDOW + 1, packwriter.THREAD_MIN + 3, 5 * MiB)
    blobs = [rng.randbytes(n) for n in sizes]
    one, two = init_repo(tmp_path / "one"), init_repo(tmp_path / "two")
    with PackWriter(objects_dir(one)) as pack:
        oids = [pack.add("blob", [b]) for b in blobs]
        commit = anchor(pack, oids)
        by_add = pack.finish()
    assert by_add is not None

    failed = []
    write = PackWriter._pwritev

    def fail_once(self: PackWriter, bufs: list, offset: int) -> int:
        if not failed and sum(len(b) for b in bufs) > packwriter.THREAD_MIN:
            failed.append(offset)
            write(self, [bufs[0][:1000]], offset)  # a torn write, then the failure
            raise OSError("disk full")
        return write(self, bufs, offset)

    with PackWriter(objects_dir(two), expected=len(blobs) + 2) as pack:
        tagged = [(i, "blob", b) for i, b in enumerate(blobs)] + [(-1, "blob", blobs[3])]
        got = {}
        for i, entry in packwriter.built(tagged):
            if i == 6 and not failed:
                monkeypatch.setattr(PackWriter, "_pwritev", fail_once)
                with pytest.raises(OSError, match="disk full"):
                    pack.add_entry(entry)
                monkeypatch.setattr(PackWriter, "_pwritev", write)
            got[i] = pack.add_entry(entry)
        assert [got[i] for i in range(len(blobs))] == oids and got[-1] == oids[3]
        assert anchor(pack, oids) == commit
        by_entries = pack.finish()
    assert failed and by_entries is not None and by_entries.name == by_add.name
    assert by_entries.read_bytes() == by_add.read_bytes()
    assert by_entries.with_suffix(".idx").read_bytes() == by_add.with_suffix(".idx").read_bytes()
    run_git("update-ref", "refs/heads/main", commit, cwd=two)
    assert len(verify_pack_objects(two, by_entries)) == len(blobs) + 2
    assert_fsck_clean(two)


def test_built_gives_every_entry_read_before_a_failure_then_raises_it() -> None:
    """A download cut off keeps what it verified: the entries framed ahead still come."""

    def cut_off():
        for i in range(5):
            yield i, "blob", b"%d" % i * (i + 1) * 1000
        raise ConnectionError("cut off")

    got = []
    with pytest.raises(ConnectionError, match="cut off"):
        for i, entry in packwriter.built(cut_off()):
            got.append((i, entry.oid))
    assert got == [(i, object_id("blob", [b"%d" % i * (i + 1) * 1000])) for i in range(5)]


@pytest.mark.parametrize("chunks", [0, 1, 3, 300, 5000])
def test_anchor_size_counts_the_objects_an_anchor_adds(repo: Path, chunks: int) -> None:
    """What a download tells its pack to expect: the anchor's trees and commit, exactly."""
    rng = random.Random(chunks)
    filed = [(rng.randbytes(32), rng.randbytes(20)) for _ in range(chunks)]
    with PackWriter(objects_dir(repo)) as pack:
        anchors.write_anchor(pack, filed)
        assert len(pack) == anchors.anchor_size(h for h, _ in filed)
        pack.abort()


def test_gc_keeps_referenced_objects_and_drops_unreferenced(repo: Path) -> None:
    """git's gc leaves a kept pack alone; with the mark lifted (as git mgit gc and prune
    lift it), it keeps what is referenced, drops the rest, and its pack is kept again."""
    blobs = [random.Random(4).randbytes(n) for n in (10, 70_000, 2 * MiB)]
    with PackWriter(objects_dir(repo)) as pack:
        oids = [pack.add("blob", [b]) for b in blobs]
        stray = pack.add("blob", [b"nobody points at me"])
        commit = anchor(pack, oids)
        written = pack.finish()
    assert written is not None
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)
    run_git("gc", "--prune=now", "--quiet", cwd=repo)
    assert written.exists() and run_git("cat-file", "-e", stray.hex(), cwd=repo).returncode == 0
    with keep.lifted(find_repo(repo)):
        assert not written.with_suffix(".keep").exists()
        run_git("gc", "--prune=now", "--quiet", cwd=repo)

    assert all(cat(repo, o) == b for o, b in zip(oids, blobs, strict=True))
    gone = run_git("cat-file", "-e", stray.hex(), cwd=repo, check=False)
    assert gone.returncode != 0
    (left,) = (objects_dir(repo) / "pack").glob("*.pack")
    assert left != written and left.with_suffix(".keep").read_text() == keep.MARK
    assert_fsck_clean(repo)


def test_several_packs_are_all_visible(repo: Path) -> None:
    oids = []
    for i in range(3):
        with PackWriter(objects_dir(repo)) as pack:
            oids.append(pack.add("blob", [b"pack %d" % i]))
            assert pack.finish() is not None
    assert len([n for n in pack_files(repo) if n.endswith(".pack")]) == 3
    assert [cat(repo, o) for o in oids] == [b"pack 0", b"pack 1", b"pack 2"]


def test_packs_that_pile_up_get_one_multi_pack_index(repo: Path) -> None:
    """Kept packs stay apart until git mgit gc: once midx.UNINDEXED of them are not in
    git's multi-pack-index, it is written again over every pack; a repack that deletes
    the packs it covers deletes it."""
    index = objects_dir(repo) / "pack" / midx.NAME
    oids = []

    def packs(n: int) -> None:
        for _ in range(n):
            with PackWriter(objects_dir(repo)) as pack:
                oids.append(pack.add("blob", [b"pack %d" % len(oids)]))
                assert pack.finish() is not None

    def covered() -> int:  # the header's pack count
        return int.from_bytes(index.read_bytes()[8:12], "big")

    packs(midx.UNINDEXED - 1)
    assert not index.exists()
    packs(1)
    assert covered() == midx.UNINDEXED
    packs(midx.UNINDEXED)
    assert covered() == 2 * midx.UNINDEXED
    run_git("multi-pack-index", "verify", cwd=repo)
    assert [cat(repo, o) for o in oids] == [b"pack %d" % i for i in range(len(oids))]
    tree = run_git(
        "mktree",
        cwd=repo,
        input="".join(f"100644 blob {o.hex()}\tf{i}\n" for i, o in enumerate(oids)),
    )
    commit = run_git("commit-tree", "-m", "all", tree.stdout.strip(), cwd=repo).stdout.strip()
    run_git("update-ref", "refs/heads/main", commit, cwd=repo)
    with keep.lifted(find_repo(repo)):
        run_git("repack", "-a", "-d", "-q", cwd=repo)
    assert not index.exists()
    assert [cat(repo, o) for o in oids] == [b"pack %d" % i for i in range(len(oids))]


def test_a_packs_end_lists_the_pack_folder_only_every_32_packs(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encoder's pack end counts itself in one small file (objects/info/mgit-unindexed):
    the folder, thousands of packs on a training host, is listed only when that count says
    a multi-pack-index may be due."""
    folder = objects_dir(repo) / "pack"
    listed = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(Path(path)) or real(path))
    for i in range(midx.UNINDEXED - 1):
        with PackWriter(objects_dir(repo)) as pack:
            pack.add("blob", [b"pack %d" % i])
            pack.finish()
    assert folder not in listed and not (folder / midx.NAME).exists()
    with PackWriter(objects_dir(repo)) as pack:
        pack.add("blob", [b"the last"])
        pack.finish()
    assert folder in listed and (folder / midx.NAME).exists()
    assert (objects_dir(repo) / "info" / "mgit-unindexed").stat().st_size == 0


def test_empty_writer_leaves_nothing(repo: Path) -> None:
    pack = PackWriter(objects_dir(repo))
    assert pack_files(repo) != []
    assert pack.finish() is None
    assert pack_files(repo) == []


def test_abort_leaves_nothing(repo: Path) -> None:
    pack = PackWriter(objects_dir(repo))
    oid = pack.add("blob", [b"doomed" * 1000])
    pack.abort()
    pack.abort()
    assert pack_files(repo) == []
    with pytest.raises(ValueError):
        pack.add("blob", [b"too late"])
    assert run_git("cat-file", "-e", oid.hex(), cwd=repo, check=False).returncode != 0


def test_exception_in_context_aborts(repo: Path) -> None:
    with pytest.raises(RuntimeError), PackWriter(objects_dir(repo)) as pack:
        pack.add("blob", [b"half a batch"])
        raise RuntimeError("caller failed")
    assert pack_files(repo) == []


def test_bad_kind_writes_nothing(repo: Path) -> None:
    with PackWriter(objects_dir(repo)) as pack:
        with pytest.raises(ValueError):
            pack.add("tag", [b"x"])
        assert len(pack) == 0 and tmp_pack_size(repo) == 12
        pack.abort()


def mktree(repo: Path, entries: list[tuple[str, bytes, bytes]]) -> str:
    """git's own tree id for entries (NUL-terminated input: names may hold newlines)."""
    kinds = {DIR_MODE: "tree", "160000": "commit"}
    lines = b"".join(
        b"%s %s %s\t%s\0" % (m.encode(), kinds.get(m, "blob").encode(), o.hex().encode(), n)
        for m, n, o in entries
    )
    return run_git("mktree", "-z", "--missing", cwd=repo, input=lines).stdout.decode().strip()


TRICKY = [
    ("100644", b"a.b", b"\x01" * 20),
    (DIR_MODE, b"a", bytes.fromhex(EMPTY_TREE)),  # sorts as "a/", after "a.b" and "a-"
    ("100644", b"a-", b"\x02" * 20),
    ("100755", b"a0", b"\x03" * 20),
    (DIR_MODE, b"ab", bytes.fromhex(EMPTY_TREE)),
    ("100644", b"ab.c", b"\x04" * 20),
    ("120000", b"A", b"\x05" * 20),
    ("160000", b"g", b"\x06" * 20),  # a gitlink sorts as a file: before "g.x"
    ("100644", b"g.x", b"\x07" * 20),
    ("100644", "é".encode(), b"\x08" * 20),
]


def test_tree_ids_match_git_mktree(repo: Path) -> None:
    body = tree_body(reversed(TRICKY))
    assert object_id("tree", [body]).hex() == mktree(repo, TRICKY)
    assert tree_body([]) == b"" and object_id("tree", [b""]).hex() == EMPTY_TREE


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.dictionaries(
        st.binary(min_size=1, max_size=4).filter(
            lambda n: b"/" not in n and b"\0" not in n and n not in (b".", b"..")
        ),
        st.sampled_from([DIR_MODE, "100644"]),
        min_size=1,
        max_size=8,
    )
)
def test_tree_order_matches_git_for_any_names(repo: Path, names: dict[bytes, str]) -> None:
    entries = [
        (mode, n, bytes.fromhex(EMPTY_TREE) if mode == DIR_MODE else b"\x09" * 20)
        for n, mode in names.items()
    ]
    assert object_id("tree", [tree_body(entries)]).hex() == mktree(repo, entries)


def test_tree_body_rejects_what_fsck_would_flag() -> None:
    oid = b"\x01" * 20
    for bad in (
        [("040000", b"a", oid)],
        [("100644", b"a/b", oid)],
        [("100644", b"", oid)],
        [("100644", b"a", oid[:19])],
        [("100644", b"a", oid), (DIR_MODE, b"a", oid)],
    ):
        with pytest.raises(ValueError):
            tree_body(bad)


@pytest.mark.parametrize("parents", [0, 1, 2])
def test_commit_ids_match_git_commit_tree(repo: Path, parents: int) -> None:
    env = {
        "GIT_AUTHOR_NAME": "Mgit Test",
        "GIT_AUTHOR_EMAIL": "mgit@example.invalid",
        "GIT_COMMITTER_NAME": "Mgit Test",
        "GIT_COMMITTER_EMAIL": "mgit@example.invalid",
        "GIT_AUTHOR_DATE": "@1700000000 +0000",
        "GIT_COMMITTER_DATE": "@1700000000 +0000",
    }
    parent_ids = [
        run_git("commit-tree", EMPTY_TREE, cwd=repo, input=f"root {i}\n", env=env).stdout.strip()
        for i in range(parents)
    ]
    message = "subject line\n\nbody with unicode é\nand a trailer: x\n"
    args = [a for p in parent_ids for a in ("-p", p)]
    expected = run_git(
        "commit-tree", EMPTY_TREE, *args, cwd=repo, input=message, env=env
    ).stdout.strip()
    body = commit_body(EMPTY_TREE, parent_ids, message, IDENT, 1700000000)
    assert object_id("commit", [body]).hex() == expected
    assert run_git("cat-file", "commit", expected, cwd=repo, text=False).stdout == body


def test_commit_body_rejects_malformed_input() -> None:
    with pytest.raises(ValueError):
        commit_body("xyz", [], "m\n", IDENT, 0)
    with pytest.raises(ValueError):
        commit_body(EMPTY_TREE, [EMPTY_TREE.upper()], "m\n", IDENT, 0)
    with pytest.raises(ValueError):
        commit_body(EMPTY_TREE, [], "m\n", "no email", 0)


def test_idx_uses_64_bit_offsets_beyond_2_gib(repo: Path) -> None:
    """Offsets past 2^31 without a 2 GiB pack: git show-index decodes the idx alone."""
    offsets = [12, 2**31 - 1, 2**31, 2**32 + 5, 5 * 2**40]
    entries = [
        (hashlib.sha1(b"%d" % i).digest(), off, 0xDEADBEEF - i) for i, off in enumerate(offsets)
    ]
    idx = encode_idx(entries, b"\xaa" * 20)
    assert len(idx) == 8 + 256 * 4 + len(entries) * 28 + 3 * 8 + 40
    assert idx[-20:] == hashlib.sha1(idx[:-20]).digest()
    shown = run_git("show-index", cwd=repo, input=idx).stdout.decode().splitlines()
    decoded = {}
    for line in shown:
        off, oid, crc = line.split()
        decoded[bytes.fromhex(oid)] = (int(off), int(crc.strip("()"), 16))
    assert decoded == {oid: (off, crc) for oid, off, crc in entries}


def test_entry_header_sizes_beyond_32_bits() -> None:
    """Sizes too large to test with real objects, decoded the way git's unpack_object_header does."""
    for size in (0, 15, 16, 65537, 2**32 + 3, 5 * 2**40 + 11):
        hdr = entry_header(3, size)
        assert hdr[0] >> 4 & 7 == 3
        decoded, shift = hdr[0] & 0x0F, 4
        for byte in hdr[1:]:
            decoded |= (byte & 0x7F) << shift
            shift += 7
        assert decoded == size
        assert all(b & 0x80 for b in hdr[:-1]) and not hdr[-1] & 0x80
    assert entry_header(1, 0) == b"\x10" and entry_header(2, 16) == b"\xa0\x01"


def test_stored_zlib_stream_is_valid_zlib(repo: Path) -> None:
    """The hand-built stream inflates with zlib itself, adler32 included."""
    data = random.Random(5).randbytes(3 * 65535 + 1)
    with PackWriter(objects_dir(repo)) as pack:
        pack.add("blob", [data])
        (tmp,) = (objects_dir(repo) / "pack").glob("tmp_pack_*")
        raw = tmp.read_bytes()
        pack.abort()
    start = 12 + len(entry_header(3, len(data)))
    d = zlib.decompressobj()
    assert d.decompress(raw[start:]) == data and d.eof and d.unused_data == b""
    assert struct.unpack(">4sII", raw[:12]) == (b"PACK", 2, 0)  # real count only at finish()


def test_an_independent_reader_verifies_our_packs(repo: Path) -> None:
    """dulwich, a second implementation of the pack format, agrees with our bytes."""
    from dulwich.object_format import SHA1
    from dulwich.pack import Pack

    blobs = [b"", b"x", bytes(range(256)) * 300, np.random.default_rng(3).bytes(200_000)]
    with PackWriter(repo / ".git" / "objects") as writer:
        oids = [writer.add("blob", [b]) for b in blobs]
        path = writer.finish()
    assert path is not None
    pack = Pack(str(path.with_suffix("")), object_format=SHA1)
    try:
        pack.check()  # pack and idx checksums, every object's CRC32 and id
        for oid, data in zip(oids, blobs, strict=True):
            assert pack[oid.hex().encode()].as_raw_string() == data
    finally:
        pack.close()


def test_writeout_queues_a_files_bytes_for_the_disk_and_names_a_bad_descriptor(
    tmp_path: Path,
) -> None:
    """On Linux writeback is only queued (sync_file_range), so a pack's writer does not wait
    for the disk as it grows; a failure is an OSError, not a silent no-op."""
    path = tmp_path / "f"
    data = random.Random(3).randbytes(3 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, data)
        writeout.start(fd, 0, len(data))
        writeout.sync(fd)
    finally:
        os.close(fd)
    assert path.read_bytes() == data
    if sys.platform.startswith("linux"):
        assert writeout.queued()
        with pytest.raises(OSError):
            writeout.start(fd, 0, len(data))  # closed


def test_writeout_syncs_instead_where_the_file_system_cannot_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system that answers sync_file_range with EINVAL gets an fdatasync (the pack is
    written all the same); another error (a bad descriptor) is raised."""
    synced: list[int] = []

    def refusing(fd: int, offset: int, length: int, flags: int) -> int:
        ctypes.set_errno(errno.EINVAL if fd >= 0 else errno.EBADF)
        return -1

    monkeypatch.setattr(writeout, "_sync_file_range", lambda: refusing)
    monkeypatch.setattr(writeout, "_DATASYNC", synced.append)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        writeout.start(fd, 0, 1)
    finally:
        os.close(fd)
    assert synced == [fd]
    with pytest.raises(OSError, match="Bad file descriptor"):
        writeout.start(-1, 0, 1)
