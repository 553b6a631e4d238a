"""Training whose checkpoints are commits: `git mgit train`, and the checkpointer a loop calls.

    from git_mgit.runtime.training import TrainContext

    def main(ctx: TrainContext) -> None:            # git mgit train --nproc-per-node 2 train:main
        model = ctx.wrap(Net())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ckpt = ctx.checkpointer(model, opt, config={"lr": 1e-3})
        for epoch in ckpt.epochs(3):
            for x, y in ckpt.batches(loader):
                ...
                ckpt.step({"loss": loss})
            ckpt.save({"loss": loss})

Modules, in the order a checkpoint flows through them: `holdings` (what
each rank holds of the model, optimizer and scheduler, via `structure` for
non-tensor parts), `plan` (which rank writes which chunk of which file),
`rng` (every generator), `staging` (each rank's copies off the device, into
arenas allocated ahead), `layout` (how a checkpoint lies in a commit;
`Info`, `Position`), `writers` (sync, or a background thread with
back-pressure), `committing` (every rank's part of a commit), `objects`
(a rank's chunks into the object store, by its `encoders`: processes doing
`encoding`, reading arenas in place through `sharedmem`), `assemble`
(rank 0's headers and manifests), `storage` (commits with lineage), `runs`
(run branches and checkpoint commits), `reading` and `resume` (restoring
each rank's rows, on any number of ranks), `state` (a whole state in one
process: tuning and selection), `adaptive` (Flor's checkpoint period), `segment` and
`replay` (hindsight replay: a worker's share, and the driver),
`checkpointer` (the loop's API), `distributed` (the process group's
collectives), `context` (what the user's function gets), `launch` and
`entry` (the torchrun job). See docs/training.md.
"""

from __future__ import annotations

from git_mgit.lazy import exports

_EXPORTS = {
    "Checkpointer": "checkpointer",
    "fit": "checkpointer",
    "MODES": "checkpointer",
    "TrainContext": "context",
    "open_run": "context",
    "Info": "layout",
    "Position": "layout",
    "CheckpointError": "layout",
    "Resume": "resume",
    "load_checkpoint": "resume",
    "restore": "resume",
    "World": "distributed",
}

__all__ = sorted(_EXPORTS)
__getattr__ = exports(__name__, {k: f"{__name__}.{m}" for k, m in _EXPORTS.items()})
