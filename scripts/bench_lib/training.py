"""A series of real training checkpoints: what a user commits once per epoch.

An MLP of about 9M fp32 parameters learns a fixed-seed synthetic
classification task (fresh inputs every step, labelled by a random two-layer
teacher network, so the loss falls gradually instead of the data being
memorised) with AdamW at lr 1e-3, the textbook setting; `model.state_dict()` is saved with
safetensors after every epoch. Every weight moves every step, as in real
training, so consecutive checkpoints differ everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

IN, HIDDEN, CLASSES = 256, 2048, 16
BATCH, STEPS_PER_EPOCH = 256, 12


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


def train_series(out_dir: Path, epochs: int, seed: int = 0) -> tuple[list[Path], list[float]]:
    """Train for `epochs` short epochs; return one checkpoint per epoch and the losses."""
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    gen = torch.Generator().manual_seed(seed)
    teacher_in = torch.randn(IN, 4 * CLASSES, generator=gen)
    teacher_out = torch.randn(4 * CLASSES, CLASSES, generator=gen)
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    paths, losses = [], []
    for epoch in range(epochs):
        total = 0.0
        for _ in range(STEPS_PER_EPOCH):
            x = torch.randn(BATCH, IN, generator=gen)
            y = (torch.relu(x @ teacher_in) @ teacher_out).argmax(dim=1)
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        path = out_dir / f"epoch{epoch:02d}.safetensors"
        save_file(model.state_dict(), str(path))
        paths.append(path)
        losses.append(total / STEPS_PER_EPOCH)
    return paths, losses


def param_count() -> int:
    return sum(p.numel() for p in _model().parameters())
