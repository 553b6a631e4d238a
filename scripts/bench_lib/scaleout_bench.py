"""The runtime scaled out: `test` and `cascade` on worker processes here against a 2-node cluster.

A zoo of 33 models (a base, 8 fine-tunes of it, 3 fine-tunes of each of
those: 32 derived), MLPs of 1.6 MB, pushed to a bare remote. On this one
machine (2 cores) the same work runs on the local backend (2 worker
processes) and on a Dask cluster of 2 nodes with 1 thread each, started on
loopback, each node in its own folder (runtime/execution/localcluster.py):

- `test`: the registered accuracy test on all 33 versions (`--rerun`);
- `cascade`: a new base version, then all 32 descendants re-derived (two
  levels), each committed by the head.

Both backends get the same parallelism (2 jobs at once, one torch thread
each). The nodes' caches start empty: their first `test` fetches each
version's objects from the remote, and the cascade's new versions come from
the head as packs. Reported: wall time, cost per job (wall x slots / jobs),
what the nodes spent preparing (unpacking code, fetching objects) and
running, the bytes each node fetched and whether they were only its
versions', and from those per-job costs the expected wall time on 8 and 64
nodes.

    python scripts/bench_lib/scaleout_bench.py [--quick] [--json]
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

from phases import log
from tools import run_alone

from git_mgit.console.columns import aligned

CHILDREN, GRANDCHILDREN = 8, 3  # 8 + 24 = 32 derived models
SLOTS = 2  # jobs at once on either backend (this machine's cores)

ZOO = '''
"""A zoo for the scale-out bench: an MLP, a fine-tune, an accuracy test."""

import torch

WIDTH, STEPS, EVAL = 384, 40, 24000


class MLP(torch.nn.Sequential):
    def __init__(self):
        super().__init__(
            torch.nn.Linear(256, WIDTH), torch.nn.ReLU(),
            torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
            torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
            torch.nn.Linear(WIDTH, 10),
        )


def data(seed, n):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 256, generator=g)
    return x, x[:, :10].argmax(dim=1)


def finetune(parent, seed):
    torch.manual_seed(seed)
    opt = torch.optim.SGD(parent.parameters(), lr=0.01, momentum=0.9)
    x, y = data(seed, 512 * STEPS)
    for i in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(parent(x[i * 512 : (i + 1) * 512]), y[i * 512 : (i + 1) * 512])
        loss.backward()
        opt.step()
    return parent


def _creation(seed):
    def made(parent):
        return finetune(parent, seed)
    return made


for _i in range(1, 100):  # each model of the zoo has its own: zoo:finetune_1, ...
    globals()[f"finetune_{_i}"] = _creation(_i)


def accuracy(model):
    x, y = data(0, EVAL)
    right = sum((model(xb).argmax(dim=1) == yb).sum().item() for xb, yb in zip(x.split(4096), y.split(4096)))
    return {"accuracy": right / EVAL}
'''


def _names(children: int) -> list[tuple[str, str | None]]:
    """(model, parent) of the zoo, parents first."""
    out: list[tuple[str, str | None]] = [("base", None)]
    out += [(f"c{i}", "base") for i in range(children)]
    out += [(f"c{i}g{j}", f"c{i}") for i in range(children) for j in range(GRANDCHILDREN)]
    return out


def _config(names: list[tuple[str, str | None]]) -> str:
    lines = ['[types.mlp]\narchitecture = "zoo:MLP"\n']
    for i, (name, parent) in enumerate(names):
        lines.append(f'[models.{name}]\npath = "zoo/{name}.safetensors"\ntype = "mlp"')
        if parent:
            lines.append(f'parents = ["{parent}"]\ncreation = "zoo:finetune_{i}"')
        lines.append("")
    lines.append('[tests.accuracy]\nfunction = "zoo:accuracy"\ntypes = "mlp"\n')
    return "\n".join(lines)


@contextmanager
def _environ(env: dict[str, str]):
    """This process's environment as the bench's (the API calls run git here)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def build(root: Path, children: int) -> Path:
    """The zoo, each derived model made by its creation function, pushed to a bare remote."""
    import torch

    from git_mgit.gitcmd import find_repo
    from git_mgit.lineage import Lineage, commit_model

    repo = root / "zoo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "mgit", "install", "--local")
    _git(repo, "mgit", "track", "*.safetensors")
    names = _names(children)
    (repo / "zoo.py").write_text(textwrap.dedent(ZOO).lstrip())
    (repo / "mgit.toml").write_text(_config(names))
    _git(repo, "add", ".gitattributes", "zoo.py", "mgit.toml")
    _git(repo, "commit", "-q", "-m", "zoo: code and mgit.toml")
    sys.path.insert(0, str(repo))
    try:
        import zoo  # type: ignore[import-not-found]

        lin = Lineage(find_repo(repo))
        states = {}
        torch.manual_seed(0)
        for i, (name, parent) in enumerate(names):
            if parent is None:
                states[name] = zoo.MLP().state_dict()
            else:
                model = zoo.MLP()
                model.load_state_dict(states[parent])
                states[name] = zoo.finetune(model, i).state_dict()
            commit_model(
                states[name],
                repo / f"zoo/{name}.safetensors",
                f"zoo: {name}",
                parents=[parent] if parent else [],
                function=f"zoo:finetune_{i}" if parent else None,
                lineage=lin,
            )
    finally:
        sys.path.remove(str(repo))
        sys.modules.pop("zoo", None)
    _git(root, "init", "-q", "--bare", str(root / "remote.git"))
    _git(repo, "remote", "add", "origin", str(root / "remote.git"))
    _git(repo, "push", "-q", "origin", "HEAD")
    return repo


def _test(repo: Path, cluster: str | None) -> dict:
    from git_mgit.gitcmd import find_repo
    from git_mgit.lineage import Lineage
    from git_mgit.runtime import targets
    from git_mgit.runtime.testing import Runner

    lin = Lineage(find_repo(repo))
    began = time.monotonic()
    runner = Runner(lin, SLOTS, cluster)
    try:
        chosen = targets.at_revision(lin, "HEAD")
        pairs = [(t, test) for t in chosen for test in runner.applicable(t, runner.tests())]
        results = runner.run(pairs, rerun=True)
        stats = getattr(runner.pool, "stats", None)
    finally:
        runner.close()
    wall = time.monotonic() - began
    metrics = {f"{r.target.version}:{r.test.name}": r.metrics for r in results}
    return {"wall_s": wall, "jobs": len(pairs), "metrics": metrics, **_stats(lin, stats)}


def _cascade(repo: Path, cluster: str | None, branch: str) -> dict:
    from git_mgit.gitcmd import find_repo
    from git_mgit.lineage import Lineage
    from git_mgit.runtime import cascade

    lin = Lineage(find_repo(repo))
    began = time.monotonic()
    plan = cascade.plan(lin, "base", branch=branch)
    done = cascade.run(lin, plan, SLOTS, say=lambda _: None, cluster=cluster)
    wall = time.monotonic() - began
    made = {old: new for old, new in done.made.items()}
    return {
        "wall_s": wall,
        "jobs": len(plan.units),
        "levels": _levels(plan),
        "commit_s": done.commit_seconds,
        "made": made,
        **_stats(lin, done.cluster),
    }


def _levels(plan) -> list[int]:
    """Units per level of the plan's dependencies (parents one level up)."""
    deps = plan.dependencies()
    level: dict[int, int] = {}
    for i in range(len(plan.units)):  # parents first
        level[i] = 1 + max((level[d] for d in deps[i]), default=-1)
    return [sum(1 for v in level.values() if v == n) for n in range(max(level.values()) + 1)]


def _stats(lin, stats) -> dict:
    """The cluster's per-node figures, and whether each node held only its versions' objects."""
    if stats is None:
        return {}
    return {
        "nodes": {
            node: {
                "jobs": stats.jobs[node],
                "remote_bytes": stats.remote[node],
                "head_bytes": stats.head[node],
                "versions": sorted(stats.given.get(node, ())),
            }
            for node in stats.jobs
        },
        "prepare_s": stats.prepare,
        "run_s": stats.run,
    }


def _only_theirs(lin, cache: Path, given: list[str]) -> tuple[bool, int]:
    """Whether a node's object cache holds only what its versions read (their chunks, and their
    ancestors' as delta bases); and how many chunks it holds."""
    from git_mgit.gitcmd import find_repo
    from git_mgit.lineage.save import version_manifests
    from git_mgit.store.lookup import anchor_objects, anchor_tips

    def chunks(v: str) -> set[bytes]:
        ver = lin.resolve(v)
        ms = version_manifests(lin.repo, ver.id, ver.kind).values()
        return {c.content_hash for m in ms for c in m.chunks()}

    allowed: set[bytes] = set()
    todo, seen = list(given), set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        allowed |= chunks(v)
        todo += lin.graph.parents(v) if v in lin.graph else []
    if not cache.exists():
        return True, 0  # it was given no job
    node = find_repo(cache)
    held = {h for h, _, _ in anchor_objects(node, list(anchor_tips(node).values()), [])}
    return held <= allowed, len(held)


def bench(scratch: Path, env: dict[str, str], quick: bool) -> dict:
    from git_mgit.gitcmd import find_repo
    from git_mgit.lineage import Lineage, commit_model
    from git_mgit.runtime.execution.localcluster import cluster
    from git_mgit.runtime.loading import read_tensors

    env = {**env, "OMP_NUM_THREADS": "1", "GIT_MGIT_NO_PROGRESS": "1"}
    repeats = 1 if quick else 3
    with _environ(env):
        log("scale-out: building the zoo (33 models)")
        repo = build(scratch / "scaleout", CHILDREN)
        out: dict = {"models": len(_names(CHILDREN)), "slots": SLOTS, "test": {}, "cascade": {}}
        with cluster(scratch / "scaleout" / "cluster", nodes=2, threads=1) as c:
            lin = Lineage(find_repo(repo))
            for turn in range(repeats):
                for backend, address in (("local", None), ("cluster", c.address)):
                    log(f"scale-out: test on the {backend} backend ({turn + 1}/{repeats})")
                    out["test"].setdefault(backend, []).append(_test(repo, address))
                if turn == 0:
                    out["caches"] = {
                        node.address: _only_theirs(
                            lin, c.cache(node), out["test"]["cluster"][0]["nodes"].get(
                                node.address, {}).get("versions", [])
                        )
                        for node in c.nodes
                    }  # fmt: skip
            state = {
                k: v * 1.01 for k, v in read_tensors(str(repo / "zoo/base.safetensors")).items()
            }
            commit_model(state, repo / "zoo/base.safetensors", "zoo: a new base", lineage=lin)
            for turn in range(1 if quick else 2):
                for backend, address in (("local", None), ("cluster", c.address)):
                    log(f"scale-out: cascade on the {backend} backend ({turn + 1})")
                    branch = f"cascade-{backend}-{turn}"
                    out["cascade"].setdefault(backend, []).append(_cascade(repo, address, branch))
    return out


def _median(runs: list[dict], key: str = "wall_s") -> float:
    return statistics.median(r[key] for r in runs)


def expected(run: dict, nodes: int, slots: int, scale: int = 1) -> float:
    """Wall time on `nodes` nodes of one slot each, from a cluster run's measured costs, for
    the zoo or one `scale` times as wide: the head's fixed part, then the jobs level by level;
    a cascade's head commits one unit at a time, so its commits bound it from below."""
    per_job = (run["prepare_s"] + run["run_s"]) / run["jobs"]
    levels = run.get("levels", [run["jobs"]])
    commits = run.get("commit_s", 0.0)
    fixed = run["wall_s"] - sum(math.ceil(n / slots) for n in levels) * per_job - commits
    work = sum(math.ceil(n * scale / nodes) for n in levels) * per_job
    return max(0.0, fixed) + max(work, commits * scale)


def table(result: dict) -> str:
    rows = [["command", "backend", "wall s", "jobs", "s/job x slots", "node prepare s/job",
             "node run s/job", "fetched per node (remote / head)"]]  # fmt: skip
    for command in ("test", "cascade"):
        for backend in ("local", "cluster"):
            runs = result[command][backend]
            best = min(runs, key=lambda r: r["wall_s"])
            wall = _median(runs)
            jobs = best["jobs"]
            fetched = "-"
            prep = run_s = "-"
            if backend == "cluster":
                first = runs[0]
                fetched = "; ".join(
                    f"{n['jobs']} jobs {n['remote_bytes'] / 1e6:.1f} / {n['head_bytes'] / 1e6:.1f} MB"
                    for n in first["nodes"].values()
                )
                prep = f"{best['prepare_s'] / jobs:.3f}"
                run_s = f"{best['run_s'] / jobs:.3f}"
            rows.append([command, backend, f"{wall:.2f}", str(jobs),
                         f"{wall * result['slots'] / jobs:.3f}", prep, run_s, fetched])  # fmt: skip
    lines = aligned(rows)
    for command in ("test", "cascade"):
        run = min(result[command]["cluster"], key=lambda r: r["wall_s"])
        for scale in (1, 32):
            guesses = ", ".join(
                f"{n} nodes {expected(run, n, result['slots'], scale):.1f} s" for n in (2, 8, 64)
            )
            what = (
                "this zoo" if scale == 1 else f"a zoo {scale}x as wide ({run['jobs'] * scale} jobs)"
            )
            lines.append(f"{command}, {what}: expected wall time, 1 slot per node: {guesses}")
    lines.append(
        f"zoo: {result['models']} models; wall: median of {len(result['test']['local'])} (test), "
        f"{len(result['cascade']['local'])} (cascade); fetched: the first cluster run, cold caches"
    )
    return "\n".join(lines)


def targets(result: dict) -> list[tuple[str, bool, str]]:
    out = []
    for command in ("test", "cascade"):
        local = _median(result[command]["local"])
        there = _median(result[command]["cluster"])
        out.append(
            (
                f"{command}: the cluster backend within 1.3x the local backend's wall time",
                there <= 1.3 * local,
                f"{there:.2f} s against {local:.2f} s ({there / local:.2f}x)",
            )
        )
    same_test = all(
        r["metrics"] == result["test"]["local"][0]["metrics"] for r in result["test"]["cluster"]
    )
    made = [r["made"] for r in result["cascade"]["local"] + result["cascade"]["cluster"]]
    out.append(
        (
            "the same results: test metrics equal, cascade versions bit-identical",
            same_test and all(m == made[0] for m in made),
            f"{len(result['test']['local'][0]['metrics'])} test results, "
            f"{len(made[0])} re-derived versions, on each backend",
        )
    )
    caches = result["caches"]
    out.append(
        (
            "each node fetched only the objects of the versions it was given",
            all(ok for ok, _ in caches.values()),
            "; ".join(
                f"{node}: {n} chunks, {'only' if ok else 'NOT only'} its versions'"
                for node, (ok, n) in caches.items()
            ),
        )
    )
    return out


if __name__ == "__main__":
    sys.exit(run_alone(__doc__, bench, table, targets))
