"""Synthetic safetensors checkpoints shaped like a real model.

A byte-identical file on every run (fixed seeds), so results compare across
runs and machines. Weights are N(0, 0.02) like a freshly initialised
transformer: a 32000 x 1024 embedding (bigger than the default 64 MiB chunk in
fp32, so chunk splitting is exercised), then blocks of 2-16 MiB matrices with
small biases and norm vectors, and one last matrix that makes the tensor data
exactly the requested size. Models under 64M parameters (the --quick files)
get half the width and fewer embedding rows, so they still have several blocks.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import blake3
import torch
from safetensors.torch import save_file

HIDDEN = 1024
VOCAB = 32000
STD = 0.02
DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]


def layout(total_bytes: int, itemsize: int) -> list[TensorSpec]:
    """Tensor names and shapes whose data adds up to exactly total_bytes."""
    left = total_bytes // itemsize
    d = HIDDEN if left >= 64 << 20 else HIDDEN // 2
    block = [
        ("attn.q.weight", (d, d)),
        ("attn.k.weight", (d, d)),
        ("attn.v.weight", (d, d)),
        ("attn.o.weight", (d, d)),
        ("attn.o.bias", (d,)),
        ("norm1.weight", (d,)),
        ("norm1.bias", (d,)),
        ("mlp.up.weight", (4 * d, d)),
        ("mlp.up.bias", (4 * d,)),
        ("mlp.down.weight", (d, 4 * d)),
        ("mlp.down.bias", (d,)),
        ("norm2.weight", (d,)),
        ("norm2.bias", (d,)),
    ]
    block_elems = sum(_numel(shape) for _, shape in block)
    vocab = min(VOCAB, left // 4 // d)
    specs = [TensorSpec("embed.weight", (vocab, d))]
    left -= vocab * d
    i = 0
    while left >= block_elems + d:
        specs += [TensorSpec(f"blocks.{i}.{name}", shape) for name, shape in block]
        left -= block_elems
        i += 1
    specs.append(TensorSpec("final_norm.weight", (d,)))
    left -= d
    if left < 0:
        raise ValueError(f"{total_bytes} bytes cannot hold the embedding; ask for more")
    if left:
        rows, rest = divmod(left, d)
        specs.append(TensorSpec("head.weight", (rows, d)))
        if rest:
            specs.append(TensorSpec("head.bias", (rest,)))
    return specs


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def write_model(path: Path, total_bytes: int, dtype: str, seed: int = 0) -> None:
    """Write a safetensors file of N(0, 0.02) weights; deterministic for a seed.

    Vectors named like norm weights are ones, as a real initialisation has them.
    """
    torch_dtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for spec in layout(total_bytes, torch.empty((), dtype=torch_dtype).element_size()):
        if "norm" in spec.name and spec.name.endswith(".weight"):
            t = torch.ones(spec.shape)
        else:
            t = torch.randn(spec.shape, generator=gen) * STD
        tensors[spec.name] = t.to(torch_dtype)
    save_file(tensors, str(path), metadata={"format": "pt"})


def read_header(path: Path) -> dict[str, dict]:
    """The safetensors header: tensor name -> dtype, shape, data_offsets."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return {name: {**info, "base": 8 + n} for name, info in header.items()}


def perturb_tensor(path: Path, seed: int = 1) -> str:
    """Give one mid-sized matrix a small update in place (a fine-tuning step on one layer).

    Returns the tensor's name. Adds N(0, 2e-4) noise, about 1% of the weights'
    scale, so the new tensor shares sign and exponent with the old one almost
    everywhere, as a real update does. The file's layout is unchanged.
    """
    header = read_header(path)
    blocks = sorted(
        name for name in header if name.startswith("blocks.") and name.endswith("mlp.up.weight")
    )
    name = blocks[len(blocks) // 2]
    info = header[name]
    start, end = (info["base"] + off for off in info["data_offsets"])
    dtype = DTYPES[info["dtype"]]
    with path.open("r+b") as f:
        f.seek(start)
        raw = bytearray(f.read(end - start))
        t = torch.frombuffer(raw, dtype=dtype).float()
        gen = torch.Generator().manual_seed(seed)
        t += torch.randn(t.shape, generator=gen) * (STD / 100)
        f.seek(start)
        # numpy has no bf16: write the bytes through a uint8 view.
        f.write(t.to(dtype).view(torch.uint8).numpy().tobytes())
    return name


def file_hash(path: Path) -> str:
    """BLAKE3 of a file, to prove a checkout rebuilt it byte for byte."""
    h = blake3.blake3(max_threads=blake3.blake3.AUTO)
    with path.open("rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
    return h.hexdigest()
