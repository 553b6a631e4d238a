"""Training state as safetensors and back: optimizer, scheduler and RNG states continue bit-identically.

No git and no process group here: a checkpoint is planned into files,
serialized with safetensors (as git-mgit stores them), read back, and
restored into fresh objects; both copies then train on and must agree bit
for bit.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from git_mgit.runtime.training import layout, rng, state, structure
from git_mgit.runtime.training.distributed import World, pack, unpack
from git_mgit.runtime.training.layout import Info, Position, Snapshot
from git_mgit.runtime.training.resume import Resume, restore

WORLD = World()


def make(opt: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 3))
    if opt == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.95))
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=40)
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, steps: int) -> list[float]:
    """Steps that draw from torch (dropout, data), numpy and random: every generator matters."""
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 6) + float(np.random.normal()) + random.random()
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def through_files(snapshot: Snapshot) -> Snapshot:
    """The snapshot after plan(), safetensors bytes, and unplan(): what a commit would hold."""
    files, _ = layout.plan(snapshot, shards=1)
    read = {f.path: (st_load(st_save(f.tensors, f.metadata)), f.metadata) for f in files}
    model = read[layout.model_path(snapshot.info.run, False)][0]
    training, meta = read[layout.training_path(snapshot.info.run)]
    return layout.unplan(model, training, meta)


def take(model, optimizer, scheduler, position: Position | None = None) -> Snapshot:
    captured = state.capture(model, optimizer, scheduler, WORLD)
    copy = {k: v.clone() for k, v in captured.training.items()}
    info = Info("t", position or Position(step=3, global_step=3), metrics={"loss": 1.0})
    model_copy = {k: v.clone() for k, v in captured.model.items()}
    return Snapshot(info, model_copy, copy, captured.skeletons, [rng.capture()])


@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_restored_state_continues_bit_identically(opt: str) -> None:
    np.random.seed(1)
    random.seed(2)
    model, optimizer, scheduler = make(opt)
    train(model, optimizer, scheduler, 5)
    snapshot = through_files(take(model, optimizer, scheduler))
    expected = train(model, optimizer, scheduler, 7)

    np.random.seed(99)  # a fresh process: every generator somewhere else
    random.seed(99)
    torch.manual_seed(99)
    model2, optimizer2, scheduler2 = make(opt)
    restore(
        Resume("c" * 40, "m" * 40, snapshot.info, snapshot), model2, optimizer2, scheduler2, WORLD
    )
    assert train(model2, optimizer2, scheduler2, 7) == expected
    for a, b in zip(model.state_dict().values(), model2.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert scheduler.state_dict() == scheduler2.state_dict()
    sd1, sd2 = optimizer.state_dict(), optimizer2.state_dict()
    assert sd1["param_groups"] == sd2["param_groups"]
    for i, s in sd1["state"].items():
        for k, v in s.items():
            assert torch.equal(v, sd2["state"][i][k]), (i, k)


def test_optimizer_state_is_stored_by_parameter_name() -> None:
    model, optimizer, scheduler = make("adam")
    train(model, optimizer, scheduler, 1)
    captured = state.capture(model, optimizer, scheduler, WORLD)
    assert "optimizer/state/0.weight/exp_avg" in captured.training
    assert captured.skeletons["optimizer"]["param_groups"][0]["params"] == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    ]
    assert set(captured.model) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_checkpoint_before_the_first_step_keeps_adam_step_count() -> None:
    """An empty optimizer state restores only the settings (DCP would take a zero step)."""
    model, optimizer, scheduler = make("adam")
    snapshot = through_files(take(model, optimizer, scheduler))
    model2, optimizer2, scheduler2 = make("adam")
    optimizer2.param_groups[0]["lr"] = 123.0
    restore(
        Resume("c" * 40, "m" * 40, snapshot.info, snapshot), model2, optimizer2, scheduler2, WORLD
    )
    assert not optimizer2.state
    assert optimizer2.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]


def test_rng_states_round_trip_through_tensors() -> None:
    torch.manual_seed(5)
    np.random.seed(5)
    random.seed(5)
    np.random.normal()  # a cached Gaussian in numpy's state
    random.gauss(0, 1)  # and in Python's
    fields, tensors = rng.capture()
    packed_fields, packed = unpack(pack(tensors, {"f": layout.canonical(fields)}))
    draws = (torch.rand(3), np.random.normal(size=3), [random.gauss(0, 1) for _ in range(3)])
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rng.restore(json.loads(packed["f"]), packed_fields)
    again = (torch.rand(3), np.random.normal(size=3), [random.gauss(0, 1) for _ in range(3)])
    assert torch.equal(draws[0], again[0])
    assert np.array_equal(draws[1], again[1])
    assert draws[2] == again[2]
    assert all(t.dtype in (torch.uint8, torch.int64) for t in tensors.values())


def test_structure_round_trip_is_exact() -> None:
    value = {
        "ints": {3: (1, 2.5), 7: [None, True, "x"]},
        "floats": [math.nan, math.inf, -0.0, 0.1 + 0.2, 1e-310],
        "tensor": torch.arange(4),
        "nested": {"a/b": {"$weird": torch.ones(2, dtype=torch.bfloat16)}},
    }
    skeleton, tensors = structure.flatten(value, "scheduler")
    assert set(tensors) == {"scheduler/tensor", "scheduler/nested/a%2Fb/$weird"}
    back = structure.unflatten(json.loads(structure.dumps(skeleton)), tensors)
    assert back["ints"] == {3: (1, 2.5), 7: [None, True, "x"]}
    floats = back["floats"]
    assert math.isnan(floats[0]) and floats[1:] == [math.inf, -0.0, 0.1 + 0.2, 1e-310]
    assert math.copysign(1, floats[2]) == -1
    assert back["tensor"] is value["tensor"]


def test_structure_refuses_what_needs_pickle() -> None:
    with pytest.raises(structure.StructureError, match=r"cannot store function at optimizer/fn"):
        structure.flatten({"fn": lambda: 0}, "optimizer")


def test_position_says_where_training_resumes() -> None:
    assert Position(epoch=1, step=8, end_of_epoch=True).resume_at() == (2, 0)
    assert Position(epoch=1, step=3).resume_at() == (1, 3)
    assert layout.shard_names(["a", "b", "c", "d"], {"a": 1, "b": 1, "c": 1, "d": 1}, 2) == [
        ["a", "b"],
        ["c", "d"],
    ]
    assert layout.shard_names(["a"], {"a": 0}, 4) == [["a"]]
