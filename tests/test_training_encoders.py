"""A rank's encoder processes (runtime/training/encoders.py): what they store reads back exactly,
from a shared arena or through their pipe; a dead one fails the checkpoint and is replaced;
none outlives its rank."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import blake3
import numpy as np
import pytest

from git_mgit import config
from git_mgit.gitcmd import Repo, find_repo
from git_mgit.runtime.training import CheckpointError, sharedmem
from git_mgit.runtime.training.encoders import Chunk, EncoderPool
from git_mgit.runtime.training.encoding import Result, Task
from git_mgit.runtime.training.objects import Job, ObjectWriter
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.lookup import ANCHOR_PREFIX
from tests.gitsandbox import run_git

MIB = 1 << 20


def encoders_of(pid: int) -> list[int]:
    """The encoder processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == pid and b"git_mgit.runtime.training.encoders" in cmdline:
            found.append(int(entry))
    return found


def anchors(repo: Path) -> list[str]:
    out = run_git("for-each-ref", "--format=%(refname)", ANCHOR_PREFIX, cwd=repo).stdout
    return out.split()


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    run_git("init", "-q", str(tmp_path / "r"), cwd=tmp_path)
    return find_repo(tmp_path / "r")


def weights(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_chunks_from_a_shared_arena_and_through_the_pipe_read_back_exactly(repo: Repo) -> None:
    buf = sharedmem.make(4 * MIB)
    assert buf is not None  # Linux: memfds
    arena = np.frombuffer(buf.map, dtype=np.uint8)
    first = weights(0, MIB)
    arena[:] = first.view(np.uint8)
    view = memoryview(buf.map)
    small = weights(1, 1000)
    jobs = [
        Job(("f", "big", 0), view[: 2 * MIB], "F32", (buf.where, 0)),
        Job(("f", "big", 1), view[2 * MIB :], "F32", (buf.where, 2 * MIB)),
        Job(("f", "small", 0), memoryview(small.view(np.uint8)), "F32"),  # not in the arena
    ]
    writer = ObjectWriter(repo, config.load(repo), encoders=2)
    try:
        written = writer.write(jobs, 2)
        assert written.objects == 3 and written.anchor is not None
        assert written.cpu_s > 0 and written.peak_anon > 0
        # the next checkpoint: the weights moved a little, so the encoders write deltas
        arena[:] = (first + np.float32(1e-3) * weights(2, MIB)).view(np.uint8)
        again = writer.write(jobs, 2)
        store = ChunkStore(repo)
        for w in (written, again):
            for job in jobs:
                assert store.has(w.hashes[job.key])
        for job in jobs:  # what the arena holds now, byte for byte
            assert bytes(store.get_raw(again.hashes[job.key])) == bytes(job.data)
        bases = {store.chain_of(again.hashes[j.key])[0] for j in jobs[:2]}
        assert bases == {written.hashes[j.key] for j in jobs[:2]}  # deltas of the chunks before
        assert again.hashes[jobs[2].key] == written.hashes[jobs[2].key]  # unchanged: not stored
        assert again.objects == 2
        store.close()
    finally:
        writer.close()
    assert len(anchors(repo.worktree)) == 2


def test_deltas_are_of_the_keyframe_so_chains_stay_one_level_deep(repo: Repo) -> None:
    """Each checkpoint's chunk is a delta of the last one stored whole at its place, not of the
    last one written; a chunk that moved too far is stored whole and is the next keyframe."""
    drift = np.float32(1e-3) * weights(2, MIB)
    states = [weights(0, MIB) + k * drift for k in range(4)]
    states += [weights(9, MIB), weights(9, MIB) + drift]  # a new start, then a step from it
    writer = ObjectWriter(repo, config.load(repo), encoders=1)
    hashes = []
    try:
        for state in states:
            job = Job(("f", "t", 0), memoryview(state.view(np.uint8)), "F32")
            hashes.append(writer.write([job], 1).hashes[job.key])
    finally:
        writer.close()
    store = ChunkStore(repo)
    try:
        for h, state in zip(hashes, states, strict=True):
            assert bytes(store.get_raw(h)) == state.tobytes()
        chains = [store.chain_of(h) for h in hashes]
        assert chains[0][1] == 0 and chains[4][1] == 0  # stored whole
        assert [c[0] for c in chains[1:4]] == [hashes[0]] * 3  # all deltas of the first
        assert chains[5][0] == hashes[4]  # of the new keyframe
        assert max(c[1] for c in chains) == 1
    finally:
        store.close()


def kill(pids: list[int]) -> None:
    """SIGKILL each and return once each is dead (a zombie, or gone): a process tears its
    memory down before it exits, and on a busy machine one killed a moment after another
    was still alive when the pool looked (seen in CI: a write handed it chunks)."""
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                break
            if state in ("Z", "X"):
                break
            time.sleep(0.01)
        else:
            raise AssertionError(f"encoder {pid} still alive 30 s after SIGKILL")


def test_an_encoder_dying_mid_write_fails_it_and_dead_ones_are_replaced(repo: Repo) -> None:
    writer = ObjectWriter(repo, config.load(repo), encoders=2)
    data = weights(3, 4 * MIB).view(np.uint8)
    jobs = [Job(("f", "t", i), memoryview(data)[i * MIB : (i + 1) * MIB], "F32") for i in range(4)]
    try:
        writer.wait_ready()
        pids = encoders_of(os.getpid())
        assert len(pids) == 2
        for pid in pids:  # stopped: alive when the write starts, so it hands them chunks
            os.kill(pid, signal.SIGSTOP)
        failed: list[BaseException] = []

        def write() -> None:
            try:
                writer.write(jobs, 2)
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=write)
        thread.start()
        time.sleep(0.5)
        kill(pids)
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert len(failed) == 1 and isinstance(failed[0], CheckpointError)
        assert re.search(r"encoder process \(pid \d+\) died", str(failed[0])), failed[0]
        assert anchors(repo.worktree) == []  # nothing anchored: the failed write left no ref
        written = writer.write(jobs, 2)  # on new encoders
        assert written.objects == 4
        assert not set(encoders_of(os.getpid())) & set(pids)
        store = ChunkStore(repo)
        assert bytes(store.get_raw(written.hashes[("f", "t", 2)])) == bytes(jobs[2].data)
        store.close()
        kill(encoders_of(os.getpid()))  # between checkpoints: replaced before the next
        data[:] = weights(4, 4 * MIB).view(np.uint8)
        assert writer.write(jobs, 2).objects == 4
    finally:
        writer.close()
    assert encoders_of(os.getpid()) == []


def test_encoders_leave_when_their_rank_is_killed(repo: Repo) -> None:
    rank = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from git_mgit import config\n"
            "from git_mgit.gitcmd import find_repo\n"
            "from git_mgit.runtime.training.objects import ObjectWriter\n"
            "repo = find_repo(sys.argv[1])\n"
            "w = ObjectWriter(repo, config.load(repo), encoders=3)\n"
            "w.wait_ready()\n"
            "print('ready', flush=True)\n"
            "time.sleep(600)\n",
            str(repo.worktree),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert rank.stdout is not None and rank.stdout.readline() == "ready\n"
        pids = encoders_of(rank.pid)
        assert len(pids) == 3
        rank.kill()  # no clean-up runs in the rank: its encoders see their socket close
        rank.wait()
        deadline = time.monotonic() + 20
        while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = [p for p in pids if Path(f"/proc/{p}").exists()]
        # a zombie (exited, its parent gone) is reaped by init; only a running one is a leak
        running = [p for p in alive if Path(f"/proc/{p}/stat").read_text().split(") ")[1][0] != "Z"]
        assert running == []
    finally:
        if rank.poll() is None:
            rank.kill()


@pytest.mark.parametrize("at", [1, 4])
def test_a_failure_in_the_rank_midway_leaves_the_encoders_in_step(repo: Repo, at: int) -> None:
    """The rank's own error while results come in (here from the callback, at the first
    result or the last, once an idle encoder was told to finish its pack) discards the
    checkpoint's packs not finished and reads every answer, so the next checkpoint's results
    are its own."""
    pool = EncoderPool(repo, config.load(repo), 2)
    data = weights(5, 2 * MIB).view(np.uint8)
    chunks = [
        Chunk(memoryview(data)[i * MIB // 2 : (i + 1) * MIB // 2], Task("F32", None, None))
        for i in range(4)
    ]
    seen = []

    def refuse(n: int, result: Result) -> None:
        seen.append(n)
        if len(seen) == at:
            raise RuntimeError("the rank gave up")

    try:
        with pytest.raises(RuntimeError, match="gave up"):
            pool.run(chunks, 2, refuse)
        got: dict[int, Result] = {}
        pool.run(chunks, 2, got.__setitem__)
        for n, chunk in enumerate(chunks):  # each answer is its own chunk's, its object stored
            assert got[n].content_hash == blake3.blake3(chunk.data).digest()
            assert got[n].oid is not None
            run_git("cat-file", "-e", got[n].oid.hex(), cwd=repo.worktree)
    finally:
        pool.close()
