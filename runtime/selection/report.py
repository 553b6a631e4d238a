"""What a selection run shows at its end: a summary table, learning curves as a PNG, JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from git_mgit.console.columns import aligned, cell
from git_mgit.runtime.selection.driver import Config, Outcome
from git_mgit.runtime.training import layout


def _hyperband(c: Config) -> list[str]:
    """Its bracket, and the last epoch it trained if hyperband stopped it there."""
    return [str(c.bracket), "" if c.stopped is None else f"epoch {c.stopped}"]


def table(out: Outcome) -> str:
    """One row per configuration: its values, its metric per epoch ("-" where it did not
    train), hyperband's bracket and stop if any, its branch; * the best."""
    metric = out.space.metric
    best = out.best()
    names = sorted({k for c in out.configs for k in c.values if k != "seed"})
    epochs = max(len(c.history) for c in out.configs)
    hyper = any(c.bracket is not None for c in out.configs)
    head = [
        "",
        "config",
        *names,
        *(f"{metric}@{e}" for e in range(epochs)),
        *(["bracket", "stopped"] if hyper else []),
        "branch",
    ]
    rows = [head]
    for c in out.configs:
        rows.append(
            [
                "*" if c is best else "",
                c.label,
                *(cell(c.values.get(n, "")) for n in names),
                *(cell(h.get(metric, "")) for h in c.history),
                *["-"] * (epochs - len(c.history)),
                *(_hyperband(c) if hyper else []),
                layout.branch(c.run),
            ]
        )
    lines = aligned(rows)
    lines.append(
        f"best: {best.label} ({layout.branch(best.run)}) {metric}={cell(best.history[-1][metric])}"
    )
    return "\n".join(lines)


def plot(out: Outcome, path: Path) -> Path:
    """Learning curves: the ranking metric per epoch, one line per configuration; an x where
    hyperband stopped one."""
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
            line = ax.plot(xs, vs, marker="o", label=c.label)[0]
            if c.stopped is not None and xs[-1] == c.stopped:
                ax.plot(xs[-1], vs[-1], marker="x", markersize=10, color=line.get_color())
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
                "bracket": c.bracket,
                "stopped": c.stopped,
                "visits": [out.visits[(c.index, e)] for e in range(len(c.history))],
            }
            for c in out.configs
        ],
    }
