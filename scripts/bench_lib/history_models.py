"""Checkpoint series of models of at least 64 MiB for the history section, trained for real.

Three regimes, one file per epoch plus one more (the checkpoint a pull brings):

- fp32 training from scratch: AdamW at lr 1e-3, every weight moves every epoch;
- bf16 fine-tuning: a briefly pretrained model fine-tuned at lr 5e-5 and
  saved as bf16, as Hugging Face checkpoints usually ship;
- fp32 fine-tuning with frozen layers: the input layer and the first two hidden
  layers frozen (about 70% of the weights), the rest fine-tuned at lr 5e-5.

MLPs on synthetic tasks labelled by a random teacher network (fresh inputs
every step), as training.py does for the storage core's series, only wider:
17.1M parameters (68 MB in fp32), 35.0M for bf16 (70 MB).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

IN, CLASSES, BATCH = 512, 16, 128
FP32_HIDDEN, BF16_HIDDEN, DEPTH = 2304, 3328, 4
PRETRAIN_STEPS, STEPS_PER_EPOCH = 8, 2
SERIES = ("fp32 training from scratch", "bf16 fine-tuning", "fp32 fine-tuning, frozen layers")


def _mlp(hidden: int) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(IN, hidden), nn.GELU()]
    for _ in range(DEPTH - 1):
        layers += [nn.Linear(hidden, hidden), nn.GELU()]
    layers.append(nn.Linear(hidden, CLASSES))
    return nn.Sequential(*layers)


def _steps(model: nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator, n: int) -> None:
    teacher = torch.randn(IN, CLASSES, generator=torch.Generator().manual_seed(7))
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(n):
        x = torch.randn(BATCH, IN, generator=gen)
        loss = loss_fn(model(x), (x @ teacher).argmax(dim=1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def series(label: str, out_dir: Path, epochs: int, seed: int = 0) -> Iterator[Path]:
    """Yield one checkpoint file per epoch (`epochs` of them), written as it is trained."""
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    gen = torch.Generator().manual_seed(seed)
    bf16 = label.startswith("bf16")
    model = _mlp(BF16_HIDDEN if bf16 else FP32_HIDDEN)
    lr = 1e-3
    if "fine-tuning" in label:
        _steps(model, torch.optim.AdamW(model.parameters(), lr=1e-3), gen, PRETRAIN_STEPS)
        lr = 5e-5
    if "frozen" in label:
        for layer in list(model)[:5]:  # input layer and two hidden layers (with activations)
            for p in layer.parameters():
                p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    for epoch in range(epochs):
        _steps(model, opt, gen, STEPS_PER_EPOCH)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if bf16:
            state = {k: v.to(torch.bfloat16) for k, v in state.items()}
        path = out_dir / f"{label.split()[0]}-{epoch:02d}.safetensors"
        save_file(state, str(path))
        yield path


def frozen_names(label: str) -> set[str]:
    """The tensors a series never changes (frozen layers)."""
    return (
        {f"{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")} if "frozen" in label else set()
    )
