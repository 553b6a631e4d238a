"""How a checkpoint lies in a commit: paths, names, metadata, message. No I/O, no torch.

A run named NAME commits onto branch `runs/NAME`; each checkpoint commit is
the code commit's tree plus, under `checkpoints/NAME/`:

    model.safetensors            the model (DDP or single process): a model version
    model/                       or, for FSDP, a sharded model folder (one shard per
      model-00001-of-00002.safetensors    rank's share, by bytes; Hugging Face's
      model.safetensors.index.json        index), the folder's tree being the version
    training.safetensors         optimizer and scheduler state, RNG states of every
                                 rank, position, metrics, config (format below)

`training.safetensors` tensors: `optimizer/...`, `scheduler/...` (structure.py
names), `rng/<rank>/<generator>` and `rng-epoch/<rank>/<generator>` (the
generators when the current epoch's data loader was created, for resuming
mid-epoch). Its metadata: `format`, `checkpoint` (Info as JSON), `optimizer`
and `scheduler` (skeletons), `rng` and `rng-epoch` (per-rank JSON fields).
The model file's metadata carries `checkpoint` too, so the model version
says where it came from. Everything is canonical JSON, and nothing in a
checkpoint depends on the wall clock or on whether the run was resumed: an
interrupted and resumed run commits byte-identical files to an uninterrupted one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from git_mgit.errors import MgitError

FORMAT = "git-mgit-training 1"
ROOT = "checkpoints"
BRANCH_PREFIX = "runs/"
MODEL_FILE = "model.safetensors"
MODEL_FOLDER = "model"
TRAINING_FILE = "training.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TRAILER_RUN = "Mgit-Run"
TRAILER_CHECKPOINT = "Mgit-Checkpoint"
TRAILER_CODE = "Mgit-Code"
TRAILER_RESUMED = "Mgit-Resumed-From"
TRAILER_VISITS = "Mgit-Visits"


class CheckpointError(MgitError):
    """A checkpoint that cannot be written, read or resumed."""


@dataclass(frozen=True)
class Position:
    """Where in the data a checkpoint was taken.

    `epoch` is the epoch index it was taken in (counting from 0, as
    `range(epochs)` does), `step` the batches of that epoch done, and
    `end_of_epoch` whether the epoch was finished: a run resumes at the next
    epoch then, else at batch `step` of this one. The sampler's seed and
    epoch say which data order a DistributedSampler was in.
    """

    epoch: int = 0
    step: int = 0
    global_step: int = 0
    end_of_epoch: bool = False
    sampler_seed: int | None = None
    sampler_epoch: int | None = None

    def resume_at(self) -> tuple[int, int]:
        """(epoch, batches of it to skip) where training continues."""
        return (self.epoch + 1, 0) if self.end_of_epoch else (self.epoch, self.step)

    def label(self) -> str:
        where = "end" if self.end_of_epoch else f"step {self.step}"
        return f"epoch {self.epoch} {where} (global step {self.global_step})"


@dataclass(frozen=True)
class Info:
    """Everything about a checkpoint that is not a tensor: enough to replay or resume it."""

    run: str
    position: Position
    metrics: dict[str, float | str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    code: str | None = None  # the commit the training code came from
    function: str | None = None  # module:callable that trained
    args: list[str] = field(default_factory=list)
    world_size: int = 1
    parallel: str = "none"  # none | ddp | fsdp
    start: str | None = None  # the model version training started from
    visits: list[int] | None = None  # model selection: the partitions this epoch visited, in order
    threads: int | None = None  # torch's intra-op threads per process (threads.py)

    def to_json(self) -> str:
        return canonical(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Info:
        body = json.loads(text)
        return cls(**{**body, "position": Position(**body["position"])})


@dataclass
class Snapshot:
    """One checkpoint in host memory: what the writer commits and the reader returns."""

    info: Info
    model: dict[str, Any]  # name -> tensor
    training: dict[str, Any]  # optimizer/..., scheduler/... -> tensor
    skeletons: dict[str, Any]  # "optimizer", "scheduler"
    rng: list[tuple[dict[str, Any], dict[str, Any]]]  # per rank: (JSON fields, tensors)
    rng_epoch: list[tuple[dict[str, Any], dict[str, Any]]] | None = None


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def metric_values(metrics: Mapping[str, Any]) -> dict[str, float | str]:
    """Numbers as floats (tensors via .item()); JSON has no NaN or infinity, so those as text."""
    out: dict[str, float | str] = {}
    for k, v in metrics.items():
        number = float(v.item() if hasattr(v, "item") else v)
        out[str(k)] = number if math.isfinite(number) else str(number)
    return out


def branch(run: str) -> str:
    return BRANCH_PREFIX + run


def run_dir(run: str) -> str:
    return f"{ROOT}/{run}"


def training_path(run: str) -> str:
    return f"{run_dir(run)}/{TRAINING_FILE}"


def model_path(run: str, sharded: bool) -> str:
    """The model version's path: a file, or the folder of a sharded model."""
    return f"{run_dir(run)}/{MODEL_FOLDER if sharded else MODEL_FILE}"


# -- planning: snapshot -> files ----------------------------------------------------------------


@dataclass(frozen=True)
class PlannedFile:
    path: str
    tensors: dict[str, Any]
    metadata: dict[str, str]


def shard_names(names: list[str], sizes: Mapping[str, int], shards: int) -> list[list[str]]:
    """Split tensors (in name order) into at most `shards` runs of about equal bytes."""
    shards = max(1, min(shards, len(names)))
    total = sum(sizes[n] for n in names)
    out: list[list[str]] = [[] for _ in range(shards)]
    done = 0
    for n in names:
        i = min(shards - 1, done * shards // total) if total else 0
        out[i].append(n)
        done += sizes[n]
    return [s for s in out if s]


def plan(snapshot: Snapshot, shards: int) -> tuple[list[PlannedFile], dict[str, bytes]]:
    """The tracked files and the plain files (a folder's index) of one checkpoint commit."""
    info = snapshot.info
    files: list[PlannedFile] = []
    plain: dict[str, bytes] = {}
    if info.parallel == "fsdp":
        folder = model_path(info.run, True)
        names = sorted(snapshot.model)
        parts = shard_names(names, {n: snapshot.model[n].nbytes for n in names}, shards)
        weight_map = {}
        for i, part in enumerate(parts, 1):
            name = f"model-{i:05d}-of-{len(parts):05d}.safetensors"
            files.append(
                PlannedFile(
                    f"{folder}/{name}", {n: snapshot.model[n] for n in part}, {"format": "pt"}
                )
            )
            weight_map.update(dict.fromkeys(part, name))
        total = sum(t.nbytes for t in snapshot.model.values())
        plain[f"{folder}/{INDEX_FILE}"] = folder_index(info, weight_map, total)
    else:
        files.append(
            PlannedFile(model_path(info.run, False), dict(snapshot.model), model_metadata(info))
        )
    training = dict(snapshot.training)
    for key, states in (("rng", snapshot.rng), ("rng-epoch", snapshot.rng_epoch)):
        for rank, (_, tensors) in enumerate(states or []):
            training.update({f"{key}/{rank}/{n}": t for n, t in tensors.items()})
    meta = training_metadata(info, snapshot.skeletons, snapshot.rng, snapshot.rng_epoch)
    files.append(PlannedFile(training_path(info.run), training, meta))
    return files, plain


def model_metadata(info: Info) -> dict[str, str]:
    """The metadata of a single-file model checkpoint."""
    return {"format": "pt", "checkpoint": info.to_json()}


def folder_index(info: Info, weight_map: Mapping[str, str], total_size: int) -> bytes:
    """A sharded model folder's Hugging Face index (with the checkpoint's info)."""
    index = {
        "metadata": {"total_size": total_size, "checkpoint": json.loads(info.to_json())},
        "weight_map": dict(weight_map),
    }
    return (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()


def training_metadata(
    info: Info,
    skeletons: Mapping[str, Any],
    rng: list[tuple[dict[str, Any], Any]] | None,
    rng_epoch: list[tuple[dict[str, Any], Any]] | None,
) -> dict[str, str]:
    """The training file's metadata: format, info, skeletons and every rank's generator fields."""
    meta = {"format": FORMAT, "checkpoint": info.to_json()}
    meta.update({k: canonical(v) for k, v in skeletons.items()})
    for key, states in (("rng", rng), ("rng-epoch", rng_epoch)):
        if states is not None:
            meta[key] = canonical([fields for fields, _ in states])
    return meta


def unplan(model: dict[str, Any], training: dict[str, Any], meta: Mapping[str, str]) -> Snapshot:
    """The snapshot plan() laid out, from the model's tensors and the training file's."""
    if meta.get("format") != FORMAT:
        raise CheckpointError(
            f"training state format {meta.get('format')!r} is not {FORMAT!r} "
            "(written by another git-mgit version?)"
        )
    rest = dict(training)
    states: dict[str, list | None] = {}
    for key in ("rng", "rng-epoch"):
        if key not in meta:
            states[key] = None
            continue
        per_rank = []
        for rank, fields in enumerate(json.loads(meta[key])):
            prefix = f"{key}/{rank}/"
            tensors = {n[len(prefix) :]: rest.pop(n) for n in list(rest) if n.startswith(prefix)}
            per_rank.append((fields, tensors))
        states[key] = per_rank
    skeletons = {k: json.loads(meta[k]) for k in ("optimizer", "scheduler") if k in meta}
    return Snapshot(
        Info.from_json(meta["checkpoint"]),
        model,
        rest,
        skeletons,
        states["rng"] or [],
        states["rng-epoch"],
    )


# -- the commit message -------------------------------------------------------------------------


def message(info: Info, resumed_from: str | None = None) -> str:
    """`runs/NAME: epoch 1 end (global step 16) loss=0.41` and trailers a later run can read."""
    shown = " ".join(f"{k}={_short(v)}" for k, v in sorted(info.metrics.items()))
    pos = info.position
    lines = [
        f"{branch(info.run)}: {pos.label()}" + (f" {shown}" if shown else ""),
        "",
        f"{TRAILER_RUN}: {info.run}",
        f"{TRAILER_CHECKPOINT}: epoch={pos.epoch} step={pos.step} "
        f"global_step={pos.global_step} end_of_epoch={str(pos.end_of_epoch).lower()}",
    ]
    if info.code:
        lines.append(f"{TRAILER_CODE}: {info.code}")
    if resumed_from:
        lines.append(f"{TRAILER_RESUMED}: {resumed_from}")
    if info.visits is not None:
        lines.append(f"{TRAILER_VISITS}: {','.join(map(str, info.visits))}")
    return "\n".join(lines) + "\n"


def _short(v: float | str) -> str:
    return f"{v:.6g}" if isinstance(v, float) else v
