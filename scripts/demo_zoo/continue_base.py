"""Keep training the base, one commit per checkpoint; checkpoint 5 plants the fp16 bug.

The "bug": the head's biases all drift by the same large offset. Softmax does
not see a shared offset, so float32 training and accuracy are unaffected,
but the logits no longer fit in float16 (whose largest value is 65504) and
overflow to infinity, as T5's activations did. Every later checkpoint
inherits it.
"""

import sys

from safetensors.torch import load_file

from git_mgit.lineage import Lineage, commit_model
from nets import MLP, fit

lin = Lineage()
checkpoints, planted = int(sys.argv[1]), int(sys.argv[2])
model = MLP()
model.load_state_dict(load_file("zoo/base.safetensors"))
for step in range(1, checkpoints + 1):
    fit(model, seed=0, steps=10)
    if step == planted:
        model.head.bias.data += 70000
    saved = commit_model(
        model.state_dict(), "zoo/base.safetensors", f"base: checkpoint {step}", lineage=lin
    )
    if step == planted:
        print(f"planted at checkpoint {step}: {saved.version}")
