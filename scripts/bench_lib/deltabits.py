"""How much information each checkpoint's change holds: the ceiling for lossless deltas.

Between consecutive checkpoints a weight's bit pattern moves by d units in
the last place. Recording d exactly takes its bit length L = bit_length(
zigzag(d)) (0 when the weight did not change), coded at the entropy of L's
distribution, plus the L - 1 bits below the leading one, which for trained
weights are noise. The mean of that over all parameters estimates what any
coder of "the change since the previous checkpoint" needs; element bits
divided by it is the best ratio such a delta can reach.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from models import read_header

_WIDTH = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8}
_INT = {2: (np.int16, np.uint16), 4: (np.int32, np.uint32), 8: (np.int64, np.uint64)}


def _tensors(path: Path) -> dict[str, tuple[str, bytes]]:
    data = path.read_bytes()
    return {
        name: (
            info["dtype"],
            data[info["base"] + info["data_offsets"][0] : info["base"] + info["data_offsets"][1]],
        )
        for name, info in read_header(path).items()
    }


def change_bits(checkpoints: list[Path]) -> tuple[float, int]:
    """(estimated bits per parameter to record each change exactly, bits per element)."""
    lengths = np.zeros(66, dtype=np.int64)  # histogram of bit lengths of zigzag(d)
    width_bits = 0
    for older, newer in itertools.pairwise(checkpoints):
        before = _tensors(older)
        for name, (dtype, raw) in _tensors(newer).items():
            width = _WIDTH.get(dtype)
            if width is None or name not in before:
                continue
            signed, unsigned = _INT[width]
            d = (np.frombuffer(raw, unsigned) - np.frombuffer(before[name][1], unsigned)).view(
                signed
            )
            d = d.astype(np.int64)
            zigzag = (d << 1) ^ (d >> 63)
            _, length = np.frexp(zigzag.astype(np.float64))  # bit length for z > 0, 0 for z = 0
            lengths += np.bincount(length.ravel(), minlength=66)[:66]
            width_bits = 8 * width
    count = int(lengths.sum())
    if not count:
        return 0.0, width_bits
    p = lengths[lengths > 0] / count
    entropy_of_length = float(-(p * np.log2(p)).sum())
    low_bits = float((lengths[1:] * np.arange(0, 65)).sum()) / count
    return entropy_of_length + low_bits, width_bits
