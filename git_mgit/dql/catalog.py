"""The repository as one table of model versions: ModelHub's `model_version` relation.

A row is a version of the lineage graph. Its columns come from sources of
very different cost, so each is read only when a query asks for it, and then
once for every row at the same time:

- the graph (names, paths, types, commit times, provenance edges): in memory;
- git: authors and messages (one `git log`), a branch's versions (one
  `git log` per branch asked about), a revision's models (one `ls-tree`);
- manifests (tensor names, dtypes, shapes): one `cat-file --batch` for all
  the rows a tensor predicate reaches (`prefetch`);
- recorded test results: in memory, taken for the test's current code, as
  `git mgit test` reuses them.

Nothing here reads tensor data, imports torch or runs repository code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from git_mgit.dql.errors import Pos, QueryError
from git_mgit.errors import MgitError
from git_mgit.lineage import contents, history
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.graph import Node
from git_mgit.modelfile import manifest as mf
from git_mgit.repoconfig import ModelDecl
from git_mgit.store.reader import ObjectReader

Tensors = dict[str, mf.TensorEntry]  # a version's tensors by name


@dataclass(frozen=True)
class CommitInfo:
    author: str
    email: str
    message: str  # the subject line


class Catalog:
    """Read-only access to every version's attributes, cached for one query."""

    def __init__(self, lin: Lineage) -> None:
        self.lin = lin
        self.graph = lin.graph
        self.repo = lin.repo
        self._decls: dict[str, ModelDecl] = {
            m.path.rstrip("/"): m for m in lin.config.models.values()
        }
        self._commits: dict[str, CommitInfo] | None = None
        self._branches: dict[str, set[str]] = {}  # branch -> the versions in its history
        self._revisions: dict[str, set[str]] = {}  # revision -> the versions its tree holds
        self._tensors: dict[str, Tensors] = {}
        self._codes: dict[str, str | None] = {}

    # -- rows -----------------------------------------------------------------------------

    def versions(self) -> list[str]:
        """Every version of the graph, oldest commit first."""
        return sorted(self.graph.nodes, key=self.graph.order_key)

    def node(self, version: str) -> Node:
        """The version's node; a bare one for a version the graph does not hold (one only
        staged, or named by REV:PATH outside history)."""
        return self.graph.nodes.get(version) or Node(version)

    def declared(self, version: str) -> ModelDecl | None:
        """The mgit.toml model at the version's path, if any."""
        path = self.node(version).path
        return self._decls.get(path) if path else None

    def name(self, version: str) -> str | None:
        """The version's own name (add-node --name), else its model's name in mgit.toml."""
        decl = self.declared(version)
        return self.node(version).name or (decl.name if decl else None)

    def type(self, version: str) -> str | None:
        decl = self.declared(version)
        return self.node(version).type or (decl.type if decl else None)

    def label(self, version: str) -> str:
        """How a person recognises the version: its name, else its path, and a short id."""
        name = self.name(version)
        node = self.node(version)
        return name if node.name else f"{name or node.path or '?'}@{version[:7]}"

    def resolve(self, ref: str, pos: Pos) -> str:
        """The version `ref` names (as `git mgit lineage` names them); QueryError at `pos`."""
        try:
            return self.lin.resolve(ref).id
        except MgitError as exc:
            raise QueryError(str(exc), pos) from None

    # -- git ------------------------------------------------------------------------------

    def commit(self, version: str) -> CommitInfo | None:
        """Author and subject of the commit that first held the version."""
        if self._commits is None:
            out = self.repo.git_bytes(
                "log", "--format=%H%x00%an%x00%ae%x00%s", *history.HISTORY_REVS, "--"
            ).decode("utf-8", "replace")
            self._commits = {}
            for line in out.splitlines():
                commit, author, email, subject = line.split("\0", 3)
                self._commits[commit] = CommitInfo(author, email, subject)
        commit = self.node(version).commit
        return self._commits.get(commit) if commit else None

    def branches(self, version: str) -> set[str]:
        """The local branches whose history holds the version."""
        if not self._branches:
            refs = self.repo.git("for-each-ref", "--format=%(refname:short)", "refs/heads/")
            folders = self.lin.config.folders()
            for branch in refs.splitlines():
                seen = history.read(self.repo, folders, (f"refs/heads/{branch}",)).versions
                self._branches[branch] = set(seen)
        return {b for b, held in self._branches.items() if version in held}

    def held_at(self, rev: str, pos: Pos) -> set[str]:
        """The versions `rev`'s tree holds: each model as it is in that revision."""
        if rev not in self._revisions:
            commit = self.repo.git(
                "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False
            )
            if not commit:
                raise QueryError(f"{rev!r} is not a revision here", pos)
            held = contents.versions_at(self.repo, self.lin.config.folders(), commit)
            self._revisions[rev] = set(held)
        return self._revisions[rev]

    # -- manifests ------------------------------------------------------------------------

    def prefetch(self, versions: list[str]) -> None:
        """Read the manifests of every version not read yet, file models in one batch."""
        todo = [v for v in versions if v not in self._tensors]
        files = [v for v in todo if self.node(v).kind == "file"]
        for v, blob in zip(files, self.repo.cat_blobs(files), strict=True):
            self._tensors[v] = _file_tensors(blob)
        for v in todo:
            if v not in self._tensors:
                self._tensors[v] = self._folder_tensors(v)

    def _folder_tensors(self, version: str) -> Tensors:
        reader = ObjectReader(self.repo.cwd)
        try:
            shards = contents.manifests(self.repo, reader, version, "folder")
        except MgitError:  # shards not here
            return {}
        finally:
            reader.close()
        return {
            seg.name: mf.TensorEntry(seg.name, seg.dtype or "", seg.shape or (), seg.length)
            for m in shards.values()
            for seg in m.segments
            if seg.kind == "tensor" and seg.name is not None
        }

    def read(self) -> dict[str, Tensors]:
        """The tensors of every version whose manifests were read so far."""
        return self._tensors

    def tensors(self, version: str) -> Tensors:
        if version not in self._tensors:
            self.prefetch([version])
        return self._tensors[version]

    # -- recorded test results ------------------------------------------------------------

    def metrics(self, version: str, test: str) -> dict | None:
        """The metrics `test` recorded for the version under the test's current code.

        A test mgit.toml no longer declares counts when exactly one result is recorded.
        """
        recorded = {
            key.partition(":")[2]: rec.get("metrics")
            for key, rec in self.graph.test_results.get(version, {}).items()
            if key.partition(":")[0] == test
        }
        if not recorded:
            return None
        code = self._code(test)
        if code is not None:
            return recorded.get(code)
        return next(iter(recorded.values())) if len(recorded) == 1 else None

    def _code(self, test: str) -> str | None:
        """The hash of the declared test's code now (how `git mgit test` keys its results)."""
        if test not in self._codes:
            decl = self.lin.config.tests.get(test)
            root = self.repo.worktree
            if decl is None or root is None:
                self._codes[test] = None
            else:
                from git_mgit.runtime.callables import code_hash  # reads sources, imports nothing

                self._codes[test] = code_hash(decl.function, Path(root))
        return self._codes[test]


def _file_tensors(blob: bytes | None) -> Tensors:
    """A file model's tensors by name; none if its manifest is not here (or is not one)."""
    if blob is None or not mf.looks_like_manifest(blob):
        return {}
    return {t.name: t for t in mf.tensor_table(blob)}
