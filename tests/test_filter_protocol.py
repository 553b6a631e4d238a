"""git's long-running filter protocol (v2), tested against the real git binary.

The storage-free handler in tests/fake_filter.py stands in for the object
store, so any failure here is the protocol layer's. The framing is tested
on its own first, with hand-written bytes.
"""

from __future__ import annotations

import fcntl
import io
import os
import random
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

import pytest

from git_mgit.errors import MgitError
from git_mgit.filters import pktline
from git_mgit.filters.pktline import MAX_PAYLOAD, PktReader, PktWriter, ProtocolError
from git_mgit.filters.process import ContentSink, Delayed, run_clean_once, run_smudge_once, serve
from tests.fake_filter import MARKER, FakeHandler
from tests.gitsandbox import init_repo, run_git

FAKE_FILTER = Path(__file__).with_name("fake_filter.py")


def pkt(payload: bytes) -> bytes:
    return b"%04x" % (len(payload) + 4) + payload


def text_list(*lines: str) -> bytes:
    return b"".join(pkt(line.encode() + b"\n") for line in lines) + b"0000"


def parse(stream: bytes) -> list[bytes | None]:
    """An independent pkt-line parser, so the writer is not checked by its own reader."""
    out: list[bytes | None] = []
    pos = 0
    while pos < len(stream):
        size = int(stream[pos : pos + 4], 16)
        out.append(None if size == 0 else stream[pos + 4 : pos + size])
        pos += size or 4
    return out


def texts(packets: list[bytes | None]) -> list[str | None]:
    """Packets as text (LF stripped), for readable assertions."""
    return [None if p is None else p.decode("latin-1").removesuffix("\n") for p in packets]


# -- pkt-line framing ---------------------------------------------------------


def test_reader_reads_text_lists_with_or_without_lf() -> None:
    stream = pkt(b"git-filter-client\n") + pkt(b"version=2") + b"0000" + pkt(b"k=v=w\n") + b"0000"
    reader = PktReader(io.BytesIO(stream))
    assert reader.read_text_list() == ["git-filter-client", "version=2"]
    assert reader.read_text_list() == ["k=v=w"]
    with pytest.raises(EOFError):
        reader.read_text_list()


def test_reader_accepts_empty_packet_and_max_packet() -> None:
    big = bytes(range(256)) * 255 + b"x" * 236  # exactly 65516 bytes
    assert len(big) == MAX_PAYLOAD
    reader = PktReader(io.BytesIO(b"0004" + pkt(big) + b"0000"))
    assert reader.read_packet() == b""
    assert reader.read_packet() == big
    assert reader.read_packet() is None


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (b"zzzz", "bad pkt-line length"),
        (b"00g8abcd", "bad pkt-line length"),
        (b"+00a", "bad pkt-line length"),  # int() would accept these three
        (b" 00a", "bad pkt-line length"),
        (b"0_0a", "bad pkt-line length"),
        (b"0001", "invalid pkt-line length 0001"),
        (b"0002", "invalid pkt-line length 0002"),
        (b"0003", "invalid pkt-line length 0003"),
        (b"fff1" + b"x" * 65517, "exceeds the maximum of 65520"),
        (b"ffff", "exceeds the maximum"),
        (b"00", "inside a pkt-line header"),
        (b"000aabc", "inside a pkt-line"),
        (pkt(b"command=clean\n"), "inside a pkt-line list"),
    ],
)
def test_reader_rejects_malformed_packets(stream: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        PktReader(io.BytesIO(stream)).read_text_list()


def test_content_without_flush_is_an_error() -> None:
    content = PktReader(io.BytesIO(pkt(b"abc"))).content()
    with pytest.raises(ProtocolError, match="no flush packet"):
        content.read()


def _random_pieces(rng: random.Random) -> list[bytes]:
    sizes = [0, 1, 3, MAX_PAYLOAD - 1, MAX_PAYLOAD, MAX_PAYLOAD + 1, 3 * MAX_PAYLOAD + 5, 200_000]
    sizes += [rng.randrange(1, 150_000) for _ in range(10)]
    return [rng.randbytes(n) for n in sizes]


def test_writer_splits_streams_into_max_size_packets(tmp_path: Path) -> None:
    pieces = _random_pieces(random.Random(1))
    out = tmp_path / "out"
    with out.open("wb") as f:
        writer = PktWriter(f.fileno())
        writer.text("status=success")
        writer.flush()
        for piece in pieces:
            writer.write_stream(piece)
        writer.flush()
    packets = parse(out.read_bytes())
    assert texts(packets[:2]) == ["status=success", None]
    assert packets[-1] is None
    payload = packets[2:-1]
    assert b"".join(p for p in payload if p is not None) == b"".join(pieces)
    # Full packets, never an empty one, each write_stream call on its own.
    assert all(p and len(p) <= MAX_PAYLOAD for p in payload)
    assert len(payload) == sum(-(-len(p) // MAX_PAYLOAD) for p in pieces)


def test_writer_batches_iovecs_and_survives_partial_writes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = bytearray(random.Random(2).randbytes(10 * MAX_PAYLOAD + 123))
    calls: list[list[bytes | memoryview]] = []
    real_writev = os.writev

    def short_writev(fd: int, bufs: list[bytes | memoryview]) -> int:
        calls.append(list(bufs))
        joined = b"".join(bytes(b) for b in bufs)
        return real_writev(fd, [joined[: 50_000 + len(calls)]])  # a signal cut it short

    monkeypatch.setattr(pktline, "IOV_BATCH", 6)
    monkeypatch.setattr(pktline.os, "writev", short_writev)
    out = tmp_path / "out"
    with out.open("wb") as f:
        writer = PktWriter(f.fileno())
        writer.write_stream(data)
        writer.flush()
    assert b"".join(p for p in parse(out.read_bytes()) if p) == data
    assert max(len(bufs) for bufs in calls) <= 6
    # The payload iovecs are views of the caller's buffer: no copies.
    payload_iovecs = [b for bufs in calls for b in bufs if len(b) > 4]
    assert payload_iovecs
    assert all(isinstance(b, memoryview) and b.obj is data for b in payload_iovecs)


def test_writer_rejects_overlong_text() -> None:
    writer = PktWriter(io.BytesIO())
    with pytest.raises(ValueError, match="exceeds 65516"):
        writer.text("x" * MAX_PAYLOAD)


@pytest.mark.parametrize("source", ["fd", "file", "tiny-buffer"])
def test_content_readinto_fills_caller_buffers(source: str, tmp_path: Path) -> None:
    pieces = _random_pieces(random.Random(3))
    expected = b"".join(pieces)
    packets = [p[i : i + MAX_PAYLOAD] for p in pieces for i in range(0, len(p), MAX_PAYLOAD)]
    stream = b"".join(map(pkt, packets)) + b"0004" + b"0000" + text_list("next=1")
    path = tmp_path / "in"
    path.write_bytes(stream)
    with path.open("rb") as f:
        if source == "fd":
            reader = PktReader(f.fileno())
        elif source == "file":
            reader = PktReader(io.BytesIO(stream))
        else:
            reader = PktReader(f.fileno(), buffer_size=5)
        content = reader.content()
        arena = bytearray(3 * 100_001)
        window = memoryview(arena)[100_001 : 2 * 100_001]  # a slice of a larger buffer
        got = bytearray()
        while n := content.readinto(window):
            # Every read but the last fills the caller's buffer completely.
            assert n == len(window) or len(got) + n == len(expected)
            got += window[:n]
        assert arena[:100_001] == bytes(100_001)  # nothing outside the window is touched
        assert got == expected
        assert content.read() == b""
        assert reader.read_text_list() == ["next=1"]  # still in step after the content


def test_bulk_content_is_read_straight_into_the_callers_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    payload = random.Random(4).randbytes(64 * MAX_PAYLOAD)
    stream = text_list("command=clean") + b"".join(
        pkt(payload[i : i + MAX_PAYLOAD]) for i in range(0, len(payload), MAX_PAYLOAD)
    )
    read_fd, write_fd = os.pipe()
    direct = 0
    real_readv = os.readv
    dest = bytearray(len(payload))

    def counting_readv(fd: int, bufs: list[memoryview]) -> int:
        nonlocal direct
        n = left = real_readv(fd, bufs)
        for buf in bufs:  # payloads straight into dest, headers into scratch slots
            take = min(left, len(buf))
            left -= take
            if buf.obj is dest:
                direct += take
        return n

    monkeypatch.setattr(pktline.os, "readv", counting_readv)
    # A thread plays git, writing the request into the pipe.
    writer = threading.Thread(target=os.write, args=(write_fd, stream + b"0000"))
    writer.start()
    try:
        reader = PktReader(read_fd)
        # The pipe from git was enlarged, so each readv can bring a whole packet.
        assert fcntl.fcntl(read_fd, fcntl.F_GETPIPE_SZ) == pktline.PIPE_SIZE
        assert reader.read_text_list() == ["command=clean"]
        content = reader.content()
        assert content.readinto(dest) == len(payload)
        assert dest == payload
        assert content.read() == b""
    finally:
        writer.join()
        os.close(read_fd)
        os.close(write_fd)
    # At most what arrived with the request's header in one pipe read is copied.
    assert direct >= len(payload) - 65536


def test_full_packets_are_read_many_per_syscall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git sends content in full packets: one readv takes up to a pipe's worth of them."""
    payload = random.Random(5).randbytes(40 * MAX_PAYLOAD + 123)
    packets = [payload[i : i + MAX_PAYLOAD] for i in range(0, len(payload), MAX_PAYLOAD)]
    path = tmp_path / "in"
    path.write_bytes(b"".join(map(pkt, packets)) + b"0000" + text_list("next=1"))
    calls = 0
    real_readv = os.readv

    def counting_readv(fd: int, bufs: list[memoryview]) -> int:
        nonlocal calls
        calls += 1
        return real_readv(fd, bufs)

    monkeypatch.setattr(pktline.os, "readv", counting_readv)
    dest = bytearray(len(payload) + MAX_PAYLOAD)
    with path.open("rb") as f:
        reader = PktReader(f.fileno())
        content = reader.content()
        assert content.readinto(dest) == len(payload)
        assert dest[: len(payload)] == payload
        assert content.read() == b""
        assert reader.read_text_list() == ["next=1"]  # what was read past the flush is kept
    # The first header, then runs of 17 packets (41 packets, the last one short).
    assert calls <= 5, f"{calls} reads for {len(packets)} packets"


@pytest.mark.parametrize("seed", range(6))
def test_content_through_a_pipe_in_ragged_writes_reads_back_exactly(seed: int) -> None:
    """Short packets mid-content, headers split across reads, caller buffers of any size:
    runs of full packets read in one readv must still put every byte in order."""
    rng = random.Random(seed)
    pieces = _random_pieces(rng)
    expected = b"".join(pieces)
    packets = [p[i : i + MAX_PAYLOAD] for p in pieces for i in range(0, len(p), MAX_PAYLOAD)]
    stream = b"".join(map(pkt, packets)) + b"0000" + text_list("next=1")
    starts = [0]
    for packet in packets:
        starts.append(starts[-1] + 4 + len(packet))
    # Cut inside every packet header, and anywhere else.
    cuts = {start + rng.randrange(1, 4) for start in starts}
    cuts |= set(rng.sample(range(1, len(stream)), 100))
    cuts = sorted(cut for cut in cuts if 0 < cut < len(stream))
    parts = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    read_fd, write_fd = os.pipe()

    def play_git() -> None:
        for part in parts:
            os.write(write_fd, part)
            time.sleep(0.0005)  # the reader mostly drains the pipe up to each cut
        os.close(write_fd)  # a reader out of step then fails at the end instead of waiting

    writer = threading.Thread(target=play_git)
    writer.start()
    try:
        reader = PktReader(read_fd)
        content = reader.content()
        got = bytearray()
        while True:
            buf = bytearray(rng.choice([1, 4, MAX_PAYLOAD, 3 * MAX_PAYLOAD + 7, 1 << 20, 5 << 20]))
            n = content.readinto(buf)
            if not n:
                break
            got += buf[:n]
        assert got == expected
        assert reader.read_text_list() == ["next=1"]
    finally:
        os.close(read_fd)  # a writer blocked on a full pipe gets EPIPE and ends
        writer.join()


# -- the server, driven in-process -----------------------------------------------


HANDSHAKE = text_list("git-filter-client", "version=2") + text_list(
    "capability=clean", "capability=smudge", "capability=delay"
)
HANDSHAKE_REPLY = ["git-filter-server", "version=2", None]
CAPS_REPLY = ["capability=clean", "capability=smudge", "capability=delay", None]


def request(command: str, pathname: str, content: bytes | None, *extra: str) -> bytes:
    out = text_list(f"command={command}", f"pathname={pathname}", *extra)
    if content is not None:
        out += b"".join(
            pkt(content[i : i + MAX_PAYLOAD]) for i in range(0, len(content), MAX_PAYLOAD)
        )
        out += b"0000"
    return out


def run_server(handler: object, stream: bytes) -> tuple[int, list[str | None]]:
    out = io.BytesIO()
    code = serve(handler, io.BytesIO(stream), out)  # type: ignore[arg-type]
    return code, texts(parse(out.getvalue()))


def after_handshake(reply: list[str | None]) -> list[str | None]:
    """The responses to the requests, once the full handshake is checked."""
    assert reply[: len(HANDSHAKE_REPLY) + len(CAPS_REPLY)] == HANDSHAKE_REPLY + CAPS_REPLY
    return reply[len(HANDSHAKE_REPLY) + len(CAPS_REPLY) :]


def test_server_negotiates_only_offered_capabilities() -> None:
    stream = text_list("git-filter-client", "version=2", "version=3")
    stream += text_list("capability=clean", "capability=not-yet-invented")
    code, reply = run_server(FakeHandler(), stream + request("clean", "a", b"hi"))
    assert code == 0
    assert reply == [
        *HANDSHAKE_REPLY,
        *["capability=clean", None],
        *["status=success", None, "FAKE1\nih", None, None],
    ]


def test_server_rejects_other_protocol_versions(capsys: pytest.CaptureFixture[str]) -> None:
    code, reply = run_server(FakeHandler(), text_list("git-filter-client", "version=3"))
    assert code == 1
    assert reply == []
    assert "git-mgit: filter protocol error: expected git-filter-client offering version=2" in (
        capsys.readouterr().err
    )


def test_unknown_command_is_answered_with_error_and_serving_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = HANDSHAKE + text_list("command=frobnicate") + request("clean", "a.bin", b"abc")
    code, reply = run_server(FakeHandler(), stream)
    assert code == 0
    assert after_handshake(reply) == [
        "status=error",
        None,
        "status=success",
        None,
        "FAKE1\ncba",
        None,
        None,
    ]
    assert "git-mgit: unknown filter command 'frobnicate' from git" in capsys.readouterr().err


class BuggyHandler(FakeHandler):
    """Fails in ways the fake filter cannot be made to from git."""

    def clean(self, pathname: str, src: BinaryIO) -> bytes:
        if pathname == "returns-nothing":
            return None  # type: ignore[return-value]
        return super().clean(pathname, src)

    def smudge(self, pathname: str, data: bytes, sink: ContentSink, can_delay: bool) -> None:
        if pathname == "bug-after-output":
            sink.write(b"partial")
            raise KeyError("oops")
        raise Delayed(pathname)  # even where the request cannot be delayed

    def list_available(self) -> list[str]:
        raise MgitError("model.bin: remote unreachable; run git mgit fetch")


def test_clean_bug_unread_content_is_skipped_and_serving_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = HANDSHAKE + request("clean", "returns-nothing", b"x" * 200_000)
    stream += request("clean", "next.bin", b"ok")
    code, reply = run_server(BuggyHandler(), stream)
    assert code == 0
    assert after_handshake(reply) == [
        *["status=error", None],
        *["status=success", None, "FAKE1\nko", None, None],
    ]
    assert "internal error while cleaning returns-nothing: TypeError" in capsys.readouterr().err


def test_internal_error_after_output_ends_content_then_reports_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = HANDSHAKE + request("smudge", "bug-after-output", MARKER)
    stream += request("smudge", "undelayable", MARKER)
    code, reply = run_server(BuggyHandler(), stream)
    assert code == 0
    assert after_handshake(reply) == [
        *["status=success", None, "partial", None, "status=error", None],
        *["status=error", None],
    ]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "git-mgit: internal error while smudging bug-after-output: KeyError: 'oops'",
        "git-mgit: internal error while smudging undelayable: RuntimeError: "
        "Delayed(undelayable) raised without can-delay or after output started",
    ]
    monkeypatch.setenv("GIT_MGIT_DEBUG", "1")
    run_server(BuggyHandler(), stream)
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_failing_list_available_reports_error(capsys: pytest.CaptureFixture[str]) -> None:
    stream = HANDSHAKE + request("smudge", "model.bin", MARKER, "can-delay=1")
    stream += text_list("command=list_available_blobs")
    code, reply = run_server(BuggyHandler(), stream)
    assert code == 0
    assert after_handshake(reply) == [
        *["status=delayed", None],
        *[None, "status=error", None],
    ]
    assert "git-mgit: model.bin: remote unreachable; run git mgit fetch" in capsys.readouterr().err


def test_list_available_names_only_delayed_paths() -> None:
    handler = FakeHandler(delay=True)
    handler.list_available = lambda: ["never-delayed", "b.bin", "b.bin"]  # type: ignore[method-assign]
    stream = HANDSHAKE + request("smudge", "b.bin", MARKER + b"yz", "can-delay=1")
    stream += text_list("command=list_available_blobs") + request("smudge", "b.bin", b"")
    code, reply = run_server(handler, stream)
    assert code == 0
    assert after_handshake(reply) == [
        *["status=delayed", None],
        *["pathname=b.bin", None, "status=success", None],
        *["status=success", None, "zy", None, None],  # from the blob kept at delay time
    ]


# -- the single-shot fallbacks ------------------------------------------------------


def test_single_shot_clean_and_smudge_round_trip() -> None:
    cleaned = io.BytesIO()
    assert run_clean_once(FakeHandler(), "m.bin", io.BytesIO(b"weights"), cleaned) == 0
    assert cleaned.getvalue() == MARKER + b"sthgiew"
    smudged = io.BytesIO()
    assert run_smudge_once(FakeHandler(), "m.bin", io.BytesIO(cleaned.getvalue()), smudged) == 0
    assert smudged.getvalue() == b"weights"


def test_single_shot_failures_exit_non_zero_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    blob = MARKER + b"data"
    assert (
        run_smudge_once(FakeHandler(), "x-smudge-error-late.bin", io.BytesIO(blob), io.BytesIO())
        == 1
    )
    assert run_clean_once(FakeHandler(), "x-clean-bug.bin", io.BytesIO(b"1"), io.BytesIO()) == 1
    assert capsys.readouterr().err.splitlines() == [
        "git-mgit: x-smudge-error-late.bin: fake smudge failed halfway",
        "git-mgit: internal error while cleaning x-clean-bug.bin: RuntimeError: fake clean bug",
    ]


# -- against the real git binary ------------------------------------------------------


def filter_repo(tmp_path: Path, *options: str, required: bool = True) -> tuple[Path, Path]:
    """A repo whose *.bin files go through the fake filter process; returns (repo, log)."""
    repo = init_repo(tmp_path / "repo")
    log = tmp_path / "filter.log"
    (repo / ".gitattributes").write_text("*.bin filter=fake -text\n")
    command = [sys.executable, str(FAKE_FILTER), "--log", str(log), *options]
    run_git("config", "filter.fake.process", shlex.join(command), cwd=repo)
    run_git("config", "filter.fake.required", str(required).lower(), cwd=repo)
    run_git("config", "core.compression", "0", cwd=repo)  # keep the big file fast
    return repo, log


def log_lines(log: Path) -> list[str]:
    lines = log.read_text().splitlines()
    log.unlink()
    return lines


def blob(repo: Path, rev_path: str) -> bytes:
    return run_git("cat-file", "blob", rev_path, cwd=repo, text=False).stdout


def test_add_commit_checkout_round_trip_through_one_process(tmp_path: Path) -> None:
    repo, log = filter_repo(tmp_path)
    rng = random.Random(5)
    files = {
        "big.bin": rng.randbytes(20 * 2**20 + 777),  # 321 packets each way
        "empty.bin": b"",
        "one.bin": b"1",
        "sub/dir/model.bin": rng.randbytes(MAX_PAYLOAD),
        "plain.txt": b"not filtered\n",
    }
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    run_git("add", ".", cwd=repo)
    assert sorted(log_lines(log)) == sorted(
        ["start", *(f"clean {n} {len(d)}" for n, d in files.items() if n.endswith(".bin"))]
    )
    run_git("commit", "-qm", "models", cwd=repo)
    for name, data in files.items():
        expected = data if name.endswith(".txt") else MARKER + data[::-1]
        assert blob(repo, f"HEAD:{name}") == expected

    for name in files:
        (repo / name).unlink()
    log.unlink(missing_ok=True)
    run_git("checkout", "--", ".", cwd=repo)
    for name, data in files.items():
        assert (repo / name).read_bytes() == data
    smudged = log_lines(log)
    assert smudged.count("start") == 1  # one process for all files
    assert sorted(line for line in smudged if line.startswith("smudge")) == sorted(
        f"smudge {n} can_delay=1 {len(MARKER) + len(d)}"
        for n, d in files.items()
        if n.endswith(".bin")
    )
    assert run_git("status", "--porcelain", cwd=repo).stdout == ""


def test_required_clean_failure_fails_git_add_with_the_message(tmp_path: Path) -> None:
    repo, _ = filter_repo(tmp_path)
    (repo / "x-clean-error.bin").write_bytes(b"refused" * 1000)
    proc = run_git("add", "x-clean-error.bin", cwd=repo, check=False)
    assert proc.returncode != 0
    assert "git-mgit: x-clean-error.bin: fake clean refuses this file" in proc.stderr
    assert "clean filter 'fake' failed" in proc.stderr
    assert run_git("ls-files", cwd=repo).stdout == ""


def test_clean_failure_drains_the_content_and_serving_goes_on(tmp_path: Path) -> None:
    repo, log = filter_repo(tmp_path, required=False)
    big = random.Random(6).randbytes(5 * 2**20 + 3)  # the handler stops after 1 MiB
    (repo / "a-clean-error.bin").write_bytes(big)
    (repo / "b.bin").write_bytes(b"after")
    proc = run_git("add", "a-clean-error.bin", "b.bin", cwd=repo)
    assert "git-mgit: a-clean-error.bin: fake clean refuses this file" in proc.stderr
    assert blob(repo, ":a-clean-error.bin") == big  # not required: git stores it unfiltered
    assert blob(repo, ":b.bin") == MARKER + b"retfa"
    # Had the stream lost step, git would have killed and restarted the filter.
    assert log_lines(log) == ["start", "clean b.bin 5"]


def test_internal_clean_error_is_one_line_unless_debugging(tmp_path: Path) -> None:
    repo, _ = filter_repo(tmp_path)
    (repo / "x-clean-bug.bin").write_bytes(b"data")
    proc = run_git("add", "x-clean-bug.bin", cwd=repo, check=False)
    assert proc.returncode != 0
    expected = (
        "git-mgit: internal error while cleaning x-clean-bug.bin: RuntimeError: fake clean bug"
    )
    assert expected in proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr
    debug = run_git("add", "x-clean-bug.bin", cwd=repo, check=False, env={"GIT_MGIT_DEBUG": "1"})
    assert "Traceback (most recent call last)" in debug.stderr
    assert expected in debug.stderr.splitlines()


def commit_then_remove(repo: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (repo / name).write_bytes(data)
    run_git("add", ".", cwd=repo)
    run_git("commit", "-qm", "files", cwd=repo)
    for name in files:
        (repo / name).unlink()


@pytest.mark.parametrize("when", ["early", "late"])
def test_required_smudge_failure_fails_checkout_without_writing_the_file(
    tmp_path: Path, when: str
) -> None:
    repo, _ = filter_repo(tmp_path)
    name = f"x-smudge-error-{when}.bin"
    commit_then_remove(repo, {name: random.Random(7).randbytes(300_000)})
    proc = run_git("checkout", "--", name, cwd=repo, check=False)
    assert proc.returncode != 0
    reason = "cannot start" if when == "early" else "failed halfway"
    assert f"git-mgit: {name}: fake smudge {reason}" in proc.stderr
    assert f"{name}: smudge filter fake failed" in proc.stderr
    assert not (repo / name).exists()


def test_smudge_failure_after_partial_output_never_leaves_a_truncated_file(
    tmp_path: Path,
) -> None:
    repo, _ = filter_repo(tmp_path, required=False)
    data = random.Random(8).randbytes(300_000)
    commit_then_remove(repo, {"x-smudge-error-late.bin": data, "ok.bin": b"fine"})
    proc = run_git("checkout", "--", ".", cwd=repo)
    assert "fake smudge failed halfway" in proc.stderr
    # git discards the half it got and, the filter not being required, writes the blob as is.
    assert (repo / "x-smudge-error-late.bin").read_bytes() == MARKER + data[::-1]
    assert (repo / "ok.bin").read_bytes() == b"fine"


def test_delayed_checkout_of_several_files(tmp_path: Path) -> None:
    repo, log = filter_repo(tmp_path, "--delay")
    rng = random.Random(9)
    files = {f"m{i}.bin": rng.randbytes(rng.randrange(0, 200_000)) for i in range(4)}
    commit_then_remove(repo, files)
    log.unlink()
    run_git("checkout", "--", ".", cwd=repo)
    for name, data in files.items():
        assert (repo / name).read_bytes() == data
    lines = log_lines(log)
    blob_sizes = {name: len(MARKER) + len(data) for name, data in files.items()}
    # git offers delay for each file, then asks until every one is available;
    # the re-sent request carries no content, yet smudge gets the blob again.
    first = [f"smudge {n} can_delay=1 {s}" for n, s in blob_sizes.items()]
    assert lines[: 1 + len(files)] == ["start", *first]
    rest = lines[1 + len(files) :]
    assert rest == [
        line
        for name, size in blob_sizes.items()
        for line in (f"list_available {name}", f"smudge {name} can_delay=0 {size}")
    ]


def test_single_shot_filters_through_git(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    (repo / ".gitattributes").write_text("*.bin filter=fake -text\n")
    base = shlex.join([sys.executable, str(FAKE_FILTER)])
    run_git("config", "filter.fake.clean", f"{base} clean %f", cwd=repo)
    run_git("config", "filter.fake.smudge", f"{base} smudge %f", cwd=repo)
    run_git("config", "filter.fake.required", "true", cwd=repo)
    commit_then_remove(repo, {"w.bin": b"weights", "x-smudge-error-early.bin": MARKER})
    assert blob(repo, "HEAD:w.bin") == MARKER + b"sthgiew"
    run_git("checkout", "--", "w.bin", cwd=repo)
    assert (repo / "w.bin").read_bytes() == b"weights"
    proc = run_git("checkout", "--", "x-smudge-error-early.bin", cwd=repo, check=False)
    assert proc.returncode != 0
    assert "git-mgit: x-smudge-error-early.bin: fake smudge cannot start" in proc.stderr
    assert not (repo / "x-smudge-error-early.bin").exists()
