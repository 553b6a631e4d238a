"""A repository of real PyTorch models and the user code the runtime runs on them.

    base  ->  ft-a (fine-tune)  ->  grand (fine-tune of ft-a)
          ->  ft-b (frozen first layer)
          ->  pruned
          ->  head-x, head-y (an MTL group: one function makes both)

User code (nets.py, train.py, checks.py) lives in the repository, as it
would for a user; creation functions and tests are `module:callable`
references in mgit.toml.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import torch

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model
from tests.gitsandbox import run_git
from tests.mgitrepo import init_mgit_repo

NETS = """
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


def data(seed=0, n=64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, (x[:, :4].argmax(dim=1))
"""

TRAIN = '''
import os
import signal
from pathlib import Path

import torch

from nets import MLP, data


def _fit(model, steps=5, freeze=()):
    x, y = data(1)
    for name, p in model.named_parameters():
        p.requires_grad_(not name.startswith(freeze))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model


def finetune(parent):
    _log("finetune")
    return _fit(parent)


def frozen(parent):
    _log("frozen")
    return _fit(parent, freeze=("l1.",))


def prune(parent):
    _log("prune")
    state = {k: v.clone() for k, v in parent.state_dict().items()}
    w = state["l1.weight"]
    w[w.abs() < w.abs().median()] = 0
    return state


def heads(parent):
    """An MTL group: two heads trained on one shared body."""
    _log("heads")
    body = _fit(parent, steps=2)
    out = {}
    for i, name in enumerate(["head-x", "head-y"]):
        m = MLP()
        m.load_state_dict(body.state_dict())
        with torch.no_grad():
            m.l2.bias.add_(i + 1)
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
'''

CHECKS = '''
import torch

from nets import data


def accuracy(model):
    x, y = data(2)
    return {"accuracy": (model(x).argmax(dim=1) == y).float().mean().item()}


def fp16_finite(model):
    """Activations must stay finite in float16 (the T5 overflow bug)."""
    x, _ = data(3)
    out = model.half()(x.half() * 100)
    return {"finite": float(torch.isfinite(out).all())}


def raises(model):
    raise ValueError("no validation set")
'''

CONFIG = """
[types.mlp]
architecture = "nets:MLP"

[models.base]
path = "models/base.safetensors"
type = "mlp"

[models.ft-a]
path = "models/ft-a.safetensors"
type = "mlp"
parents = ["base"]
creation = "train:finetune"

[models.ft-b]
path = "models/ft-b.safetensors"
type = "mlp"
parents = ["base"]
creation = "train:frozen"

[models.grand]
path = "models/grand.safetensors"
type = "mlp"
parents = ["ft-a"]
creation = "train:finetune"

[models.pruned]
path = "models/pruned.safetensors"
type = "mlp"
parents = ["base"]
creation = "train:prune"

[models.head-x]
path = "models/head-x.safetensors"
type = "mlp"
parents = ["base"]

[models.head-y]
path = "models/head-y.safetensors"
type = "mlp"
parents = ["base"]

[groups.heads]
models = ["head-x", "head-y"]
creation = "train:heads"

[tests.accuracy]
function = "checks:accuracy"
types = "mlp"
pass = "accuracy >= 0.0"

[tests.fp16]
function = "checks:fp16_finite"
pass = "finite == 1"
"""


def mlp_state(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    return {
        "l1.weight": layers[0].weight.detach(),
        "l1.bias": layers[0].bias.detach(),
        "l2.weight": layers[1].weight.detach(),
        "l2.bias": layers[1].bias.detach(),
    }


def write_user_code(repo: Path, config: str = CONFIG) -> None:
    (repo / "nets.py").write_text(textwrap.dedent(NETS))
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

        base = mlp_state(0)
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
