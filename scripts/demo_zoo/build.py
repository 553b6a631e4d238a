"""Build the zoo: train the base, derive every model with its creation function, commit each."""

import torch
from safetensors.torch import load_file

import train
from git_mgit.lineage import Lineage, commit_model
from nets import MLP, fit

lin = Lineage()
torch.manual_seed(0)
base = fit(MLP(), seed=0, steps=60)
commit_model(base.state_dict(), "zoo/base.safetensors", "zoo: base", lineage=lin)

for name, parent, function in [
    ("ft-a", "base", "finetune_a"),
    ("ft-b", "base", "finetune_b"),
    ("ft-c", "base", "finetune_c"),
    ("grand", "ft-a", "specialise"),
    ("pruned", "base", "prune"),
]:
    model = MLP()
    model.load_state_dict(load_file(f"zoo/{parent}.safetensors"))
    made = getattr(train, function)(model)
    state = made.state_dict() if isinstance(made, torch.nn.Module) else made
    commit_model(
        state,
        f"zoo/{name}.safetensors",
        f"zoo: {name}",
        parents=[parent],
        function=f"train:{function}",
        lineage=lin,
    )
