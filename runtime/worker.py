"""A worker process: runs the user's tests and creation functions, one JSON job per line.

    python -m git_mgit.runtime.worker REPO_ROOT

Jobs arrive on stdin, one JSON object per line; each gets one JSON line
back on the process's original stdout. Everything the user's code prints
goes to stderr instead, so it cannot corrupt the answers. Models cross the
process boundary as version ids or safetensors files (in; a file is a model
no commit holds yet, such as a lossy reconstruction on trial) and
safetensors files (out): JSON and safetensors only, never a pickle.

    {"kind": "test", "function": "checks:accuracy", "model": MODEL}
        -> {"ok": true, "metrics": {"accuracy": 0.93}}
    {"kind": "create", "function": "train:finetune", "parents": [MODEL, ...],
     "outputs": {"NAME": "/tmp/out.safetensors", ...}, "group": false,
     "config": {"lr": 0.01}}                      (optional: keyword arguments)
        -> {"ok": true}
    MODEL = {"version": "<id>" | "file": "/path/model.safetensors"
             | "manifests": {"<shard path, or '' for a file>": "<manifest text>"},
               "objects": "/node/cache.git",            (with "manifests": where the objects are)
             "architecture": "nets:MLP" | null}

A version id is read from REPO_ROOT's repository; manifests from the git
repository `objects` names, which is how a worker on a cluster node (whose
REPO_ROOT is a copy of the code, not a clone) loads a version.

A failing job answers {"ok": false, "error": "..."} and the worker goes on.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

import torch

from git_mgit.gitcmd import find_repo
from git_mgit.lineage.api import Lineage
from git_mgit.runtime import callables
from git_mgit.runtime.loading import (
    load_manifests,
    load_state_dict,
    read_tensors,
    save_tensors,
)


class _Repository:
    """The lineage of REPO_ROOT's repository, read when a job first names a version by id
    (a cluster node's worker runs in a copy of the code, which is no repository)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lin: Lineage | None = None

    def lineage(self) -> Lineage:
        if self._lin is None:
            self._lin = Lineage(find_repo(self.root))
        return self._lin

    def reload(self) -> None:
        if self._lin is not None:
            self._lin.reload()  # a cascade commits the parents a job builds on


def _state(spec: Mapping, repo: _Repository) -> dict[str, torch.Tensor]:
    if "file" in spec:
        return read_tensors(spec["file"])
    if "manifests" in spec:
        return load_manifests(spec["objects"], spec["manifests"])
    return load_state_dict(spec["version"], repo.lineage())


def _materialize(spec: Mapping, repo: _Repository, root: Path, train: bool) -> object:
    """A torch module of the declared architecture holding the model's weights, else its state dict."""
    state = _state(spec, repo)
    if not spec.get("architecture"):
        return state
    module = callables.load(spec["architecture"], root)()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(
            f"{spec['architecture']} returned {type(module).__name__}, not a torch.nn.Module"
        )
    module.load_state_dict(state, assign=True)
    return module.train(train)


def _as_state(value: object, what: str) -> dict[str, torch.Tensor]:
    if isinstance(value, torch.nn.Module):
        return dict(value.state_dict())
    if isinstance(value, Mapping) and all(isinstance(v, torch.Tensor) for v in value.values()):
        return dict(value)
    raise TypeError(
        f"{what} returned {type(value).__name__}: return a torch.nn.Module or a state dict"
    )


def _metrics(value: object, function: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{function} returned {type(value).__name__}: return a dict of metrics")
    out = {}
    for k, v in value.items():
        number = float(v.item() if isinstance(v, torch.Tensor) else v)
        out[str(k)] = number if math.isfinite(number) else str(number)  # JSON has no NaN
    return out


def handle(job: Mapping, repo: _Repository, root: Path) -> dict:
    fn = callables.load(job["function"], root)
    if job["kind"] == "test":
        with torch.no_grad():
            return {
                "ok": True,
                "metrics": _metrics(
                    fn(_materialize(job["model"], repo, root, False)), job["function"]
                ),
            }
    parents = [_materialize(p, repo, root, True) for p in job["parents"]]
    made = fn(*parents, **job.get("config", {}))
    outputs: Mapping[str, str] = job["outputs"]
    if job.get("group"):
        if not isinstance(made, Mapping) or set(made) != set(outputs):
            raise TypeError(
                f"{job['function']} must return {{name: model}} for exactly {sorted(outputs)}"
            )
        for name, path in outputs.items():
            save_tensors(_as_state(made[name], job["function"]), path)
    else:
        ((_, path),) = outputs.items()
        save_tensors(_as_state(made, job["function"]), path)
    return {"ok": True}


def answer_stream() -> TextIO:
    """This process's original stdout, for its answers; everything printed from now on
    (the user's code included, C libraries too) goes to stderr, so it cannot corrupt them."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return answers


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve()
    answers = answer_stream()
    repo = _Repository(root)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            if job["kind"] == "create":
                repo.reload()
            answer = handle(job, repo, root)
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            if os.environ.get("GIT_MGIT_DEBUG") == "1":
                traceback.print_exc()
            answer = {"ok": False, "error": detail}
        answers.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
