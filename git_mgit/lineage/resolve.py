"""Turning what a user types into a model version id.

Accepted, in this order:
  REV:PATH        the manifest (file) or tree (folder) at PATH in REV (`:PATH` is the index)
  a version name  given with `add-node --name`
  a model name    declared in mgit.toml: its version at HEAD (else in the index)
  PATH            a model file or folder: its version at HEAD (else in the index)
  an object id    full or abbreviated (at least 4 hex digits), or any name git resolves
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo
from git_mgit.lineage.graph import Graph
from git_mgit.modelfile import manifest as mf
from git_mgit.repoconfig import RepoConfig

_HEX = re.compile(r"[0-9a-f]{4,40}")


class UnknownModel(MgitError):
    """A reference that names no model version."""


@dataclass(frozen=True)
class Version:
    id: str
    path: str | None
    kind: str  # "file" | "folder"


def object_kind(repo: Repo, oid: str) -> str | None:
    """'file' for a manifest blob, 'folder' for a tree of shards, None for anything else or nothing."""
    out = repo.git("cat-file", "-t", oid, check=False)
    if out == "tree":
        names = repo.git("ls-tree", "--name-only", oid).splitlines()
        return "folder" if any(n.endswith(".safetensors") for n in names) else None
    if out == "blob":
        head = repo.git_bytes("cat-file", "blob", oid)[: len(mf.FIRST_LINE)]
        return "file" if mf.looks_like_manifest(head) else None
    return None


def _at_path(repo: Repo, path: str) -> tuple[str, str] | None:
    for rev in ("HEAD", ""):
        oid = repo.git("rev-parse", "--verify", "--quiet", f"{rev}:{path}", check=False)
        if oid:
            return oid, path
    return None


def resolve(repo: Repo, g: Graph, config: RepoConfig, ref: str) -> Version:
    """The version `ref` names; UnknownModel (with the fix) if none."""
    found: tuple[str, str | None] | None = None
    if ":" in ref:
        rev, _, path = ref.partition(":")
        oid = repo.git("rev-parse", "--verify", "--quiet", ref, check=False)
        if not oid:
            raise UnknownModel(f"{ref!r}: no {path or 'path'} in {rev or 'the index'}")
        found = oid, path.strip("/")
    if found is None:
        named = g.named(ref)
        if len(named) > 1:
            raise UnknownModel(
                f"{ref!r} names {len(named)} versions ({', '.join(n[:10] for n in named)}); "
                "use an id or REV:PATH"
            )
        if named:
            found = named[0], g.nodes[named[0]].path
            declared = config.models.get(ref)
            if declared is not None and declared.path.rstrip("/") != found[1]:
                raise UnknownModel(
                    f"{ref!r} is both the name of a version of {found[1]} and a model in "
                    f"mgit.toml ({declared.path}); rename one, or use REV:PATH"
                )
    if found is None and ref in config.models:
        path = config.models[ref].path.rstrip("/")
        found = _at_path(repo, path)
        if found is None:
            raise UnknownModel(f"model {ref!r} ({path}) is neither committed nor staged")
    if found is None:
        found = _at_path(repo, ref.rstrip("/"))
    if found is None and _HEX.fullmatch(ref):
        matches = [oid for oid in g.nodes if oid.startswith(ref)]
        if len(matches) > 1:
            raise UnknownModel(f"{ref!r} is ambiguous: {', '.join(m[:12] for m in matches)}")
        if matches:
            found = matches[0], g.nodes[matches[0]].path
    if found is None:
        oid = repo.git("rev-parse", "--verify", "--quiet", ref + "^{object}", check=False)
        found = (oid, None) if oid else None
    if found is None:
        raise UnknownModel(
            f"unknown model {ref!r}: not a version name, a model in mgit.toml, a model path "
            "or an object id; `git mgit graph` lists them"
        )
    oid, path = found
    node = g.nodes.get(oid)
    kind = node.kind if node is not None and node.path else object_kind(repo, oid)
    if kind is None:
        raise UnknownModel(
            f"{ref!r} ({oid[:10]}) is not a model version: neither a git-mgit manifest nor a "
            "model folder; is the file tracked (`git mgit track`)?"
        )
    return Version(oid, path if path is not None else (node.path if node else None), kind)
