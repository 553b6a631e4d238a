"""A repository of real PyTorch models and the user code the runtime runs on them.

    base  ->  ft-a (fine-tune)  ->  grand (fine-tune of ft-a)
          ->  ft-b (frozen first layer)
          ->  pruned
          ->  head-x, head-y (an MTL group: one function makes both)

User code (nets.py, the demo zoo's MLP and data; train.py; checks.py)
lives in the repository, as it would for a user; creation functions and tests are `module:callable`
references in mgit.toml.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo, mgit

ZOO = Path(__file__).parents[1] / "scripts" / "demo_zoo"  # the demo's MLP and data

TRAIN = '''
import os
import runpy
import signal
import time
from pathlib import Path

import torch

from nets import MLP, fit


def finetune(parent):
    _log("finetune")
    return fit(parent, seed=1, steps=5)


def frozen(parent):
    _log("frozen")
    return fit(parent, seed=2, steps=5, freeze=("body.",))


def prune(parent):
    _log("prune")
    state = {k: v.clone() for k, v in parent.state_dict().items()}
    w = state["body.weight"]
    w[w.abs() < w.abs().median()] = 0
    return state


def heads(parent):
    """An MTL group: two heads trained on one shared body."""
    _log("heads")
    body = fit(parent, seed=3, steps=2)
    out = {}
    for i, name in enumerate(["head-x", "head-y"]):
        m = MLP()
        m.load_state_dict(body.state_dict())
        with torch.no_grad():
            m.head.bias.add_(i + 1)
        out[name] = m
    return out


def kill_parent_once(parent):
    """Kills the cascade process the first time it runs (a crash mid-cascade)."""
    marker = Path(os.environ["CASCADE_MARKER"])
    if not marker.exists():
        marker.write_text("killed")
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(0)
    return finetune(parent)


def broken(parent):
    raise RuntimeError("the learning rate schedule is missing")


def _log(what):
    log = os.environ.get("CASCADE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{what} {os.getpid()}\\n")
    time.sleep(float(os.environ.get("CASCADE_SLEEP", "0")))  # a slow job, to kill mid-run
'''

CHECKS = '''
import torch

from nets import task


def accuracy(model):
    x, y = task(seed=0)
    return {"accuracy": (model(x).argmax(dim=1) == y).float().mean().item()}


def fp16_finite(model):
    """Activations must stay finite in float16 (the T5 overflow bug)."""
    x, _ = task(seed=0)
    out = model.half()(x.half())
    return {"finite": float(torch.isfinite(out).all())}


def raises(model):
    raise ValueError("no validation set")
'''

# (model, parent, creation function); head-x and head-y come from the group's function
LINEAGE = [
    ("base", None, None),
    ("ft-a", "base", "train:finetune"),
    ("ft-b", "base", "train:frozen"),
    ("grand", "ft-a", "train:finetune"),
    ("pruned", "base", "train:prune"),
    ("head-x", "base", None),
    ("head-y", "base", None),
]


def _declaration(name: str, parent: str | None, creation: str | None) -> str:
    lines = [f"[models.{name}]", f'path = "models/{name}.safetensors"', 'type = "mlp"']
    lines += [f'parents = ["{parent}"]'] if parent else []
    lines += [f'creation = "{creation}"'] if creation else []
    return "\n".join(lines) + "\n"


CONFIG = "\n".join(
    [
        '[types.mlp]\narchitecture = "nets:MLP"\n',
        *(_declaration(*row) for row in LINEAGE),
        '[groups.heads]\nmodels = ["head-x", "head-y"]\ncreation = "train:heads"\n',
        '[tests.accuracy]\nfunction = "checks:accuracy"\ntypes = "mlp"\npass = "accuracy >= 0.0"\n',
        '[tests.fp16]\nfunction = "checks:fp16_finite"\npass = "finite == 1"\n',
    ]
)


def write_user_code(repo: Path, config: str = CONFIG) -> None:
    shutil.copyfile(ZOO / "nets.py", repo / "nets.py")
    (repo / "train.py").write_text(textwrap.dedent(TRAIN))
    (repo / "checks.py").write_text(textwrap.dedent(CHECKS))
    (repo / "mgit.toml").write_text(config.lstrip())
    run_git("add", "nets.py", "train.py", "checks.py", "mgit.toml", cwd=repo)
    run_git("commit", "-q", "-m", "user code", cwd=repo)


def family(repo: Path) -> Path:
    """The lineage above, each model made by running its creation function in-process."""
    init_mgit_repo(repo)
    write_user_code(repo)
    sys.path.insert(0, str(repo))
    try:
        import nets  # type: ignore[import-not-found]
        import train  # type: ignore[import-not-found]

        lin = Lineage(find_repo(repo))

        def module(state: dict) -> torch.nn.Module:
            m = nets.MLP()
            m.load_state_dict(state)
            return m

        torch.manual_seed(0)
        base = nets.MLP().state_dict()
        commit_model(base, repo / "models/base.safetensors", "base", lineage=lin)
        made = {
            "ft-a": train.finetune(module(base)).state_dict(),
            "ft-b": train.frozen(module(base)).state_dict(),
            "pruned": train.prune(module(base)),
            **{k: v.state_dict() for k, v in train.heads(module(base)).items()},
        }
        for name, state in made.items():
            fn = {"ft-a": "train:finetune", "ft-b": "train:frozen", "pruned": "train:prune"}
            commit_model(
                state,
                repo / f"models/{name}.safetensors",
                f"derive {name}",
                parents=["base"],
                function=fn.get(name, "train:heads"),
                lineage=lin,
            )
        grand = train.finetune(module(made["ft-a"])).state_dict()
        commit_model(
            grand,
            repo / "models/grand.safetensors",
            "derive grand",
            parents=["ft-a"],
            function="train:finetune",
            lineage=lin,
        )
    finally:
        sys.path.remove(str(repo))
        for name in ("nets", "train", "checks"):
            sys.modules.pop(name, None)
    return repo


@contextmanager
def isolated_home(home: Path) -> Iterator[None]:
    """A private HOME and git config for module-scoped templates, set up before the
    per-test isolation that puts git-mgit on PATH."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
        for who in ("AUTHOR", "COMMITTER"):
            mp.setenv(f"GIT_{who}_NAME", "Test")
            mp.setenv(f"GIT_{who}_EMAIL", "test@example.invalid")
        (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
        yield


def working_copy(template: Path, tmp_path: Path) -> Path:
    """A test's own copy of a module's template repository, set up in its global config."""
    path = tmp_path / "repo"
    shutil.copytree(template, path, symlinks=True)
    mgit("install", cwd=path)
    return path


ZOO_FILES = ("nets.py", "train.py", "checks.py", "build.py", "continue_base.py", "mgit.toml")


def demo_zoo(repo: Path, checkpoints: int = 2) -> Path:
    """The demo's model zoo (section 7 of scripts/demo), made by the zoo's own scripts:
    build.py trains the base and derives ft-a, ft-b, ft-c, grand and pruned, and
    continue_base.py commits `checkpoints` more versions of the base (no planted bug).
    Run in this process (torch is imported once), from inside the repository."""
    init_mgit_repo(repo)
    for name in ZOO_FILES:
        shutil.copyfile(ZOO / name, repo / name)
    run_git("add", *ZOO_FILES, cwd=repo)
    run_git("commit", "-q", "-m", "Model zoo: code and mgit.toml", cwd=repo)
    cwd, argv = Path.cwd(), sys.argv
    sys.path.insert(0, str(repo))
    try:
        os.chdir(repo)
        runpy.run_path("build.py", run_name="__main__")
        sys.argv = ["continue_base.py", str(checkpoints), str(checkpoints + 1)]
        runpy.run_path("continue_base.py", run_name="__main__")
    finally:
        os.chdir(cwd)
        sys.argv = argv
        sys.path.remove(str(repo))
        for name in ("nets", "train", "checks"):
            sys.modules.pop(name, None)
    return repo


def plant_fp16_overflow(repo: Path, at: int = 7, steps: int = 12) -> list[str]:
    """`steps` more versions of grand, the `at`-th with a bias float16 cannot hold (the T5
    overflow bug the fp16 test catches): the versions, oldest first."""
    from safetensors.torch import load_file

    lin = Lineage(find_repo(repo))
    path = repo / "models/grand.safetensors"
    made = []
    for step in range(steps):
        state = {k: v * 1.01 for k, v in load_file(path).items()}
        if step == at:
            state["head.bias"] = state["head.bias"] + 70000
        made.append(commit_model(state, path, f"grand step {step}", lineage=lin).version)
    return made
