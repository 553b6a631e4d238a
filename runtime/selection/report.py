"""What a selection run shows at its end: a summary table, learning curves as a PNG, JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from git_mgit.runtime.selection.driver import Outcome
from git_mgit.runtime.training import layout


def _value(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def table(out: Outcome) -> str:
    """One row per configuration: its values, its metric per epoch, its branch; * the best."""
    metric = out.space.metric
    best = out.best()
    names = sorted({k for c in out.configs for k in c.values if k != "seed"})
    epochs = len(best.history)
    head = ["", "config", *names, *(f"{metric}@{e}" for e in range(epochs)), "branch"]
    rows = [head]
    for c in out.configs:
        rows.append(
            [
                "*" if c is best else "",
                c.label,
                *(_value(c.values.get(n, "")) for n in names),
                *(_value(h.get(metric, "")) for h in c.history),
                layout.branch(c.run),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append(
        f"best: {best.label} ({layout.branch(best.run)}) {metric}={_value(best.history[-1][metric])}"
    )
    return "\n".join(lines)


def plot(out: Outcome, path: Path) -> Path:
    """Learning curves: the ranking metric per epoch, one line per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    metric = out.space.metric
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for c in out.configs:
        ys = [h.get(metric) for h in c.history]
        points = [(e, y) for e, y in enumerate(ys) if isinstance(y, float)]
        if points:
            xs, vs = zip(*points, strict=True)
            ax.plot(xs, vs, marker="o", label=c.label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"{out.name}: {len(out.configs)} configurations (model hopper parallelism)")
    ax.grid(alpha=0.3)
    if len(out.configs) <= 16:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def as_json(out: Outcome) -> dict[str, Any]:
    return {
        "name": out.name,
        "seconds": out.seconds,
        "metric": out.space.metric,
        "goal": out.space.goal,
        "best": out.best().run,
        "events": out.events,
        "configs": [
            {
                "label": c.label,
                "run": c.run,
                "values": c.values,
                "history": c.history,
                "commits": c.commits,
                "visits": [out.visits[(c.index, e)] for e in range(len(c.history))],
            }
            for c in out.configs
        ],
    }
