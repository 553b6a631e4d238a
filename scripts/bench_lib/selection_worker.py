"""A worker of the selection bench's baselines: `python selection_worker.py MODE SPEC`.

Runs in the bench repository, importing its `workload.py` (the functions
`git mgit select` runs), and prints the metrics it ends with as JSON:

- `task`: task parallelism; reads the whole training set once, then trains
  its configurations one after another over all of it;
- `ddp`: one rank of a data-parallel job training one configuration over
  its half of the data, gradients all-reduced by torch DDP (gloo) each
  step. Each rank takes half the configuration's batch, so a step sees as
  many rows as a step of the other approaches.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.getcwd())
import workload  # the bench repository's copy of selection_workload.py


def _train(config: dict, net: torch.nn.Module, data, epochs: int, unit: dict) -> dict:
    """`epochs` passes over `data`, then the evaluation."""
    opt = workload.optimizer(net, config)
    for _ in range(epochs):
        workload.train_unit(net, opt, data, unit)
    return workload.evaluate(getattr(net, "module", net), config)


def _model(config: dict) -> torch.nn.Module:
    """The configuration's model, from its seed as MOP's first unit makes it."""
    torch.manual_seed(config["seed"])
    return workload.model(config)


def task(spec: dict) -> dict:
    data = workload.partition(0, 1)
    return {
        c["label"]: _train(c["values"], _model(c["values"]), data, spec["epochs"], c["values"])
        for c in spec["configs"]
    }


def ddp(spec: dict) -> dict:
    rank, world, config = spec["rank"], spec["world"], spec["config"]["values"]
    store = dist.TCPStore("127.0.0.1", spec["port"], is_master=False, timeout=timedelta(seconds=60))
    group = dist.PrefixStore(spec["config"]["label"], store)
    dist.init_process_group("gloo", store=group, rank=rank, world_size=world)
    net = torch.nn.parallel.DistributedDataParallel(_model(config))
    unit = {**config, "batch_size": config["batch_size"] // world}
    metrics = _train(config, net, workload.partition(rank, world), spec["epochs"], unit)
    grads = sum(p.numel() * p.element_size() for p in net.parameters())
    workload.STATS["sent"] = workload.STATS["batches"] * grads
    dist.destroy_process_group()
    return {spec["config"]["label"]: metrics} if rank == 0 else {}


if __name__ == "__main__":
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    torch.set_num_threads(spec["threads"])
    print(json.dumps({"task": task, "ddp": ddp}[mode](spec)))
