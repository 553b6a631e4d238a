"""MLtuner's progress summarizer (paper 001, section 5.3.1): a loss trace -> label and speed.

The per-clock losses of a branch are noisy (each is one mini-batch), so the
trace is downsampled into K = 10 windows, each the mean of its points. With
the window means x~ and the windows' mean times t~:

    range = x~_K - x~_1                  (negative when the loss fell)
    noise = max(max_i (x~_{i+1} - x~_i), 0)   the largest step back up
    speed = max((-range - noise) / (t~_K - t~_1), 0)

A trace is *diverged* if any loss is not finite (NaN or infinity: training
overflowed), *converging* if range < 0 and noise < eps * |range| with
eps = 1/K (no window goes up by more than an even descent goes down per
window), and *unstable* otherwise: a longer trial may tell. K = 10 keeps
the chance that pure noise looks converging (ten falling windows) under 0.1%.
One guard MLtuner does not state: a fall smaller than FLAT times the loss
is rounding, not progress (a deterministic trace stuck in a cycle averages
to windows equal but for their last bits, with no noise to penalize them).
Pure python: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

K = 10
EPS = 1 / K
FLAT = 1e-6  # relative to the loss: a smaller fall is float rounding
CONVERGING, DIVERGED, UNSTABLE = "converging", "diverged", "unstable"


@dataclass(frozen=True)
class Summary:
    label: str
    speed: float  # loss per unit of time the trace fell, penalized by its noise; 0 unless falling
    range: float
    noise: float
    windows: tuple[float, ...]  # the downsampled trace (non-finite values kept as they are)


def downsample(values: Sequence[float], k: int = K) -> list[float]:
    """The means of k consecutive windows of (nearly) equal length."""
    n = len(values)
    if n < k:
        raise ValueError(f"a trace of {n} points cannot be split into {k} windows")
    bounds = [i * n // k for i in range(k + 1)]
    return [sum(values[a:b]) / (b - a) for a, b in pairwise(bounds)]


def summarize(losses: Sequence[float], times: Sequence[float] | None = None) -> Summary:
    """Label and speed of a trace; `times` (default: the clock index) is each point's time."""
    times = range(len(losses)) if times is None else times
    if not all(math.isfinite(x) for x in losses):  # may have stopped before K clocks
        windows = tuple(downsample(losses, min(K, len(losses))))
        return Summary(DIVERGED, 0.0, math.nan, math.nan, windows)
    windows = tuple(downsample(losses))
    spans = downsample(times)
    rise = windows[-1] - windows[0]
    noise = max(max(b - a for a, b in pairwise(windows)), 0.0)
    elapsed = spans[-1] - spans[0]
    speed = max(0.0, (-rise - noise) / elapsed) if elapsed > 0 else 0.0
    falling = rise < -FLAT * max(abs(x) for x in windows)
    label = CONVERGING if falling and noise < EPS * abs(rise) else UNSTABLE
    return Summary(label, speed, rise, noise, windows)
