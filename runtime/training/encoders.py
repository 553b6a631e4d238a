"""A rank's encoder processes: a checkpoint's chunks encoded beside the loop, not inside it.

The training loop is Python: every torch call it makes takes the GIL
back after the op is dispatched. Encoding threads in the same process
took it too, between their C calls, and the loop waited for them: on an
H200, training ran 1.8-2.4x slower beside a commit on 16 threads. In
processes of their own, encoders share the loop's cores at most, never its
interpreter, and run at a lower priority (nice +5) so the loop wins a core.

Each encoder is a Python process running main() here, speaking
over a socket pair made by the rank: a JSON line, then the byte payloads it
announces (no pickles). A chunk in a shared arena travels as its place
(sharedmem.Where, offset, length); any other as its bytes. Messages:

    rank -> encoder: {"init": {repo, settings}}        encoder -> rank: {"ready": true}
                     {"task": n, "dtype", "place"|null, "previous"|null, "start"|null}
                         payloads: the chunk (unless placed), the previous sample (if any)
                     {"finish": true} | {"abort": true}
    encoder -> rank: {"done": n, "hash", "oid"|null, "size", "base"|null, "depth"}
                         payload: the chunk's sample
                     {"finished": true, "cpu_s", "peak_anon"} | {"error": message, "task": n|null}

An encoder exits when its socket closes (the rank ended, however it ended).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from git_mgit.config import Settings
from git_mgit.gitcmd import Repo
from git_mgit.resources import cores
from git_mgit.resources.malloc import reuse_freed_chunks
from git_mgit.runtime.training.encoding import Encoder, Previous, Result, Task
from git_mgit.runtime.training.sharedmem import Mapped, Where

NICE = 5
# `python -c` rather than `-m`: either puts the working directory first on sys.path, and only
# here can it be taken off, so that a folder named git_mgit there (a source tree) is not
# imported instead of the package the rank runs
_START = (
    "import sys; del sys.path[0]; "
    "from git_mgit.runtime.training.encoders import main; sys.exit(main(sys.argv[1:]))"
)
IN_FLIGHT = 2  # tasks queued per encoder, so it never waits for the next


class EncoderError(Exception):
    """An encoder failed a chunk, or died."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One chunk to encode: its bytes, and where a shared arena holds them (if one does)."""

    data: memoryview
    task: Task
    place: tuple[Where, int] | None = None


def _send(conn: Connection, header: dict[str, Any], *payloads: bytes | memoryview) -> None:
    conn.send_bytes(json.dumps(header).encode())
    for p in payloads:
        conn.send_bytes(p)


def _recv(conn: Connection) -> dict[str, Any]:
    return json.loads(conn.recv_bytes())


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def _raw(s: str | None) -> bytes | None:
    return None if s is None else bytes.fromhex(s)


class _Process:
    """One encoder, from the rank's side."""

    def __init__(self, init: dict[str, Any]) -> None:
        mine, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _START, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = Connection(mine.detach())
        self.pending: list[tuple[int, Chunk]] = []
        self.used = False  # has tasks in the current checkpoint
        self.ready = False  # its "ready" was read
        self.ending = False  # an end() was posted and its report not read yet
        _send(self.conn, {"init": init})

    def wait_ready(self) -> None:
        if not self.ready:
            self.ready = True
            self._message()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def submit(self, n: int, chunk: Chunk) -> None:
        t = chunk.task
        prev = t.previous
        header: dict[str, Any] = {
            "task": n,
            "dtype": t.dtype,
            "start": _hex(t.start),
            "previous": None
            if prev is None
            else {"hash": prev.content_hash.hex(), "depth": prev.depth},
            "place": None,
        }
        payloads: list[bytes | memoryview] = []
        if chunk.place is not None:
            where, offset = chunk.place
            header["place"] = [where.path, where.ident, offset, len(chunk.data)]
        else:
            payloads.append(chunk.data)
        if prev is not None:
            payloads.append(prev.sample)
        self._post(header, *payloads)
        self.pending.append((n, chunk))
        self.used = True

    def receive(self) -> tuple[int, Result]:
        """The oldest pending task's result (raises EncoderError if it failed)."""
        msg = self._message()
        n, _ = self.pending.pop(0)
        if "error" in msg:
            raise EncoderError(msg["error"])
        assert msg["done"] == n, (msg, n)
        sample = self.conn.recv_bytes()
        oid = _raw(msg["oid"])
        result = Result(
            bytes.fromhex(msg["hash"]), sample, oid, msg["size"], _raw(msg["base"]), msg["depth"]
        )
        return n, result

    def end(self, finish: bool) -> None:
        """Finish (or abort) this checkpoint's pack; ended() reads the encoder's report."""
        self.used = False
        self.ending = True
        self._post({"finish": True} if finish else {"abort": True})

    def ended(self) -> dict[str, Any]:
        """The report of the end() posted last (raises EncoderError if it failed)."""
        self.ending = False
        msg = self._message()
        if "error" in msg:
            raise EncoderError(msg["error"])
        return msg

    def drain(self) -> None:
        """Read (and drop) what pending tasks answer, after another encoder failed."""
        while self.pending:
            with contextlib.suppress(EncoderError):
                self.receive()

    def _post(self, header: dict[str, Any], *payloads: bytes | memoryview) -> None:
        try:
            _send(self.conn, header, *payloads)
        except OSError:
            raise self._died() from None

    def _died(self) -> EncoderError:
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # its socket is gone: it is of no use alive
            self.proc.kill()
            self.proc.wait()
        self.pending.clear()
        return EncoderError(
            f"an encoder process (pid {self.proc.pid}) died with exit code {self.proc.returncode}"
        )

    def _message(self) -> dict[str, Any]:
        if not self.ready:
            self.wait_ready()
        try:
            return _recv(self.conn)
        except (EOFError, OSError):
            raise self._died() from None

    def close(self) -> None:
        self.conn.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class EncoderPool:
    """A rank's encoder processes, started ahead and reused by every checkpoint."""

    def __init__(self, repo: Repo, settings: Settings, count: int) -> None:
        self._init = {
            "repo": [
                str(p) if p is not None else None
                for p in (repo.worktree, repo.git_dir, repo.common_dir)
            ],
            "settings": dataclasses.asdict(settings),
        }
        self._procs: list[_Process] = []
        self.grow(count)

    def grow(self, count: int) -> None:
        """At least `count` live encoders (dead ones replaced)."""
        for dead in [p for p in self._procs if not p.alive()]:
            dead.close()
            self._procs.remove(dead)
        while len(self._procs) < count:
            self._procs.append(_Process(self._init))

    def wait_ready(self) -> None:
        """Return once every encoder has started (they start in the background)."""
        for p in self._procs:
            p.wait_ready()

    def run(
        self,
        chunks: Sequence[Chunk],
        count: int,
        done: Callable[[int, Result], None],
        encoded: Callable[[], None] = lambda: None,
    ) -> dict[str, float]:
        """Encode every chunk on `count` encoders, calling done(index, result) for each in the
        order they finish, then encoded() while the packs are being finished, and finish every
        pack. Raises EncoderError if any chunk failed, or what done() or encoded() raised, once
        every pack not finished yet is discarded. Returns the encoders' CPU seconds and peak
        private memory, and the seconds until the last chunk was encoded (`encode_s`) and
        until the last pack was finished (`finish_s`).

        An encoder finishes its pack as soon as nothing is left for it, while the others
        encode their last chunks, and all at once: a finish re-reads and hashes its pack and
        waits for the disk, and one after the other they took longer than the encoding (15
        encoders on an H200). A pack finished before another encoder fails holds objects no
        anchor references, which nothing looks up and gc removes."""
        began = time.perf_counter()
        self.grow(count)
        procs = self._procs[: max(1, min(count, len(chunks)))]
        failure = _encode(procs, chunks, done)
        encoded_at = time.perf_counter()
        report, failure = _finish(procs, failure, encoded)
        if failure is not None:
            raise failure
        report["encode_s"] = encoded_at - began
        report["finish_s"] = time.perf_counter() - began
        return report

    def close(self) -> None:
        for p in self._procs:
            p.close()
        self._procs = []


def _encode(
    procs: Sequence[_Process], chunks: Sequence[Chunk], done: Callable[[int, Result], None]
) -> BaseException | None:
    """Hand the chunks out (IN_FLIGHT an encoder) and take their results; tell each encoder
    to finish its pack once nothing is left for it. Returns the first failure, once every
    answer was read (the next checkpoint starts in step)."""
    todo = list(range(len(chunks)))[::-1]
    try:
        for p in procs:
            while todo and len(p.pending) < IN_FLIGHT:
                n = todo.pop()
                p.submit(n, chunks[n])
        by_conn = {p.conn: p for p in procs}
        while any(p.pending for p in procs):
            for conn in wait([p.conn for p in procs if p.pending]):
                p = by_conn[conn]
                n, result = p.receive()
                done(n, result)
                if todo:
                    m = todo.pop()
                    p.submit(m, chunks[m])
                elif not p.pending and p.used:
                    p.end(finish=True)
    except BaseException as exc:  # an encoder's failure, or the rank's own (then re-raised)
        for p in procs:
            with contextlib.suppress(EncoderError):
                p.drain()
        return exc
    return None


def _finish(
    procs: Sequence[_Process], failure: BaseException | None, encoded: Callable[[], None]
) -> tuple[dict[str, float], BaseException | None]:
    """Finish (or, after a failure, discard) the packs not ended yet, run encoded() while they
    finish, and read every encoder's report: their CPU seconds and peak private memory, and
    the first failure."""
    report = {"cpu_s": 0.0, "peak_anon": 0}
    for p in procs:
        if p.used:
            try:
                p.end(finish=failure is None)
            except EncoderError as exc:
                failure = failure or exc
    if failure is None:
        try:
            encoded()
        except BaseException as exc:  # the packs finish all the same; nothing refers to them
            failure = exc
    for p in procs:
        if p.ending:
            try:
                msg = p.ended()
                report["cpu_s"] += msg.get("cpu_s", 0.0)
                report["peak_anon"] += msg.get("peak_anon", 0)
            except EncoderError as exc:
                failure = failure or exc
    return report, failure


# -- the encoder process ---------------------------------------------------------------------


def _private() -> int:
    """Private memory this process holds now (RssAnon), in bytes (0 where /proc has no say)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


Message = tuple[dict[str, Any], bytes | None, bytes | None]  # header, chunk, previous sample


def _read(conn: Connection, inbox: queue.Queue[Message | None]) -> None:
    """Every message the rank sends, with its payloads, as soon as it is sent: the rank never
    waits to send while this process waits to send it a result (both pipes full)."""
    try:
        while True:
            msg = _recv(conn)
            inline = sample = None
            if "task" in msg:
                inline = conn.recv_bytes() if msg["place"] is None else None
                sample = conn.recv_bytes() if msg["previous"] is not None else None
            inbox.put((msg, inline, sample))
    except (EOFError, OSError):
        inbox.put(None)


def serve(conn: Connection) -> None:
    """Answer the rank's messages until it closes the socket."""
    os.nice(NICE)
    reuse_freed_chunks()  # every chunk's buffers are the size of the last one's: reuse them
    cores.limit(1)  # one core each: the rank runs as many encoders as it may use cores
    init = _recv(conn)["init"]
    worktree, git_dir, common_dir = init["repo"]
    repo = Repo(Path(worktree) if worktree else None, Path(git_dir), Path(common_dir))
    base_anon = _private()
    peak, cpu = 0, time.process_time()

    def measure() -> None:
        nonlocal peak
        peak = max(peak, _private() - base_anon)

    encoder = Encoder(repo, Settings(**init["settings"]), measure)
    mapped = Mapped()
    inbox: queue.Queue[Message | None] = queue.Queue()
    threading.Thread(target=_read, args=(conn, inbox), daemon=True).start()
    _send(conn, {"ready": True})
    while (item := inbox.get()) is not None:
        msg, inline, sample = item
        try:
            if "task" in msg:
                place, prev = msg["place"], msg["previous"]
                if place is None:
                    data = memoryview(inline)
                else:
                    path, ident, offset, length = place
                    data = mapped.view(Where(path, ident), offset, length)
                previous = None
                if prev is not None:
                    previous = Previous(bytes.fromhex(prev["hash"]), prev["depth"], sample)
                r = encoder.one(data, Task(msg["dtype"], previous, _raw(msg["start"])))
                del data, inline
                reply = {
                    "done": msg["task"],
                    "hash": r.content_hash.hex(),
                    "oid": _hex(r.oid),
                    "size": r.size,
                    "base": _hex(r.base),
                    "depth": r.depth,
                }
                _send(conn, reply, r.sample)
            elif "finish" in msg:
                encoder.end(keep=True)
                now = time.process_time()
                _send(conn, {"finished": True, "cpu_s": now - cpu, "peak_anon": peak})
                peak, cpu = 0, now
            elif "abort" in msg:
                encoder.end(keep=False)
                _send(conn, {"finished": True})
        except Exception as exc:  # the rank raises it, naming the checkpoint
            _send(conn, {"error": str(exc) or type(exc).__name__, "task": msg.get("task")})
    encoder.end(keep=False)  # the rank has gone


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the rank's to handle
    serve(Connection(int(argv[0])))
    return 0
