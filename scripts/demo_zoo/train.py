"""Creation functions: how each model of the zoo is derived from its parents."""

import torch

from nets import MLP, fit


def finetune_a(base: MLP, lr: float = 0.05, steps: int = 30) -> MLP:
    """Hyper-parameters are keyword arguments: `git mgit query 'evaluate ... vary lr in
    [...]'` calls the function with each configuration."""
    return fit(base, seed=1, steps=steps, lr=lr)


def finetune_b(base: MLP, lr: float = 0.05, steps: int = 30) -> MLP:
    """Frozen body: only the head learns, so the body is shared with the base."""
    return fit(base, seed=2, steps=steps, freeze=("body.",), lr=lr)


def finetune_c(base: MLP, lr: float = 0.05, steps: int = 30) -> MLP:
    return fit(base, seed=3, steps=steps, lr=lr)


def specialise(parent: MLP) -> MLP:
    """A grandchild: fine-tune ft-a further on a related task."""
    return fit(parent, seed=4, steps=15)


def prune(base: MLP) -> dict[str, torch.Tensor]:
    """Zero the half of each weight matrix with the smallest magnitude."""
    state = {k: v.detach().clone() for k, v in base.state_dict().items()}
    for t in state.values():
        if t.dim() == 2:
            t[t.abs() < t.abs().median()] = 0
    return state
