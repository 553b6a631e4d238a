"""Creation functions: how each model of the zoo is derived from its parents."""

import torch

from nets import MLP, fit


def finetune_a(base: MLP) -> MLP:
    return fit(base, seed=1)


def finetune_b(base: MLP) -> MLP:
    """Frozen body: only the head learns, so the body is shared with the base."""
    return fit(base, seed=2, freeze=("body.",))


def finetune_c(base: MLP) -> MLP:
    return fit(base, seed=3)


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
