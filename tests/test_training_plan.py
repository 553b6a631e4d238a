"""Which rank writes which chunk of a checkpoint (runtime/training/plan.py): no torch, no git.

The plan's promises: every chunk lies within the rows its writer holds (no
rank needs another's bytes, except the few small entries it assembles),
every byte of every entry is in exactly one chunk, and the ranks write
about equal shares.
"""

from __future__ import annotations

import pytest

from git_mgit.runtime.training import layout
from git_mgit.runtime.training.plan import (
    CHUNK_HINT,
    PIECES,
    SMALL,
    Entry,
    Holding,
    aligned_chunk,
    plan,
)

MIB = 1 << 20


def replicated(name: str, shape: tuple[int, ...], ranks: int, dtype: str = "F32") -> Entry:
    rows = shape[0] if shape else 1
    return Entry(name, dtype, shape, tuple(Holding(r, 0, rows) for r in range(ranks)))


def sharded(name: str, shape: tuple[int, ...], ranks: int, dtype: str = "F32") -> Entry:
    """Rows split as FSDP2 (torch.chunk) splits them: ceil(rows / ranks) each, the last fewer."""
    per = -(-shape[0] // ranks)
    holds = tuple(
        Holding(r, min(shape[0], r * per), min(shape[0], (r + 1) * per)) for r in range(ranks)
    )
    return Entry(name, dtype, shape, holds)


def check_tiling(made) -> None:
    """Each file's tensors are cut into consecutive chunks covering every byte once."""
    for f in made.files:
        for t in f.tensors:
            e = made.entries[t.entry]
            chunks = sorted(
                (c.lo, c.hi) for c in made.chunks if (c.file, c.tensor) == (f.path, t.name)
            )
            at = t.start * e.row_bytes
            for lo, hi in chunks:
                assert lo == at and hi - lo <= f.chunk_size
                at = hi
            assert at == t.stop * e.row_bytes


def check_writers_hold_their_chunks(made) -> None:
    for c in made.chunks:
        if c.entry in made.assembled:
            assert c.writer == made.assembled[c.entry]
        else:
            assert c.writer in made.entries[c.entry].holders(c.lo, c.hi), c


def test_ddp_state_is_split_among_the_ranks() -> None:
    entries = {
        e.name: e
        for e in [
            replicated("model/w1", (4096, 1024), 4),  # 16 MiB
            replicated("model/w2", (1024, 4096), 4),
            replicated("model/b", (1024,), 4),
            replicated("optimizer/state/w1/exp_avg", (4096, 1024), 4),
            replicated("optimizer/state/w1/step", (), 4),
        ]
    }
    made = plan(entries, 4, "r", "ddp", 4 * MIB)
    check_tiling(made)
    check_writers_hold_their_chunks(made)
    loads = made.loads(4)
    total = sum(e.nbytes for e in entries.values())
    assert sum(loads) == total
    assert max(loads) - min(loads) <= 4 * MIB  # at most one chunk apart
    assert [f.path for f in made.files] == [
        layout.model_path("r", False),
        layout.training_path("r"),
    ]


def test_fsdp_model_files_align_every_rank_boundary_to_a_chunk() -> None:
    ranks = 3
    entries = {
        e.name: e
        for e in [
            sharded("model/embed", (50257, 768), ranks),  # 16753 rows a rank: odd blocks
            sharded("model/qkv", (2304, 768), ranks),
            sharded("model/fc", (3072, 768), ranks),
            sharded("model/ln", (768,), ranks),  # small: assembled by one rank
            replicated("model/pos_ids", (1024,), ranks, "I64"),
            sharded("optimizer/state/fc/exp_avg", (3072, 768), ranks),
            sharded("optimizer/state/ln/exp_avg", (768,), ranks),
            replicated("optimizer/state/fc/step", (), ranks),
        ]
    }
    made = plan(entries, ranks, "r", "fsdp", 64 * MIB)
    check_tiling(made)
    check_writers_hold_their_chunks(made)
    assert set(made.assembled) == {"model/ln", "optimizer/state/ln/exp_avg"}
    folder = [f for f in made.files if f.path.startswith(layout.model_path("r", True) + "/")]
    by_tensor = {t.name: f for f in folder for t in f.tensors}
    assert len(folder) == 3  # embed / qkv / fc each need their own chunk size
    assert by_tensor["ln"] is by_tensor["pos_ids"]  # whole ones join a file
    assert by_tensor["embed"].metadata == {CHUNK_HINT: str(16753 * 768 * 4)}
    training = made.files[-1]
    assert PIECES in training.metadata
    names = {t.name for t in training.tensors}
    assert "optimizer/state/fc/exp_avg@0" in names and "optimizer/state/fc/exp_avg@1024" in names
    assert "optimizer/state/ln/exp_avg" in names and "optimizer/state/fc/step" in names
    loads = made.loads(ranks)
    assert max(loads) - min(loads) <= SMALL + 4 * 768 * 4  # a row block apiece, give or take


def test_replicas_of_a_block_share_its_writing() -> None:
    """HSDP: two replica groups of two shards; each block has two holders, one writes it."""
    holds = (Holding(0, 0, 512), Holding(1, 512, 1024), Holding(2, 0, 512), Holding(3, 512, 1024))
    e = Entry("model/w", "F32", (1024, 1024), holds)
    made = plan({e.name: e}, 4, "r", "fsdp", MIB)
    check_tiling(made)
    check_writers_hold_their_chunks(made)
    assert made.loads(4) == [MIB, MIB, MIB, MIB]


@pytest.mark.parametrize(
    ("block", "limit", "width", "chunk"),
    [(22 * MIB, 64 * MIB, 4, 22 * MIB), (96 * MIB, 64 * MIB, 4, 48 * MIB), (12, 8, 4, 4)],
)
def test_aligned_chunk_divides_the_block(block: int, limit: int, width: int, chunk: int) -> None:
    assert aligned_chunk(block, limit, width) == chunk
