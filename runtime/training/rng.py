"""One process's random number generators as tensors plus JSON, and back; never pickled.

Resuming bit-identically needs every generator the training code draws
from: torch's CPU generator (dropout, shuffling, initialisation), each CUDA
device's generator, numpy's global generator and Python's `random`. Their
states become: torch's as the uint8 tensors torch itself returns; numpy's
Mersenne Twister key and Python's as int64 tensors (a word is at most
2**32 - 1); the few scalars beside them (positions, a cached Gaussian) as
JSON, whose float text round-trips exactly.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

Tensors = dict[str, torch.Tensor]


def seed(value: int) -> None:
    """Seed torch, numpy's global generator and Python's `random` from one number."""
    torch.manual_seed(value)
    np.random.seed(value % 2**32)
    random.seed(value)


def capture() -> tuple[dict[str, Any], Tensors]:
    """(JSON fields, tensors) of every generator of this process, taken now."""
    tensors: Tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda/{i}"] = state
    kind, key, pos, has_gauss, cached = np.random.get_state()
    tensors["numpy"] = torch.from_numpy(np.asarray(key, dtype=np.int64))
    version, words, gauss_next = random.getstate()
    tensors["python"] = torch.tensor(words, dtype=torch.int64)
    fields = {
        "numpy": {"kind": kind, "pos": int(pos), "has_gauss": int(has_gauss), "cached": cached},
        "python": {"version": version, "gauss_next": gauss_next},
        "cuda_devices": sum(1 for k in tensors if k.startswith("cuda/")),
    }
    return fields, tensors


def restore(fields: dict[str, Any], tensors: Tensors) -> None:
    """Set every generator to what capture() returned (CUDA ones only if recorded)."""
    torch.set_rng_state(tensors["torch"].to(torch.uint8).cpu())
    cuda = [tensors[f"cuda/{i}"].to(torch.uint8).cpu() for i in range(fields["cuda_devices"])]
    if cuda:
        torch.cuda.set_rng_state_all(cuda)
    n = fields["numpy"]
    key = tensors["numpy"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], key, n["pos"], n["has_gauss"], n["cached"]))
    p = fields["python"]
    random.setstate((p["version"], tuple(int(w) for w in tensors["python"]), p["gauss_next"]))
