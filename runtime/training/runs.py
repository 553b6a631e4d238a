"""Run branches and checkpoint commits, as git sees them; reads manifests only (no torch).

The launcher uses this before it starts a single process, so that a wrong
`--resume REV` or a taken run name fails at once with a one-line message.
A checkpoint commit is recognised by its `Mgit-Run` trailer and the run's
training file in its tree; what it holds is read from that file's metadata,
never from the lineage notes (a run killed between its commit and its notes
write still resumes).
"""

from __future__ import annotations

from dataclasses import dataclass

from git_mgit.errors import ObjectMissing
from git_mgit.gitcmd import Repo
from git_mgit.merge import views
from git_mgit.modelfile import manifest as mf
from git_mgit.runtime.training import layout
from git_mgit.runtime.training.layout import CheckpointError, Info
from git_mgit.store.chunkstore import ChunkStore

_ZERO = "0" * 40
ANCHORS = "refs/mgit/objects/"


@dataclass(frozen=True)
class Found:
    """A checkpoint commit and what its training file says about it."""

    commit: str
    info: Info
    training: str  # the training file's manifest blob
    model: str  # the model version: manifest blob (file) or tree (folder)
    sharded: bool


def tip(repo: Repo, run: str) -> str | None:
    """The run branch's last commit, or None if the run has no branch yet."""
    ref = f"refs/heads/{layout.branch(run)}"
    return repo.git("rev-parse", "--verify", "--quiet", ref, check=False) or None


def check_name(repo: Repo, run: str) -> None:
    ok = repo.git("check-ref-format", "--branch", layout.branch(run), check=False)
    if not ok or "/" in run or run.startswith("."):
        raise CheckpointError(
            f"{run!r} cannot name a run (it becomes branch {layout.branch(run)}); "
            "use letters, digits, '-', '_' and '.'"
        )


def create_branch(repo: Repo, run: str, at: str) -> None:
    """Create `runs/RUN` at commit `at`; fails if another process created it meanwhile."""
    ref = f"refs/heads/{layout.branch(run)}"
    repo.git("update-ref", "-m", f"git mgit train: start run {run}", ref, at, _ZERO)


def later(repo: Repo, commit: str, run: str) -> int:
    """How many commits the run branch holds after `commit`."""
    head = tip(repo, run)
    return int(repo.git("rev-list", "--count", f"{commit}..{head}")) if head else 0


def read_metadata(repo: Repo, blob: str) -> dict[str, str]:
    """The safetensors header metadata of a tracked file's manifest blob."""
    store = ChunkStore(repo)
    try:
        data = store.reader.read(blob)
        if data is None or not mf.looks_like_manifest(data):
            raise CheckpointError(f"object {blob[:10]} is not a git-mgit manifest")
        return views.load(store, mf.parse(bytes(data))).metadata
    finally:
        store.close()


def fetch_objects(repo: Repo, remote: str) -> None:
    """Every object the remote's anchors hold that this clone lacks (what other nodes of a run
    published there)."""
    repo.git("fetch", "--quiet", "--no-tags", remote, f"{ANCHORS}*:{ANCHORS}*")


def find(repo: Repo, rev: str, remote: str | None = None) -> Found:
    """The checkpoint commit `rev` names; CheckpointError with the fix if it is none.

    `remote`: where the objects of its training file's header are, if this clone
    lacks them (a node other than the one that committed it).
    """
    commit = repo.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not commit:
        raise CheckpointError(f"{rev!r} is not a commit in this repository")
    trailer = f"%(trailers:key={layout.TRAILER_RUN},valueonly,separator=%x00)"
    runs = [r.strip() for r in repo.git("log", "-1", f"--format={trailer}", commit).split("\0")]
    runs = [r for r in runs if r]
    if not runs:
        raise CheckpointError(
            f"{rev!r} ({commit[:10]}) is not a checkpoint commit (no {layout.TRAILER_RUN} "
            "trailer); `git log runs/NAME` lists a run's checkpoints"
        )
    run = runs[0]
    path = layout.training_path(run)
    training = repo.git("rev-parse", "--verify", "--quiet", f"{commit}:{path}", check=False)
    if not training:
        raise CheckpointError(f"checkpoint commit {commit[:10]} of run {run!r} has no {path}")
    try:
        meta = read_metadata(repo, training)
    except ObjectMissing:
        if remote is None:
            raise
        fetch_objects(repo, remote)
        meta = read_metadata(repo, training)
    if meta.get("format") != layout.FORMAT or "checkpoint" not in meta:
        raise CheckpointError(
            f"{path} in {commit[:10]} is not git-mgit training state ({layout.FORMAT!r})"
        )
    info = Info.from_json(meta["checkpoint"])
    sharded = info.parallel == "fsdp"
    model = repo.git(
        "rev-parse",
        "--verify",
        "--quiet",
        f"{commit}:{layout.model_path(run, sharded)}",
        check=False,
    )
    if not model:
        raise CheckpointError(f"checkpoint commit {commit[:10]} of run {run!r} has no model")
    return Found(commit, info, training, model, sharded)
