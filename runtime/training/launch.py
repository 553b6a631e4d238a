"""`git mgit train`: check everything that can be checked, then hand the run to torchrun.

No torch here: a wrong run name, a REV that is no checkpoint, an untracked
checkpoint path or a misspelt `module:fn` fail in a fraction of a second
with one line, before any process starts. The processes are torchrun's
(`python -m torch.distributed.run`, elastic agent, c10d rendezvous), each
running git_mgit.runtime.training.entry with the run's Spec as JSON.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from git_mgit.gitcmd import Repo
from git_mgit.runtime import callables
from git_mgit.runtime.training import layout, runs, threads
from git_mgit.runtime.training.adaptive import EPS
from git_mgit.runtime.training.layout import CheckpointError

ENTRY = "git_mgit.runtime.training.entry"


@dataclass(frozen=True)
class Options:
    """How the run trains and checkpoints, as the command line sets it."""

    fsdp: bool = False
    mode: str = "background"
    every: int | None = None
    max_pending: int = 1
    eps: float = EPS
    deterministic: bool = True
    threads: int | None = None  # torch's intra-op threads per process (None: as they start)
    remote: str | None = None  # where nodes publish their objects (several nodes)

    def checkpointer(self) -> dict[str, object]:
        """The Checkpointer's keyword arguments these options give."""
        return {
            "mode": self.mode,
            "every": self.every,
            "max_pending": self.max_pending,
            "eps": self.eps,
        }


@dataclass(frozen=True)
class Spec:
    """What every training process needs to know about the run (the launcher -> entry contract)."""

    root: str
    function: str
    run: str
    resume: str | None = None  # the checkpoint commit to restore
    branch_from: str | None = None  # where a new run branch starts (a resumed checkpoint)
    start: str | None = None  # the model version training starts from
    options: Options = Options()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        body = json.loads(text)
        return cls(**{**body, "options": Options(**body["options"])})


@dataclass(frozen=True)
class Request:
    """The command line, as given."""

    function: str | None
    args: list[str]
    nproc_per_node: int = 1
    nnodes: int = 1
    rdzv_endpoint: str | None = None
    resume: str | None = None
    name: str | None = None
    start: str | None = None
    options: Options = Options()


def check_function(ref: str, root: Path) -> None:
    """Fail early if `module:fn` names no module file of the repository or no top-level name in it.

    Read, never imported: importing would run the user's code in the launcher.
    Modules from outside the repository are left for the processes to import.
    """
    module, attr = callables._split(ref)
    file = callables._module_file(module, root)
    if file is None:
        try:
            installed = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            installed = False
        if not installed:
            raise callables.CallableError(
                f"{ref}: no module {module!r} in {root} (module names are relative to the "
                "repository root)"
            )
        return
    tree = ast.parse(file.read_bytes(), str(file))
    first = attr.split(".")[0]
    defined = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    if first not in defined:
        raise callables.CallableError(
            f"{ref}: {file.relative_to(root)} defines no {first!r} at its top level"
        )


def _default_name(function: str) -> str:
    return f"{function.rpartition(':')[2].replace('.', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"


def _to_resume(repo: Repo, req: Request, commits: bool) -> tuple[runs.Found, str]:
    """The checkpoint `--resume` names and the run that continues it, checked."""
    assert req.resume is not None
    found = runs.find(repo, req.resume, req.options.remote)
    info = found.info
    processes = req.nproc_per_node * req.nnodes
    if processes != info.world_size:  # every tensor is restored; the data order is not the same
        print(
            f"git-mgit: note: checkpoint {found.commit[:10]} was taken by {info.world_size} "
            f"process(es) and resumes on {processes}: each rank's share of the data (and the "
            "generators of ranks the checkpoint has none for) differ from a run that kept "
            f"{info.world_size} (docs/training.md)",
            file=sys.stderr,
        )
    run = req.name or info.run
    if commits and run == info.run and (n := runs.later(repo, found.commit, run)):
        raise CheckpointError(
            f"{req.resume} is not the last checkpoint of run {run!r} ({n} later commit(s) on "
            f"{layout.branch(run)}); pass --name NEW to branch a new run from it"
        )
    return found, run


def plan(repo: Repo, req: Request) -> tuple[Spec, list[str]]:
    """The Spec of the run and the user's arguments, or a CheckpointError saying what to fix."""
    if repo.worktree is None:
        raise CheckpointError("git mgit train runs in a working tree (it imports your code)")
    if req.nnodes > 1 and not (req.rdzv_endpoint and req.name):
        raise CheckpointError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT and --name RUN")
    if not repo.git("rev-parse", "--verify", "--quiet", "HEAD", check=False):
        raise CheckpointError("commit your training code first: a run records the code commit")
    remote = req.options.remote
    if remote is None and req.nnodes > 1 and "origin" in repo.git("remote").split():
        remote = "origin"
    if remote is not None and not repo.git("remote", "get-url", remote, check=False):
        raise CheckpointError(f"no remote {remote!r} in this clone (`git remote -v` lists them)")
    if req.options.threads is not None and req.options.threads < 1:
        raise CheckpointError(f"--threads must be at least 1, not {req.options.threads}")
    req = dataclasses.replace(req, options=dataclasses.replace(req.options, remote=remote))
    commits = req.options.mode != "off"  # a replay with --checkpoint off writes nothing
    function, args, start, options = req.function, req.args, req.start, req.options
    resume = branch_from = None
    if req.resume is not None:
        found, run = _to_resume(repo, req, commits)
        info = found.info
        function, args, start = function or info.function, args or info.args, start or info.start
        options = dataclasses.replace(
            options,
            fsdp=options.fsdp or info.parallel == "fsdp",
            threads=options.threads or threads.for_recorded(info.threads, req.nproc_per_node),
        )
        resume = found.commit
        branch_from = found.commit if run != info.run else None
    elif function is None:
        raise CheckpointError("name the training function (module:fn), or --resume REV")
    else:
        run = req.name or _default_name(function)
        count = options.threads or threads.for_new_run(req.nproc_per_node)
        options = dataclasses.replace(options, threads=count)
    if function is None:
        raise CheckpointError(f"checkpoint {resume} records no training function; name one")
    runs.check_name(repo, run)
    new_branch = resume is None or branch_from is not None
    if commits and new_branch and runs.tip(repo, run) is not None:
        raise CheckpointError(
            f"run {run!r} exists ({layout.branch(run)}); pick another --name, or continue it "
            f"with --resume {layout.branch(run)}"
        )
    path = layout.training_path(run)
    if not repo.git("check-attr", "filter", "--", path).endswith(": mgit"):
        raise CheckpointError(
            f"{path} would not be tracked by git-mgit; run `git mgit track '*.safetensors'`"
        )
    check_function(function, Path(repo.worktree))
    if start is not None:
        from git_mgit.lineage.api import Lineage  # reads the graph: only when there is a start

        start = Lineage(repo).resolve(start).id
    return Spec(str(repo.worktree), function, run, resume, branch_from, start, options), list(args)


def command(spec: Spec, args: list[str], req: Request) -> list[str]:
    """The torchrun command line."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(req.nproc_per_node),
    ]
    if req.nnodes > 1:
        cmd += [
            "--nnodes",
            str(req.nnodes),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            str(req.rdzv_endpoint),
            "--rdzv-id",
            spec.run,
        ]
    else:
        cmd += ["--standalone"]
    return [*cmd, "-m", ENTRY, spec.to_json(), *args]


def environment(deterministic: bool = True, count: int | None = None) -> dict[str, str]:
    """This environment for the training processes; `count`: their intra-op threads."""
    env = dict(os.environ)
    if count is not None:  # torchrun would set 1 for several processes (and say so)
        env[threads.ENV] = str(count)
    if deterministic:
        # cuBLAS reads it when its handle is made: before the processes touch the GPU.
        env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return env


def new_checkpoints(repo: Repo, run: str, before: str | None) -> list[str]:
    """Subjects of the checkpoint commits the run branch gained (newest first)."""
    head = runs.tip(repo, run)
    if head is None or head == before:
        return []
    span = f"{before}..{head}" if before else head
    fmt = f"%h %s%x00%(trailers:key={layout.TRAILER_RUN},valueonly,separator=%x00)%x01"
    out = []
    for record in repo.git("log", f"--format={fmt}", span).split("\x01"):
        line, *named = record.strip("\n").split("\0")
        if run in (n.strip() for n in named):
            out.append(line)
    return out


def launch(repo: Repo, req: Request) -> int:
    """Run the training job; returns torchrun's exit status."""
    spec, args = plan(repo, req)
    before = runs.tip(repo, spec.run)
    modified = repo.git("status", "--porcelain", "--untracked-files=no").splitlines()
    if modified:
        print(
            f"git-mgit: warning: {len(modified)} tracked file(s) differ from HEAD; checkpoints "
            "record HEAD as their code commit",
            file=sys.stderr,
        )
    done = subprocess.run(
        command(spec, args, req),
        cwd=spec.root,
        env=environment(spec.options.deterministic, spec.options.threads),
    )
    made = new_checkpoints(repo, spec.run, before)
    branch = layout.branch(spec.run)
    for line in made[:1]:
        print(f"{branch}: {len(made)} checkpoint(s); last {line}")
    if done.returncode != 0:
        hint = ""
        if made or spec.resume:
            hint = f"; resume it: git mgit train --resume {branch} --nproc-per-node {req.nproc_per_node}"
        print(f"git-mgit: training failed (torchrun exit {done.returncode}){hint}", file=sys.stderr)
    return done.returncode
