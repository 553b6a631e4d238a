"""The trade-off behind the published layout: remote size against what checkouts fetch.

    python scripts/bench_lib/layout_tradeoff.py [--checkpoints 20]

Trains the storage core's three series (training.py), encodes every
checkpoint whole and as a delta of its predecessor and of its successor with
git-mgit's codecs, and computes, for each layout, what the remote stores
(relative to the forward chains git-mgit published before version refs),
what a fresh clone fetches (the tip), what the oldest version fetches into
an empty clone, and the worst version's fetch, all as multiples of one
checkpoint's raw size. docs/storage.md ("Why this layout") quotes it.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
from pathlib import Path

import training

from git_mgit import codecs
from git_mgit.codecs import codec

SAVING = 0.9  # the codec keeps a delta only below this fraction of the standalone size


def _tensors(path: Path) -> dict[str, tuple[str, bytes]]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    return {
        k: (v["dtype"], body[v["data_offsets"][0] : v["data_offsets"][1]])
        for k, v in header.items()
    }


def _size(raw: bytes, dtype: str, base: bytes | None = None) -> int:
    b = codecs.Base(base, b"\0" * 32, 0) if base is not None else None
    return codec.encode(raw, dtype, b"\0" * 32, b, max_depth=255).size


def measure(paths: list[Path]) -> dict[str, list[float]]:
    """Per version, as fractions of the raw size: whole, delta of the previous, of the next."""
    vs = [_tensors(p) for p in paths]
    raw = sum(len(d) for _, d in vs[0].values())

    def delta(i: int, j: int) -> float:
        return sum(_size(d, dt, vs[j][k][1]) for k, (dt, d) in vs[i].items()) / raw

    return {
        "whole": [sum(_size(d, dt) for dt, d in v.values()) / raw for v in vs],
        "forward": [delta(i, i - 1) for i in range(1, len(vs))],
        "reverse": [delta(i, i + 1) for i in range(len(vs) - 1)],
    }


def forward(m: dict[str, list[float]], cap: int = 8) -> tuple[float, list[float]]:
    """Forward chains as `git add` writes them (depth at most `cap`): storage, fetch costs."""
    w, d = m["whole"], m["forward"]
    store, depth, costs = 0.0, 0, []
    for i in range(len(w)):
        if i == 0 or depth >= cap or d[i - 1] > SAVING * w[i]:
            store, depth = store + w[i], 0
            costs.append(w[i])
        else:
            store, depth = store + d[i - 1], depth + 1
            costs.append(costs[-1] + d[i - 1])
    return store, costs


def reverse(m: dict[str, list[float]], budget: float) -> tuple[float, list[float]]:
    """The published layout: the tip whole, newest first, a delta of the next while it fits."""
    w, r = m["whole"], m["reverse"]
    costs = [0.0] * len(w)
    costs[-1] = store = w[-1]
    for i in range(len(w) - 2, -1, -1):
        if r[i] <= SAVING * w[i] and r[i] + costs[i + 1] <= budget:
            costs[i] = r[i] + costs[i + 1]
            store += r[i]
        else:
            costs[i] = w[i]
            store += w[i]
    return store, costs


def table(label: str, m: dict[str, list[float]]) -> str:
    before, costs = forward(m)
    rows = [
        ("forward chains (before version refs)", before, costs[-1], costs),
        (
            "forward chains + a whole copy of the tip",
            before + m["whole"][-1],
            m["whole"][-1],
            costs,
        ),
    ]
    for budget in (1.5, 2.0, 3.0, 4.0):
        store, c = reverse(m, budget)
        rows.append((f"tip whole, reverse deltas, budget {budget:g}", store, c[-1], c))
    lines = [f"{label}: {len(m['whole'])} checkpoints", "layout | remote | clone | oldest | worst"]
    for name, store, clone, c in rows:
        lines.append(f"{name} | {store / before:.3f}x | {clone:.2f} | {c[0]:.2f} | {max(c):.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", type=int, default=20)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mgit-layout-") as tmp:
        out = Path(tmp)
        scratch, _ = training.train_series(out, args.checkpoints)
        tunes, _ = training.finetune_series(out, args.checkpoints)
        for label, paths in (
            ("pretraining from scratch, fp32", scratch),
            ("fine-tuning, fp32", tunes["F32"]),
            ("fine-tuning, saved as bf16", tunes["BF16"]),
        ):
            print(table(label, measure(paths)) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
