"""Checkpoints in git: commit a snapshot onto its run branch with lineage, read one back.

The storage half of checkpointing (layout.py plans the files, this writes
them): rank 0's writer calls RunCommitter for each snapshot, in order.
Each checkpoint is one commit made with commit_files() onto `runs/NAME`
(created at the code commit on first use), so the user's checkout and index
are never touched; each file's delta base is its previous version on the
branch, and the first model's is the model training started from. Lineage
records: the run's first checkpoint gets a provenance edge from the start
model (function and code commit), every later one a version edge from the
checkpoint before it (across a resume too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from git_mgit.gitcmd import Repo, find_repo
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.resolve import Version
from git_mgit.lineage.save import (
    ModelFile,
    commit_files,
    lineage_records,
    record_many,
    version_manifests,
)
from git_mgit.lineage.save import _commit as save_commit
from git_mgit.modelfile import manifest as mf
from git_mgit.runtime.training import layout, runs
from git_mgit.runtime.training.layout import Snapshot
from git_mgit.runtime.training.plan import MODEL


@dataclass(frozen=True)
class Committed:
    commit: str
    model: str  # the model version
    info: layout.Info


def _merged(manifests: dict[str, mf.Manifest]) -> mf.Manifest | None:
    """One manifest holding every shard's tensors: a delta base found by tensor name."""
    if not manifests:
        return None
    first = next(iter(manifests.values()))
    segments = [s for m in manifests.values() for s in m.segments if s.kind == "tensor"]
    return mf.Manifest(first.kind, 0, first.chunk_size, segments)


class RunCommitter:
    """Commits one run's checkpoints, in order (called from one thread at a time)."""

    def __init__(
        self,
        repo: Repo,
        run: str,
        code: str,
        start: str | None = None,
        previous: str | None = None,
        resumed_from: str | None = None,
        branch_from: str | None = None,
        shards: int = 1,
        lineage: Lineage | None = None,
        branch: str | None = None,
    ) -> None:
        """`code`: the commit the training code is; `start`: the version training began
        from; `previous`: the model version of the checkpoint this run continues (on
        resume); `branch_from`: where the run branch starts if it does not exist yet
        (default `code`; the resumed checkpoint when a new run branches from it);
        `shards`: files of a sharded model folder; `lineage`: one to share between the
        committers of several runs (a selection's), instead of loading the graph for each;
        `branch`: the run whose branch to commit onto when it is not `run`'s own (a tuning
        trial commits run NAME's files onto runs/NAME-r1-t0)."""
        self.repo = repo
        self.lineage = lineage or Lineage(repo)
        self.run, self.code, self.shards = run, code, shards
        self.branch = branch or run
        self.branch_from = branch_from or code
        self.previous, self.resumed_from = previous, resumed_from
        self.start: Version | None = self.lineage.resolve(start) if start else None
        node = self.lineage.graph.nodes.get(self.start.id if self.start else previous or "")
        self.type = node.type if node is not None else None  # checkpoints are of the start's type
        self.base = None  # the first model checkpoint's delta base
        if self.start is not None:
            self.base = _merged(version_manifests(repo, self.start.id, self.start.kind))

    def __call__(
        self,
        snapshot: Snapshot,
        details: dict | None = None,
        trailers: Mapping[str, str] | None = None,
    ) -> Committed:
        """Commit the snapshot; `details` go into its lineage node (a selection's schedule),
        `trailers` into its message (a tuning trial's setting and label)."""
        info = snapshot.info
        self._branch()
        planned, plain = layout.plan(snapshot, self.shards)
        training = layout.training_path(self.run)
        files = [
            ModelFile(f.path, f.tensors, f.metadata, None if f.path == training else self.base)
            for f in planned
        ]
        message = self._message(info, trailers)
        commit, blobs = commit_files(self.repo, files, message, layout.branch(self.branch), plain)
        return self._record(info, commit, blobs, details)

    def commit_blobs(self, info: layout.Info, blobs: Mapping[str, str]) -> Committed:
        """Commit files already in git (manifests written from the ranks' chunks, plain files)."""
        self._branch()
        ref = f"refs/heads/{layout.branch(self.branch)}"
        commit = save_commit(self.repo, blobs, self._message(info, None), ref)
        return self._record(info, commit, blobs, None)

    def _branch(self) -> None:
        if runs.tip(self.repo, self.branch) is None:
            runs.create_branch(self.repo, self.branch, self.branch_from)

    def _message(self, info: layout.Info, trailers: Mapping[str, str] | None) -> str:
        message = layout.message(info, self.resumed_from)
        self.resumed_from = None  # only the first checkpoint after a resume says so
        return message + "".join(f"{k}: {v}\n" for k, v in (trailers or {}).items())

    def _record(
        self, info: layout.Info, commit: str, blobs: Mapping[str, str], details: dict | None
    ) -> Committed:
        """The lineage of the checkpoint's model version: provenance first, then version edges."""
        sharded = info.parallel == "fsdp"
        path = layout.model_path(self.run, sharded)
        model = blobs[path] if path in blobs else self.repo.git("rev-parse", f"{commit}:{path}")
        first = self.previous is None
        recs = lineage_records(
            path,
            [self.start] if first and self.start else [],
            info.function if first else None,
            self.code,
            previous=self.previous if self.previous != model else None,  # unchanged: no edge
            type=self.type,
            kind="folder" if sharded else "file",
            details=details,
        )
        record_many(self.lineage, {model: recs}, f"save {path}")
        self.previous = model
        return Committed(commit, model, info)

    def start_chunks(self) -> dict[tuple[str, int, int], bytes]:
        """(tensor, chunk index, length) -> hash of the start model's chunks: first bases."""
        return chunk_table(self.base)


def chunk_table(manifest: mf.Manifest | None) -> dict[tuple[str, int, int], bytes]:
    """A manifest's tensor chunks as (tensor name, chunk index, length) -> content hash."""
    if manifest is None:
        return {}
    return {
        (c.segment.name, c.index, c.length): c.content_hash
        for c in manifest.chunks()
        if c.segment.kind == "tensor" and c.segment.name is not None
    }


def read(root: str | Path, found: runs.Found) -> Snapshot:
    """The snapshot a checkpoint commit holds (host tensors, read from the objects; a sharded
    entry's row blocks joined)."""
    from git_mgit.runtime.training.reading import CheckpointReader

    reader = CheckpointReader(find_repo(Path(root)), found.commit, found.info)
    try:
        model, training = {}, {}
        for name in reader.names():
            if name.startswith(MODEL):
                model[name[len(MODEL) :]] = reader.read(name)
            else:
                training[name] = reader.read(name)
        return layout.unplan(model, training, reader.metadata)
    finally:
        reader.close()
