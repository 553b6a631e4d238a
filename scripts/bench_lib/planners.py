"""Storage planners under a sweep of recreation budgets, as ModelHub's Fig. 6(c).

Each budget factor f sets every version's budget to f times its cost in the
shortest-path tree (f = 1 is the tightest any plan can meet); PAS-MT, PAS-PT
and LAST (with the group budgets split per node) then plan the same graph.
The plot shows total storage against the total recreation budget, with the
two bounds: the MST's storage (least possible, budgets ignored) as a
horizontal line and the SPT's recreation (least possible) as a vertical one.

    python scripts/bench_lib/planners.py /tmp/planners.png [independent|parallel]
    python scripts/bench_lib/planners.py --optimality [SAMPLES]

`optimality` measures how often the heuristics find the optimum (by `exact`) on
small random graphs, and their worst storage gap when they do not.
"""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path
from typing import Any

from git_mgit.planning import (
    Plan,
    Scheme,
    StorageGraph,
    exact,
    last_for_budgets,
    mst,
    pas_mt,
    pas_pt,
    spt,
)
from git_mgit.planning.generate import generated_graph, random_graph, scaled_budgets
from git_mgit.planning.solve import rank

MIB = 1 << 20
METHODS = {
    "PAS-MT": pas_mt,
    "PAS-PT": pas_pt,
    "LAST (budget split per node)": last_for_budgets,
}
BOTH = "better of PAS-MT and PAS-PT"


def default_factors(graph: StorageGraph, scheme: Scheme, points: int = 10) -> list[float]:
    """Geometric steps from 1 (the SPT's costs) to where the MST itself fits every budget."""
    fastest, lightest = spt(graph), mst(graph)
    ratios = [
        lightest.cost(g, scheme) / fastest.cost(g, scheme)
        for g in graph.groups
        if fastest.cost(g, scheme) > 0
    ]
    top = max(ratios, default=1.0)
    return [top ** (i / (points - 1)) for i in range(points)]


def budget_rows(graph: StorageGraph, scheme: Scheme, factors: list[float]) -> list[dict[str, Any]]:
    """One row per (factor, method): the budget, the plan's storage and recreation, its time."""
    rows = []
    for factor in factors:
        g = scaled_budgets(graph, scheme, factor)
        budget = math.fsum(grp.budget for grp in g.groups)
        for name, solve in METHODS.items():
            start = time.perf_counter()
            p = solve(g, scheme)
            rows.append(
                {
                    "factor": factor,
                    "budget": budget,
                    "method": name,
                    "storage": p.storage(),
                    "recreation": math.fsum(p.cost(grp, scheme) for grp in g.groups),
                    "feasible": p.feasible(scheme),
                    "seconds": time.perf_counter() - start,
                }
            )
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    """The rows as a fixed-width table (sizes in MiB)."""
    lines = [
        f"{'factor':>7} {'budget MiB':>11} {'method':<29} {'storage MiB':>12} {'recreation MiB':>15} {'ok':>3} {'s':>6}"
    ]
    for r in rows:
        lines.append(
            f"{r['factor']:7.3f} {r['budget'] / MIB:11.1f} {r['method']:<29} {r['storage'] / MIB:12.2f} "
            f"{r['recreation'] / MIB:15.1f} {'yes' if r['feasible'] else 'no':>3} {r['seconds']:6.2f}"
        )
    return "\n".join(lines)


def plot_budget_curve(
    out_png: Path,
    graph: StorageGraph | None = None,
    scheme: Scheme | str = Scheme.INDEPENDENT,
    budgets: list[float] | None = None,
) -> list[dict[str, Any]]:
    """Sweep budget factors (`budgets`, multiples of each version's SPT cost; None: from 1
    to where the MST fits) over `graph` (None: a generated 600-chunk lineage), draw the
    storage/recreation curve to out_png and return the rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scheme = Scheme(scheme)
    graph = graph or generated_graph(1, versions=60, tensors_per_version=10)
    factors = budgets or default_factors(graph, scheme)
    rows = budget_rows(graph, scheme, factors)
    fastest = spt(graph)
    least_storage = mst(graph).storage() / MIB
    least_recreation = math.fsum(fastest.cost(g, scheme) for g in graph.groups) / MIB

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for (name, _), marker in zip(METHODS.items(), "os^", strict=True):
        mine = [r for r in rows if r["method"] == name]
        ax.plot(
            [r["budget"] / MIB for r in mine],
            [r["storage"] / MIB for r in mine],
            marker=marker,
            label=name,
        )
        missed = [r for r in mine if not r["feasible"]]
        if missed:
            ax.scatter(
                [r["budget"] / MIB for r in missed],
                [r["storage"] / MIB for r in missed],
                s=120, facecolors="none", edgecolors="red", zorder=3,
                label=f"{name}: budget missed",
            )  # fmt: skip
    ax.axhline(
        least_storage, color="gray", linestyle="--", label=f"MST storage ({least_storage:.1f} MiB)"
    )
    ax.axvline(
        least_recreation,
        color="gray",
        linestyle=":",
        label=f"SPT recreation ({least_recreation:.1f} MiB)",
    )
    ax.set_xlabel(f"recreation budget, summed over versions ({scheme.value} scheme, MiB decoded)")
    ax.set_ylabel("total storage (MiB)")
    ax.set_title(
        f"Storage plans under recreation budgets: {graph.n} chunks, {len(graph.edges)} candidate edges, "
        f"{len(graph.groups)} versions",
        fontsize=10,
    )
    ax.set_xscale("log")  # the factors are geometric steps
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png)
    plt.close(fig)
    return rows


def optimality(
    samples: int = 300, nodes: tuple[int, int] = (3, 7), seed: int = 0
) -> list[dict[str, Any]]:
    """Per scheme and heuristic: of `samples` random graphs (schemes alternating), how
    many it solved optimally, how many it met the budgets of at more storage, how many
    it missed the budgets of, and the worst relative storage gap to the optimum."""
    rng = random.Random(seed)
    names = [*METHODS, BOTH]
    tally = {
        (s, name): {"optimal": 0, "worse": 0, "missed": 0, "gap": 0.0}
        for s in Scheme
        for name in names
    }
    for i in range(samples):
        scheme = list(Scheme)[i % 2]
        g = random_graph(rng, rng.randint(*nodes), scheme)
        optimum = exact(g, scheme, limit=10_000_000)
        assert optimum is not None  # budgets of at least the SPT cost can always be met
        found: dict[str, Plan] = {name: solve(g, scheme) for name, solve in METHODS.items()}
        found[BOTH] = min(found["PAS-MT"], found["PAS-PT"], key=lambda p: rank(p, scheme))
        for name, p in found.items():
            t = tally[scheme, name]
            if not p.feasible(scheme):
                t["missed"] += 1
            elif p.storage() <= optimum.storage() * (1 + 1e-9) + 1e-9:
                t["optimal"] += 1
            else:
                t["worse"] += 1
                least = optimum.storage()
                t["gap"] = max(t["gap"], p.storage() / least - 1 if least > 0 else math.inf)
    return [
        {
            "scheme": s.value,
            "method": name,
            "graphs": len(range(list(Scheme).index(s), samples, 2)),
            **t,
        }
        for (s, name), t in tally.items()
    ]


def format_optimality(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'scheme':<12} {'method':<29} {'optimal':>8} {'worse':>6} {'missed':>7} {'worst gap':>10}"
    ]
    for r in rows:
        lines.append(
            f"{r['scheme']:<12} {r['method']:<29} {r['optimal']:>4}/{r['graphs']:<3} {r['worse']:>6} "
            f"{r['missed']:>7} {r['gap']:>10.1%}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--optimality"]:
        print(format_optimality(optimality(int(sys.argv[2]) if len(sys.argv) > 2 else 300)))
    else:
        out = Path(sys.argv[1] if len(sys.argv) > 1 else "planners.png")
        scheme = sys.argv[2] if len(sys.argv) > 2 else "independent"
        print(format_rows(plot_budget_curve(out, scheme=scheme)))
        print(f"wrote {out}")
