"""Series of real training checkpoints: what a user commits once per epoch.

An MLP of about 9M parameters learns fixed-seed synthetic classification
tasks (fresh inputs every step, labelled by a random two-layer teacher
network, so the loss falls gradually instead of the data being memorised);
`model.state_dict()` is saved with safetensors after every epoch. Two regimes,
because how much of each weight changes between checkpoints decides what any
lossless delta can save:

- pretraining from scratch with AdamW at lr 1e-3: every weight moves by
  about a million units in the last place per epoch;
- fine-tuning: 60 steps of pretraining on one task, then AdamW at lr 5e-5
  (the usual fine-tuning range) on another, saved as fp32 and, as Hugging Face
  checkpoints usually ship, as bf16 from the same run.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

IN, HIDDEN, CLASSES = 256, 2048, 16
BATCH, STEPS_PER_EPOCH = 256, 12
PRETRAIN_STEPS, FINETUNE_LR = 60, 5e-5


def _model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(IN, HIDDEN),
        nn.GELU(),
        nn.LayerNorm(HIDDEN),
        nn.Linear(HIDDEN, HIDDEN),
        nn.GELU(),
        nn.LayerNorm(HIDDEN),
        nn.Linear(HIDDEN, HIDDEN),
        nn.GELU(),
        nn.Linear(HIDDEN, CLASSES),
    )


def _teacher(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(IN, 4 * CLASSES, generator=gen), torch.randn(
        4 * CLASSES, CLASSES, generator=gen
    )


def _train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    teacher: tuple[torch.Tensor, torch.Tensor],
    gen: torch.Generator,
    steps: int,
) -> float:
    """`steps` optimizer steps on fresh batches; returns the mean loss."""
    loss_fn = nn.CrossEntropyLoss()
    total = 0.0
    for _ in range(steps):
        x = torch.randn(BATCH, IN, generator=gen)
        y = (torch.relu(x @ teacher[0]) @ teacher[1]).argmax(dim=1)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    return total / steps


def _start(seed: int) -> tuple[nn.Module, torch.Generator]:
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    return _model(), torch.Generator().manual_seed(seed)


def train_series(out_dir: Path, epochs: int, seed: int = 0) -> tuple[list[Path], list[float]]:
    """Pretrain from scratch for `epochs` short epochs; one fp32 checkpoint per epoch and the losses."""
    model, gen = _start(seed)
    teacher = task_teacher(0)  # the task accuracy() measures, for the lossy table
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    paths, losses = [], []
    for epoch in range(epochs):
        losses.append(_train(model, opt, teacher, gen, STEPS_PER_EPOCH))
        path = out_dir / f"epoch{epoch:02d}.safetensors"
        save_file(model.state_dict(), str(path))
        paths.append(path)
    return paths, losses


def finetune_series(
    out_dir: Path, epochs: int, seed: int = 0
) -> tuple[dict[str, list[Path]], list[float]]:
    """Fine-tune a briefly pretrained model; per epoch an fp32 and a bf16 checkpoint, and the losses."""
    model, gen = _start(seed)
    _train(
        model, torch.optim.AdamW(model.parameters(), lr=1e-3), _teacher(gen), gen, PRETRAIN_STEPS
    )
    teacher = _teacher(gen)
    opt = torch.optim.AdamW(model.parameters(), lr=FINETUNE_LR)
    paths: dict[str, list[Path]] = {"F32": [], "BF16": []}
    losses = []
    for epoch in range(epochs):
        losses.append(_train(model, opt, teacher, gen, STEPS_PER_EPOCH))
        state = model.state_dict()
        for dtype, tensors in (
            ("F32", state),
            ("BF16", {k: v.to(torch.bfloat16) for k, v in state.items()}),
        ):
            path = out_dir / f"finetune-{dtype.lower()}-{epoch:02d}.safetensors"
            save_file(tensors, str(path))
            paths[dtype].append(path)
    return paths, losses


def param_count() -> int:
    return sum(p.numel() for p in _model().parameters())


def task_teacher(task: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The labelling network of task `task` (fixed by its number)."""
    return _teacher(torch.Generator().manual_seed(10_000 + task))


def accuracy(model: nn.Module, task: int, samples: int = 4096) -> float:
    """Accuracy on a fixed held-out set of task `task` (the same inputs every call)."""
    gen = torch.Generator().manual_seed(20_000 + task)
    x = torch.randn(samples, IN, generator=gen)
    teacher = task_teacher(task)
    y = (torch.relu(x @ teacher[0]) @ teacher[1]).argmax(dim=1)
    with torch.no_grad():
        return (model.eval()(x).argmax(dim=1) == y).float().mean().item()


def finetune_family(
    out_dir: Path, tunes: int, epochs: int, seed: int = 0
) -> tuple[Path, dict[str, list[Path]]]:
    """A base model pretrained on task 0, and `tunes` fine-tunes of it on tasks 1..tunes.

    Returns the base checkpoint and, per fine-tune name, its checkpoint after each epoch.
    """
    model, gen = _start(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _train(model, opt, task_teacher(0), gen, PRETRAIN_STEPS)
    base = out_dir / "base.safetensors"
    save_file(model.state_dict(), str(base))
    family: dict[str, list[Path]] = {}
    for k in range(1, tunes + 1):
        tuned = _model()
        tuned.load_state_dict(model.state_dict())
        opt = torch.optim.AdamW(tuned.parameters(), lr=FINETUNE_LR * 10)
        family[f"ft{k}"] = []
        for epoch in range(epochs):
            _train(tuned, opt, task_teacher(k), gen, STEPS_PER_EPOCH)
            path = out_dir / f"ft{k}-{epoch:02d}.safetensors"
            save_file(tuned.state_dict(), str(path))
            family[f"ft{k}"].append(path)
    return base, family


def load(path: Path) -> nn.Module:
    """A checkpoint back as the benchmark's model."""
    from safetensors.torch import load_file

    model = _model()
    model.load_state_dict(load_file(str(path)))
    return model
