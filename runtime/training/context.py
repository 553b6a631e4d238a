"""What the user's training function receives, and the checkpointer of a run.

`git mgit train ... train:main` calls `main(ctx)` in every process:

    def main(ctx: TrainContext) -> None:
        model = ctx.wrap(Net())                      # on ctx.device; DDP, or FSDP with --fsdp
        opt = torch.optim.AdamW(model.parameters())
        ckpt = ctx.checkpointer(model, opt, config={"lr": 1e-3})   # restores on --resume
        ...

open_run() gives the same checkpointer to code that sets up its own
process group (its own torchrun command) or runs in one process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from git_mgit.gitcmd import find_repo
from git_mgit.lineage.api import Lineage
from git_mgit.runtime.loading import load_state_dict
from git_mgit.runtime.training import committing, distributed, state, threads
from git_mgit.runtime.training.checkpointer import Checkpointer
from git_mgit.runtime.training.distributed import World
from git_mgit.runtime.training.launch import Spec
from git_mgit.runtime.training.layout import Info, Position
from git_mgit.runtime.training.resume import Resume, find_checkpoint
from git_mgit.runtime.training.segment import Segment
from git_mgit.runtime.training.storage import RunCommitter


def _parallel(model: torch.nn.Module) -> str:
    if state.is_sharded(model):
        return "fsdp"
    return "ddp" if isinstance(model, torch.nn.parallel.DistributedDataParallel) else "none"


def open_run(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    *,
    run: str,
    repo: str | Path = ".",
    start: str | None = None,
    resume_from: str | Resume | None = None,
    config: dict[str, Any] | None = None,
    function: str | None = None,
    args: list[str] | None = None,
    branch_from: str | None = None,
    world: World | None = None,
    num_threads: int | None = None,
    remote: str | None = None,
    **options: Any,
) -> Checkpointer:
    """A Checkpointer committing to `runs/RUN` of the repository at `repo` (every rank calls it).

    `start`: the model version training began from (any reference `git mgit
    lineage` accepts); `resume_from`: a checkpoint commit to restore first
    (its run must be `run`, or `run` a new name to branch from it);
    `branch_from`: where a new run branch starts (default: the code commit,
    HEAD); `num_threads`: torch's intra-op threads to train with (default: the
    count `resume_from` records, else as they are: every checkpoint records
    it); `remote`: where ranks whose repository is not rank 0's (other nodes'
    clones) publish their objects; `options`: Checkpointer's (mode, every,
    max_pending, eps, ...).

    Under `git mgit replay` (GIT_MGIT_REPLAY set) the replay segment decides:
    it restores the segment's checkpoint and commits nothing, on the threads
    the recording's epochs were trained with.
    """
    world = world or distributed.current()
    segment = Segment.from_env()
    if segment is not None:
        options = {**options, "mode": "off"}
        if not (isinstance(resume_from, Resume) and resume_from.commit == segment.resume):
            resume_from = segment.resume
    restoring = resume_from
    if isinstance(resume_from, str):
        restoring = find_checkpoint(repo, resume_from, world, remote)
    recorded = restoring.info.threads if restoring is not None else None
    count = segment.threads if segment is not None else num_threads or recorded
    if count is not None:  # the sums of a resumed run split as the checkpoint's did
        if world.writer and segment is None:
            threads.warn(recorded, count)
        threads.use(count)
    start = start or (restoring.info.start if restoring else None)
    commit = code = None
    if options.get("mode") != "off":
        git = find_repo(Path(repo))
        if world.writer:
            code = git.git("rev-parse", "--verify", "HEAD")
            commit = RunCommitter(
                git,
                run,
                code,
                start=start,
                previous=restoring.model if restoring else None,
                resumed_from=restoring.commit if restoring else None,
                branch_from=branch_from or (restoring.commit if restoring else code),
                shards=world.world_size,
            )
            start = commit.start.id if commit.start else None
        committer = committing.make(world, git, commit, remote)
        options = {
            **options,
            "commit": committer,
            "abort": committer.abort,
            "shutdown": committer.close,
            "chunk_size": committer.objects.settings.chunk_size,
        }
    info = Info(
        run,
        Position(),
        config=dict(config or {}),
        code=code,
        function=function,
        args=list(args or []),
        world_size=world.world_size,
        parallel=_parallel(model),
        start=start,
        threads=threads.current(),
    )
    return Checkpointer(
        model,
        optimizer,
        scheduler,
        info=info,
        world=world,
        resume=restoring,
        replay=segment,
        **options,
    )


@dataclass
class TrainContext:
    """One process of a `git mgit train` run."""

    spec: Spec
    world: World
    args: list[str] = field(default_factory=list)  # what followed `--` on the command line
    resume: Resume | None = None  # with --resume: the checkpoint (info on every rank)
    _checkpointers: list[Checkpointer] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def local_rank(self) -> int:
        return self.world.local_rank

    @property
    def device(self) -> torch.device:
        return self.world.device

    @property
    def root(self) -> Path:
        return Path(self.spec.root)

    @property
    def run(self) -> str:
        return self.spec.run

    @property
    def start(self) -> str | None:
        """The model version training starts from (`--from`), if any."""
        return self.spec.start

    def wrap(
        self, model: torch.nn.Module, blocks: list[torch.nn.Module] | None = None
    ) -> torch.nn.Module:
        """The model on this process's device, wrapped for data parallelism.

        DDP by default; with `--fsdp`, FSDP2 (`fully_shard`) on each of `blocks`
        (default: the model's direct children that hold parameters) and on the model.
        """
        model = model.to(self.device)
        if self.spec.options.fsdp:
            from torch.distributed.fsdp import fully_shard

            if blocks is None:
                blocks = [m for m in model.children() if next(m.parameters(), None) is not None]
            for block in blocks:
                fully_shard(block)
            fully_shard(model)
            return model
        if not self.world.distributed:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def start_state(self) -> dict[str, torch.Tensor]:
        """The tensors of the model `--from` named, on every rank (read by rank 0)."""
        if self.spec.start is None:
            raise ValueError("this run has no start model; pass --from MODEL to git mgit train")
        mine = (
            load_state_dict(self.spec.start, Lineage(find_repo(self.root)))
            if self.world.writer
            else None
        )
        return distributed.broadcast_tensors(mine, self.world)

    def checkpointer(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any | None = None,
        *,
        config: dict[str, Any] | None = None,
        **options: Any,
    ) -> Checkpointer:
        """The run's checkpointer for this model; restores the checkpoint when resuming.

        Options default to the command line's (--checkpoint MODE, --every,
        --max-pending, --eps); keyword arguments override them.
        """
        ckpt = open_run(
            model,
            optimizer,
            scheduler,
            run=self.spec.run,
            repo=self.root,
            start=self.spec.start,
            resume_from=self.resume,
            config=config,
            function=self.spec.function,
            args=self.args,
            branch_from=self.spec.branch_from,
            world=self.world,
            num_threads=self.spec.options.threads,
            remote=self.spec.options.remote,
            **{**self.spec.options.checkpointer(), **options},
        )
        self._checkpointers.append(ckpt)
        return ckpt

    @property
    def resumed(self) -> Info | None:
        """What the checkpoint resumed from says: position, metrics, config (None: a new run)."""
        return self.resume.info if self.resume is not None else None

    def close(self) -> None:
        for ckpt in self._checkpointers:
            ckpt.close()

    def drain(self) -> None:
        """After a failure: commit what is already staged, without waiting for other ranks."""
        for ckpt in self._checkpointers:
            ckpt.wait()
