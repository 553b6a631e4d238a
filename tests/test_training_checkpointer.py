"""The Checkpointer in one process: modes, back-pressure, errors, the loop helpers, resuming mid-epoch.

The commit step is a plain function here (collecting snapshots, blocking,
failing), so what is tested is the checkpointer's own behaviour; the
tests in test_training_run.py commit to real repositories.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from git_mgit.resources import cores
from git_mgit.runtime.loading import TORCH_DTYPES
from git_mgit.runtime.training import Checkpointer, fit, layout, staging
from git_mgit.runtime.training.committing import Taken
from git_mgit.runtime.training.distributed import World
from git_mgit.runtime.training.layout import CheckpointError, Info, Position, Snapshot
from git_mgit.runtime.training.resume import Resume

INFO = Info("unit", Position())


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.Dropout(0.25), torch.nn.Linear(6, 2)
    )
    return model, torch.optim.AdamW(model.parameters(), lr=0.02)


class Augmented(TensorDataset):
    """Random noise per sample, drawn where the loader runs it: a worker seeds it from the
    loader's base seed, which the main process draws when the iterator is made."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super().__getitem__(i)
        return x + 0.1 * torch.rand(x.shape), y


def loader(workers: int = 0) -> DataLoader:
    x = torch.randn(40, 4, generator=torch.Generator().manual_seed(1))
    data = Augmented(x, (x[:, 0] > 0).long())
    sampler = DistributedSampler(data, num_replicas=1, rank=0, seed=7)
    return DataLoader(data, batch_size=5, sampler=sampler, num_workers=workers)


def step_fn(model, optimizer):
    def train_step(batch) -> dict:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return {"loss": loss}

    return train_step


def snapshot_of(taken: Taken) -> Snapshot:
    """What a rank of a world of one took, as whole tensors (read from its staged copies)."""
    tensors = {}
    for name, e in taken.plan.entries.items():
        data = bytearray(taken.entry_bytes(name, 0, e.nbytes)) if e.nbytes else bytearray(1)
        flat = torch.frombuffer(data, dtype=torch.uint8)[: e.nbytes]
        tensors[name] = flat.view(TORCH_DTYPES[e.dtype]).reshape(e.shape)
    model = {n[len("model/") :]: t for n, t in tensors.items() if n.startswith("model/")}
    training = {n: t for n, t in tensors.items() if not n.startswith("model/")}
    epoch = [taken.rng_epoch] if taken.rng_epoch is not None else None
    return Snapshot(taken.info, model, training, taken.skeletons, [taken.rng], epoch)


def checkpointer(model, optimizer, commit=None, **options) -> Checkpointer:
    """A checkpointer in a world of one whose `commit(snapshot)` gets whole tensors."""
    took = None if commit is None else (lambda taken: commit(snapshot_of(taken)))
    return Checkpointer(model, optimizer, info=INFO, commit=took, world=World(), **options)


def test_background_mode_waits_for_a_slot_and_snapshots_are_copies() -> None:
    model, optimizer = model_and_optimizer()
    release = threading.Event()
    committed: list[Snapshot] = []

    def slow_commit(snapshot: Snapshot) -> str:
        release.wait(10)
        committed.append(snapshot)
        return "c"

    ckpt = checkpointer(model, optimizer, slow_commit, mode="background", max_pending=1)
    ckpt.save(epoch=0, step=1)  # staged, committing in the background
    before = model[0].weight.detach().clone()
    with torch.no_grad():
        model[0].weight.add_(1.0)  # the loop goes on changing the live state
    second = threading.Thread(target=ckpt.save, kwargs={"epoch": 0, "step": 2})
    second.start()
    second.join(0.5)
    assert second.is_alive(), "a second checkpoint must wait while one is pending (max_pending=1)"
    assert committed == []
    release.set()
    second.join(10)
    ckpt.close()
    assert [s.info.position.step for s in committed] == [1, 2]
    assert torch.equal(committed[0].model["0.weight"], before)
    assert torch.equal(committed[1].model["0.weight"], before + 1.0)
    assert ckpt.commits == ["c", "c"]


def test_a_background_failure_surfaces_on_the_next_call_and_at_close() -> None:
    model, optimizer = model_and_optimizer()
    calls: list[int] = []

    def failing(snapshot: Snapshot) -> None:
        calls.append(snapshot.info.position.step)
        raise OSError("No space left on device")

    ckpt = checkpointer(model, optimizer, failing, mode="background")
    ckpt.save(epoch=0, step=1)
    with pytest.raises(
        CheckpointError, match=r"epoch 0 step 1 .* failed: OSError: No space"
    ) as err:
        ckpt.save(epoch=0, step=2)
    assert isinstance(err.value.__cause__, OSError)
    with pytest.raises(CheckpointError, match="No space"):
        ckpt.close()
    assert calls == [1]  # nothing after a failure: the run branch must not get a hole


def test_sync_mode_commits_in_the_call_and_raises_there() -> None:
    model, optimizer = model_and_optimizer()
    seen: list[int] = []

    def commit(snapshot: Snapshot) -> None:
        seen.append(snapshot.info.position.global_step)
        if len(seen) == 2:
            raise ValueError("bad ref")

    ckpt = checkpointer(model, optimizer, commit, mode="sync", every=2)
    train_step = step_fn(model, optimizer)
    batches = iter(loader())
    for _ in range(3):
        ckpt.step(train_step(next(batches)))
    assert seen == [2]
    with pytest.raises(CheckpointError, match=r"global step 4.*ValueError: bad ref"):
        ckpt.step(train_step(next(batches)))


def test_off_mode_tracks_the_position_and_commits_nothing() -> None:
    model, optimizer = model_and_optimizer()
    ckpt = checkpointer(model, optimizer, mode="off", every=1)
    fit(ckpt, loader(), step_fn(model, optimizer), epochs=2)
    assert ckpt.position == Position(
        epoch=1, step=8, global_step=16, end_of_epoch=True, sampler_seed=7, sampler_epoch=1
    )
    assert ckpt.commits == []


def recording(
    every: int,
) -> tuple[torch.nn.Module, torch.optim.Optimizer, Checkpointer, list[Position]]:
    """A sync checkpointer every `every` steps whose commits record their positions in order."""
    model, optimizer = model_and_optimizer()
    got: list[Position] = []
    ckpt = checkpointer(
        model, optimizer, lambda s: got.append(s.info.position), mode="sync", every=every
    )
    return model, optimizer, ckpt, got


def test_fit_checkpoints_every_n_steps_and_each_epoch_end() -> None:
    model, optimizer, ckpt, got = recording(every=3)
    fit(ckpt, loader(), step_fn(model, optimizer), epochs=2)
    assert [(p.epoch, p.step, p.end_of_epoch) for p in got] == [
        (0, 3, False),
        (0, 6, False),
        (0, 8, True),
        (1, 1, False),
        (1, 4, False),
        (1, 7, False),
        (1, 8, True),
    ]
    assert all(isinstance(p.global_step, int) for p in got)


def test_an_every_n_checkpoint_on_an_epochs_last_batch_is_the_epoch_end_save() -> None:
    """The loader has 8 batches and every=4: the 8th batch's checkpoint would hold the same
    weights as the save() right after it, so that save takes it and restarts the count."""
    model, optimizer, ckpt, got = recording(every=4)
    fit(ckpt, loader(), step_fn(model, optimizer), epochs=2)
    assert [(p.epoch, p.step, p.end_of_epoch) for p in got] == [
        (0, 4, False),
        (0, 8, True),
        (1, 4, False),
        (1, 8, True),
    ]


def test_a_deferred_checkpoint_is_taken_by_the_next_step_when_no_save_ends_the_epoch() -> None:
    model, optimizer, ckpt, got = recording(every=4)
    train_step = step_fn(model, optimizer)
    for _ in ckpt.epochs(2):
        for batch in ckpt.batches(loader()):
            ckpt.step(train_step(batch))
    ckpt.close()
    assert [(p.epoch, p.step, p.global_step) for p in got] == [(0, 4, 4), (1, 1, 9), (1, 5, 13)]


def steps(ckpt: Checkpointer, model, optimizer, iterations: int, pause: float = 0.0) -> None:
    """A loop of tiny iterations calling step() after each, then close().

    `pause` makes each iteration last at least that long, so how many of them a
    commit overlaps does not hang on how busy the machine is.
    """
    x = torch.randn(8, 4)
    for _ in range(iterations):
        model(x).sum().backward()
        optimizer.step()
        time.sleep(pause)
        ckpt.step()
    ckpt.close()


def test_adaptive_mode_backs_off_when_checkpoints_cost_more_than_steps(monkeypatch) -> None:
    made = threading.Event()
    make = staging.Stager._make

    def signalled(self: staging.Stager, nbytes: int, count: int) -> None:
        make(self, nbytes, count)
        made.set()

    monkeypatch.setattr(staging.Stager, "_make", signalled)
    model, optimizer = model_and_optimizer()
    times: list[int] = []

    def slow(snapshot: Snapshot) -> None:
        time.sleep(0.02)  # a commit far slower than a step: the loop would wait on it
        times.append(snapshot.info.position.global_step)

    ckpt = checkpointer(model, optimizer, slow, mode="adaptive")
    # its host buffer is made in the background: on a busy machine only after a few steps,
    # which then go unsaved (the test below); here the loop starts once it exists
    assert made.wait(30)
    steps(ckpt, model, optimizer, 300)
    assert times[0] == 1  # the first iteration is checkpointed, to measure M
    assert ckpt.period.k == len(times) < 100  # then far from every iteration


def test_adaptive_mode_measures_its_first_checkpoint_once_the_arena_exists(monkeypatch) -> None:
    """The first checkpoint measures what one costs the loop. Taken while its host buffer is
    still being made (on a GPU, pinning gigabytes takes longer than a step), the loop would
    wait for the allocation and M would count it; iterations go on instead, and the first
    after the buffer exists is checkpointed."""
    made = threading.Event()
    allocate = staging.Stager._allocate

    def slow_allocate(self: staging.Stager, nbytes: int) -> staging.Arena:
        time.sleep(0.3)  # the allocation a GPU's pinning takes, at this model's size
        arena = allocate(self, nbytes)
        made.set()
        return arena

    monkeypatch.setattr(staging.Stager, "_allocate", slow_allocate)
    model, optimizer = model_and_optimizer()
    times: list[int] = []
    ckpt = checkpointer(
        model, optimizer, lambda s: times.append(s.info.position.global_step), mode="adaptive"
    )
    x = torch.randn(8, 4)
    seen = 0  # the iteration after which the arena was first seen made
    for _ in range(150):
        model(x).sum().backward()
        optimizer.step()
        time.sleep(0.005)
        ckpt.step()
        if made.is_set() and not seen:
            seen = ckpt.period.n
    ckpt.close()
    assert seen > 1 and times, (seen, times)
    assert times[0] >= seen  # not before: the loop never waited for the arena


def test_adaptive_mode_decides_only_once_the_commit_before_is_done() -> None:
    """A commit's cost to the loop is known only when it ends: no checkpoint is taken (or
    waited for) while one is still committing."""
    model, optimizer = model_and_optimizer()
    taken: list[int] = []
    ended: list[int] = []  # the loop's iteration count when each commit ended

    def slow(snapshot: Snapshot) -> None:
        taken.append(snapshot.info.position.global_step)
        time.sleep(0.02)
        ended.append(ckpt.period.n)

    ckpt = checkpointer(model, optimizer, slow, mode="adaptive", eps=0.9)
    steps(ckpt, model, optimizer, 200, pause=0.001)  # a commit spans ~20 iterations
    assert len(taken) > 2
    assert all(later > end for later, end in zip(taken[1:], ended, strict=False))
    assert ckpt.period.overlapped_n > 0  # the iterations beside a commit were told apart


def test_background_commits_get_the_cores_torch_does_not_use() -> None:
    model, optimizer = model_and_optimizer()
    ckpt = checkpointer(model, optimizer, lambda s: None, mode="background")
    assert cores.available() == max(1, (os.cpu_count() or 1) - torch.get_num_threads())
    ckpt.close()
    assert cores.available() == (os.cpu_count() or 1)  # put back


def _through_files(snapshot: Snapshot) -> Snapshot:
    files, _ = layout.plan(snapshot, shards=1)
    read = {f.path: (st_load(st_save(f.tensors, f.metadata)), f.metadata) for f in files}
    model = read[layout.model_path(snapshot.info.run, False)][0]
    return layout.unplan(model, *read[layout.training_path(snapshot.info.run)])


@pytest.mark.parametrize("workers", [0, 2])
def test_resuming_mid_epoch_skips_done_batches_and_matches(workers: int) -> None:
    """A checkpoint at step 5 of epoch 1, resumed: same batches, same dropout, same result."""
    model, optimizer = model_and_optimizer()
    snaps: list[Snapshot] = []
    ckpt = checkpointer(model, optimizer, snaps.append, mode="sync", every=13)
    fit(ckpt, loader(workers), step_fn(model, optimizer), epochs=3)
    mid = next(s for s in snaps if not s.info.position.end_of_epoch)
    assert (mid.info.position.epoch, mid.info.position.step) == (1, 5)

    torch.manual_seed(123)
    model2, optimizer2 = model_and_optimizer()
    snap = _through_files(mid)
    resumed = checkpointer(
        model2, optimizer2, mode="off", resume=Resume("c" * 40, "m" * 40, snap.info, snap)
    )
    assert resumed.epochs(3).__next__() == 1
    fit(resumed, loader(workers), step_fn(model2, optimizer2), epochs=3)
    for name, t in model.state_dict().items():
        assert torch.equal(t, model2.state_dict()[name]), name


def test_unknown_mode_and_bad_options_are_one_line_errors() -> None:
    model, optimizer = model_and_optimizer()
    with pytest.raises(CheckpointError, match="unknown checkpoint mode 'fast'"):
        checkpointer(model, optimizer, mode="fast")
    with pytest.raises(CheckpointError, match="needs somewhere to commit"):
        checkpointer(model, optimizer, mode="sync")
    with pytest.raises(CheckpointError, match="every must be a positive"):
        checkpointer(model, optimizer, lambda s: None, every=0)


def test_a_loop_without_the_helpers_still_tracks_epochs() -> None:
    """batches() alone, or nothing but step() and save(end_of_epoch=True)."""
    model, optimizer = model_and_optimizer()
    got: list[Position] = []
    ckpt = checkpointer(model, optimizer, lambda s: got.append(s.info.position), mode="sync")
    train_step = step_fn(model, optimizer)
    for _ in range(2):
        for batch in ckpt.batches(loader()):
            ckpt.step(train_step(batch))
        ckpt.save()
    for batch in loader():
        ckpt.step(train_step(batch))
    ckpt.save(end_of_epoch=True)
    assert [(p.epoch, p.step, p.global_step, p.end_of_epoch) for p in got] == [
        (0, 8, 8, True),
        (1, 8, 16, True),
        (2, 8, 24, True),
    ]
    assert [p.sampler_epoch for p in got] == [0, 1, 1]  # the last loop never told the sampler
