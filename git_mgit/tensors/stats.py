"""Summary statistics of a tensor, streamed: what `git diff` shows per tensor (diff.mgit.textconv).

Values arrive as bytes in any pieces; they are regrouped into fixed windows
of WINDOW elements from the tensor's start and folded window by window, so
the same bytes always give the same figures to the last digit, whether they
come from stored objects or from a file in the working tree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from git_mgit.tensors.numerics import WINDOW, element_width, to_float64


@dataclass
class Stats:
    dtype: str
    count: int = 0  # finite values
    nan: int = 0
    inf: int = 0
    total: float = 0.0
    squares: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def _fold(self, raw: bytes | bytearray | memoryview) -> None:
        x = to_float64(self.dtype, raw)
        if x is None:
            return
        if np.iscomplexobj(x):
            x = np.abs(x)
        finite = np.isfinite(x)
        self.nan += int(np.count_nonzero(np.isnan(x)))
        self.inf += int(np.count_nonzero(np.isinf(x)))
        v = x[finite]
        if v.size:
            self.count += v.size
            self.total += float(v.sum())
            self.squares += float(np.dot(v, v))
            self.low, self.high = min(self.low, float(v.min())), max(self.high, float(v.max()))

    def describe(self) -> str:
        if self.count == 0 and not (self.nan or self.inf):
            return "empty" if element_width(self.dtype) else "(packed: no figures)"
        parts = []
        if self.count:
            mean = self.total / self.count
            var = max(self.squares / self.count - mean * mean, 0.0)
            parts += [
                f"l2 {math.sqrt(self.squares):.6g}",
                f"mean {mean:.6g}",
                f"std {math.sqrt(var):.6g}",
                f"min {self.low:.6g}",
                f"max {self.high:.6g}",
            ]
        if self.nan:
            parts.append(f"nan {self.nan}")
        if self.inf:
            parts.append(f"inf {self.inf}")
        return "  ".join(parts)


class Collector:
    """Feed a tensor's bytes in any pieces; read the Stats when done.

    `fold` replaces Stats' own, for a caller that wants other figures of the same
    windows (each a whole number of values).
    """

    def __init__(
        self, dtype: str, fold: Callable[[bytes | bytearray | memoryview], None] | None = None
    ) -> None:
        self.stats = Stats(dtype)
        self._fold = fold or self.stats._fold
        width = element_width(dtype) or 1
        self._window = WINDOW * width
        self._pending = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        if self._pending:
            take = min(len(view), self._window - len(self._pending))
            self._pending += view[:take]
            view = view[take:]
            if len(self._pending) == self._window:
                self._fold(self._pending)
                self._pending = bytearray()
        while len(view) >= self._window:
            self._fold(view[: self._window])
            view = view[self._window :]
        self._pending += view

    def finish(self) -> Stats:
        if self._pending:
            self._fold(self._pending)
            self._pending = bytearray()
        return self.stats


# IEEE formats: a value is finite unless its exponent bits are all ones (then an
# infinity if the rest is zero, else NaN): (unsigned view, the magnitude's bits, the
# exponent's bits).
_EXPONENT_BITS = {
    "F64": ("<u8", 0x7FFF_FFFF_FFFF_FFFF, 0x7FF0_0000_0000_0000),
    "F32": ("<u4", 0x7FFF_FFFF, 0x7F80_0000),
    "F16": ("<u2", 0x7FFF, 0x7C00),
    "BF16": ("<u2", 0x7FFF, 0x7F80),
}


def nonfinite(dtype: str, pieces: Iterable[bytes | bytearray | memoryview]) -> tuple[int, int]:
    """(NaN, infinite) counts of a tensor's values, as collect() gives them.

    The pre-commit check only needs these; for IEEE formats they are read from the
    bits with integer masks, with no float64 conversion (about 6x faster).
    """
    layout = _EXPONENT_BITS.get(dtype)
    if layout is None:
        stats = collect(dtype, pieces)
        return stats.nan, stats.inf
    kind, magnitude, exponent = layout
    counts = [0, 0]  # NaN, infinite

    def fold(raw: bytes | bytearray | memoryview) -> None:
        bits = np.frombuffer(raw, dtype=kind) & magnitude
        if np.count_nonzero(bits >= exponent):  # rare: count only then
            counts[0] += int(np.count_nonzero(bits > exponent))
            counts[1] += int(np.count_nonzero(bits == exponent))

    collector = Collector(dtype, fold)
    for piece in pieces:
        collector.feed(piece)
    collector.finish()
    return counts[0], counts[1]


def collect(dtype: str, pieces: Iterable[bytes | bytearray | memoryview]) -> Stats:
    """The statistics of a tensor whose bytes arrive as `pieces`."""
    collector = Collector(dtype)
    for piece in pieces:
        collector.feed(piece)
    return collector.finish()


def file_pieces(f: BinaryIO, offset: int, length: int, dtype: str) -> Iterator[bytes]:
    """The bytes [offset, offset + length) of an open file, a window of elements at a time."""
    f.seek(offset)
    step = WINDOW * (element_width(dtype) or 1)
    while length > 0:
        piece = f.read(min(step, length))
        if not piece:
            return
        length -= len(piece)
        yield piece
