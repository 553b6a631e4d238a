"""Storage planning on real training runs (issue 6): one run, side by side.

Two workloads trained here on CPU: a fine-tuning family (a base model and
fine-tunes of it on other tasks, a few epochs each, their parent declared in
mgit.toml) and a checkpoint series (pretraining from scratch). For each:
what git-lfs stores, what zipnn makes of each file, what git-mgit stores by
default, after `git mgit repack` (lossless; every version then checked out
and compared), the least-storage bound (MST), and with `git mgit compress
--lossy` before each add: ratio and accuracy change per model, like MGit's
Table 3. The planners' storage-against-budget curves go to PNG files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import models
import planners
import training
from phases import log
from tools import LFS, MGIT, BenchRepo

from git_mgit.gitcmd import find_repo
from git_mgit.planning import mst
from git_mgit.planning.graph import Scheme
from git_mgit.repack.costs import Budgets
from git_mgit.repack.estimate import estimate
from git_mgit.store.chunkstore import ChunkStore

HERE = Path(__file__).resolve().parent


def _mgit_toml(files: dict[str, list[Path]], parents: dict[str, str]) -> str:
    out = ['[types.mlp]\narchitecture = "benchtask:model"\n']
    for name in files:
        out.append(f'[models.{name}]\npath = "{name}.safetensors"\ntype = "mlp"')
        if name in parents:
            out.append(f'parents = ["{parents[name]}"]')
        out.append(f'\n[tests.acc-{name}]\nfunction = "benchtask:accuracy_{name}"')
        out.append(f'models = "^{name}$"\npass = "accuracy >= 0"\n')
    return "\n".join(out) + "\n"


def _benchtask(tasks: dict[str, int]) -> str:
    """The repository's own module: the architecture and one accuracy test per model."""
    lines = [
        "import sys",
        f"sys.path.insert(0, {str(HERE)!r})",
        "from functools import partial",
        "import training",
        "",
        "def model():",
        "    return training._model()",
        "",
        "def _accuracy(task, module):",
        '    return {"accuracy": training.accuracy(module, task)}',
        "",
    ]
    lines += [f"accuracy_{name} = partial(_accuracy, {task})" for name, task in tasks.items()]
    return "\n".join(lines) + "\n"


def _commit_rounds(
    repo: BenchRepo, files: dict[str, list[Path]], before_add=None
) -> tuple[list[str], list[dict[str, str]]]:
    """Round r commits version r of every file that has one.

    `before_add(repo, name, round)` may rewrite the file (lossy compression).
    Returns the commits and, per round, the hash of each file as added.
    """
    commits, added = [], []
    for r in range(max(len(v) for v in files.values())):
        added.append({})
        for name, versions in files.items():
            if r < len(versions):
                target = repo.path / f"{name}.safetensors"
                shutil.copyfile(versions[r], target)
                if before_add is not None:
                    before_add(repo, name, r)
                added[r][name] = models.file_hash(target)
                repo.git("add", target.name)
        commits.append(repo.commit(f"round {r}"))
    return commits, added


def _mgit_stored(repo: BenchRepo) -> int:
    return json.loads(repo.git("mgit", "du", "--json", "--no-plan"))["stored"]


def _zipnn(files: dict[str, list[Path]]) -> int:
    from zipnn import ZipNN

    z = ZipNN(input_format="byte", bytearray_dtype="float32", threads=os.cpu_count() or 1)
    return sum(len(z.compress(p.read_bytes())) for v in files.values() for p in v)


def _verify_all(repo: BenchRepo, commits: list[str], added: list[dict[str, str]]) -> int:
    """Check out every round and compare every file with what was added; returns files checked."""
    checked = 0
    for commit, hashes in zip(commits, added, strict=True):
        repo.git("checkout", "-q", commit)
        for name, expected in hashes.items():
            if models.file_hash(repo.path / f"{name}.safetensors") != expected:
                raise RuntimeError(f"{name} at {commit[:10]} does not check out byte-identical")
            checked += 1
    repo.git("checkout", "-q", "main")
    return checked


def _note(out: dict) -> str:
    """Why a model kept its lossless objects: the gate's verdict, or why nothing was quantized."""
    if out["accepted"]:
        return ""
    kept = out["kept_lossless"]
    if not out["compressed"] and kept:  # nothing quantized: say the main reason
        why = max(kept, key=kept.get)
        return f"{why} ({kept[why]} of {sum(kept.values())} chunks)"
    return str(out["rejected"])


class _Lossy:
    """Runs `git mgit compress --lossy` on each file before it is added; keeps MGit's Table 3 rows."""

    def __init__(self, parents: dict[str, str]) -> None:
        self.parents = parents
        self.rows: list[dict[str, object]] = []

    def __call__(self, repo: BenchRepo, name: str, r: int) -> None:
        if r == 0 and name not in self.parents:
            return  # a first version with no parent: nothing to take a delta of
        argv = ["git", "mgit", "compress", "--lossy", f"{name}.safetensors", "--json", "--force"]
        if r > 0:  # the previous version is the closest parent
            argv += ["--parent", f"HEAD:{name}.safetensors"]
        proc = subprocess.run(argv, cwd=repo.path, env=repo.env, capture_output=True, text=True)
        if proc.returncode not in (0, 1):  # 1: the test gate rejected it (a result too)
            raise RuntimeError(f"compress {name} failed:\n{proc.stderr}")
        out = json.loads(proc.stdout)
        before = next(iter(out["metrics_before"].values()), {}).get("accuracy", float("nan"))
        after = next(iter(out["metrics_after"].values()), {}).get("accuracy", before)
        self.rows.append(
            {
                "model": f"{name} v{r}",
                "ratio": out["ratio"] or 1.0,
                "ratio_vs_raw": out["ratio_vs_raw"] or 1.0,
                "metric_before": before,
                "metric_after": after,
                "accepted": out["accepted"],
                "note": _note(out),
            }
        )


def _plan(repo: BenchRepo, out_png: Path) -> tuple[list[dict], float, Budgets]:
    """The planners' curve on this repository's real storage graph, its MST's storage, and
    the loosest budgets the default's own layout meets (heads and others, at least the
    defaults): a repack under them is no slower to check out anywhere, so it must store less.
    """
    store = ChunkStore(find_repo(repo.path))
    try:
        est = estimate(store.repo, store, [], Budgets())
    finally:
        store.close()
    graph = est.costed.estimated()
    rows = planners.plot_budget_curve(out_png, graph, Scheme.INDEPENDENT, None)
    factors = {"heads": Budgets.heads, "others": Budgets.others}
    for label, group in zip(est.survey.versions, graph.groups, strict=True):
        size = sum(est.survey.chunks[h].length for h in est.survey.versions[label])
        kind = "heads" if label in est.survey.heads else "others"
        factors[kind] = max(factors[kind], est.now.cost(group, Scheme.INDEPENDENT) / size)
    return rows, mst(graph).storage(), Budgets(**factors)


def workload(
    ctx, label: str, files: dict[str, list[Path]], parents: dict[str, str], out_dir: Path
) -> dict[str, object]:
    raw = sum(p.stat().st_size for v in files.values() for p in v)
    result: dict[str, object] = {"versions": sum(len(v) for v in files.values()), "raw": raw}
    slug = label.split()[0]

    lfs = BenchRepo(LFS, ctx.scratch / f"plan-{slug}-lfs", ctx.env, None)
    _commit_rounds(lfs, files)
    result["git-lfs"] = lfs.stored_bytes()
    lfs.remove()
    log(f"planning {label}: zipnn on each file")
    result["zipnn"] = _zipnn(files)

    log(f"planning {label}: git-mgit default, then repack")
    repo = _mgit_repo(ctx, f"plan-{slug}-mgit", files, parents)
    commits, added = _commit_rounds(repo, files)
    result["default"] = _mgit_stored(repo)
    result["budget_curve"], result["mst"], matched = _plan(repo, out_dir / f"planners-{slug}.png")
    result["matched_budgets"] = {"heads": matched.heads, "others": matched.others}
    for key, budgets in (("repack", matched), ("repack_default", Budgets())):
        argv = ["--head-budget", f"{budgets.heads:.6g}", "--budget", f"{budgets.others:.6g}"]
        result[f"{key}_output"] = repo.git("mgit", "repack", *argv).strip().splitlines()
        repo.git("mgit", "gc", "--prune=now")
        result[key] = _mgit_stored(repo)
    result["verified_files"] = _verify_all(repo, commits, added)
    repo.git("mgit", "fsck")
    repo.remove()

    log(f"planning {label}: git-mgit with compress --lossy before each add")
    repo = _mgit_repo(ctx, f"plan-{slug}-lossy", files, parents)
    lossy = _Lossy(parents)
    commits, added = _commit_rounds(repo, files, lossy)
    result["lossy"] = lossy.rows
    result["lossy_stored"] = _mgit_stored(repo)
    result["lossy_verified_files"] = _verify_all(repo, commits, added)
    repo.git("mgit", "fsck")
    repo.remove()
    return result


def _mgit_repo(ctx, name: str, files: dict[str, list[Path]], parents: dict[str, str]) -> BenchRepo:
    """A git-mgit repository with mgit.toml (models, parents, one accuracy test each)."""
    repo = BenchRepo(MGIT, ctx.scratch / name, ctx.env, ctx.chunk_size)
    (repo.path / "mgit.toml").write_text(_mgit_toml(files, parents))
    (repo.path / "benchtask.py").write_text(_benchtask({n: i for i, n in enumerate(files)}))
    repo.git("add", "mgit.toml", "benchtask.py")
    repo.commit("models and tests")
    return repo


def bench(ctx, data: Path, out_dir: Path, checkpoints: int, tunes: int = 3, epochs: int = 3):
    """Both workloads; returns their results."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fam_dir, ser_dir = data / "family", data / "series"
    fam_dir.mkdir(parents=True)
    ser_dir.mkdir(parents=True)
    log(f"planning: training a fine-tuning family ({tunes} fine-tunes x {epochs} epochs)")
    base, family = training.finetune_family(fam_dir, tunes, epochs)
    log(f"planning: training a checkpoint series ({checkpoints} epochs)")
    series, _ = training.train_series(ser_dir, checkpoints)
    log("planning: planners on a generated storage graph")
    planners.plot_budget_curve(out_dir / "planners-generated.png")
    return {
        "fine-tuning family": workload(
            ctx,
            "family",
            {"base": [base], **family},
            dict.fromkeys(family, "base"),
            out_dir,
        ),
        "checkpoint series": workload(ctx, "series", {"model": series}, {}, out_dir),
    }
