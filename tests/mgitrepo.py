"""Helpers for end-to-end tests: a repository with git-mgit installed and tracking."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
from safetensors.numpy import save

from tests.gitsandbox import run_git


def mgit(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", "mgit", *args], cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"git mgit {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
        )
    return proc


def model_bytes(
    seed: int, scale: float = 0.02, n: int = 256, base: dict | None = None, step: float = 0.0
) -> bytes:
    """A small safetensors model; with `base` and `step`, a training step away from it."""
    rng = np.random.default_rng(seed)
    if base is None:
        tensors = {
            "embed.weight": rng.standard_normal((n, 64), dtype=np.float32) * scale,
            "layer.0.weight": rng.standard_normal((64, 64), dtype=np.float32) * scale,
            "layer.0.bias": np.zeros(64, dtype=np.float32),
            "head.weight": (rng.standard_normal((10, 64), dtype=np.float32) * scale).astype(
                np.float16
            ),
            "step": np.array(seed, dtype=np.int64),
        }
    else:
        tensors = {
            k: np.asarray(
                v + rng.standard_normal(v.shape).astype(v.dtype) * step
                if v.dtype.kind == "f"
                else v
            )
            for k, v in base.items()
        }
    return save(tensors, metadata={"seed": str(seed)})


def tensors_of(data: bytes) -> dict:
    from safetensors.numpy import load

    return load(data)


def init_mgit_repo(path: Path) -> Path:
    """A fresh repo with git-mgit installed globally and *.safetensors tracked."""
    run_git("init", "-q", str(path), cwd=path.parent)
    mgit("install", cwd=path)
    mgit("track", "*.safetensors", cwd=path)
    run_git("add", ".gitattributes", cwd=path)
    run_git("commit", "-q", "-m", "track models", cwd=path)
    return path


def status_porcelain(repo: Path) -> str:
    return run_git("status", "--porcelain", cwd=repo).stdout


def drop_unreferenced(repo: Path) -> None:
    """Lose every object no ref reaches, git-mgit's included: git-mgit keeps its packs out
    of git's own gc (.keep files), so their marks go first."""
    for keep in (repo / ".git" / "objects" / "pack").glob("*.keep"):
        keep.unlink()
    run_git("gc", "-q", "--prune=now", cwd=repo)
