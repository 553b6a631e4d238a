"""Registered tests: each takes a model and returns metrics; mgit.toml holds the pass conditions."""

import torch

from nets import MLP, task


def accuracy(model: MLP) -> dict[str, float]:
    x, y = task(seed=0)
    return {"accuracy": (model(x).argmax(1) == y).float().mean().item()}


def fp16_finite(model: MLP) -> dict[str, float]:
    """Serving runs in float16: activations must not overflow (MGit's T5 NaN bug)."""
    x, _ = task(seed=0)
    out = model.half()(x.half() * 8)
    return {"finite": float(torch.isfinite(out).all())}
