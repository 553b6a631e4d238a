"""Lineage graph queries on a 10,000-version graph (the issue's target: under 1 s after load).

The repository is generated with git fast-import: 100 model files, 100
versions each (1,000 commits that each change 10 models), manifests that are
real manifest text (a header and 8 tensors each, whose objects are not
stored: nothing here reads tensor data); version j of model i is derived
from version j of model (i-1)//2, so there are 9,900 provenance edges on
notes, written with one bulk notes commit, beside the 9,900 implicit version
edges from history. query_bench.py builds the same repository.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from phases import log

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import notes, records, traversal
from git_mgit.lineage.api import Lineage
from git_mgit.lineage.views import FORMATS
from git_mgit.modelfile import manifest as mf

MODELS, VERSIONS, PER_COMMIT = 100, 100, 10


def _manifest(i: int, j: int) -> bytes:
    """Model i's version j: a header and 8 tensors (the encoder layers in F16 for odd i)."""
    layer_dtype, width = ("F16", 2) if i % 2 else ("F32", 4)
    layout = [
        ("embed.weight", "F32", (1000, 64), 4),
        *((f"encoder.layer.{k}.weight", layer_dtype, (64, 64), width) for k in range(6)),
        ("head.weight", "F32", (10, 64), 4),
    ]

    def content(what: str) -> tuple[bytes]:
        return (hashlib.sha256(f"{i}/{j}/{what}".encode()).digest(),)

    segments, offset = [mf.Segment("header", 0, 1024, content("header"))], 1024
    for name, dtype, shape, itemsize in layout:
        length = math.prod(shape) * itemsize
        segments.append(mf.Segment("tensor", offset, length, content(name), name, dtype, shape))
        offset += length
    return mf.Manifest("safetensors", offset, 1 << 26, segments).render()


def _path(i: int) -> str:
    return f"models/m{i:03d}.safetensors"


def generate(repo_dir: Path, env: dict[str, str]) -> dict[tuple[int, int], str]:
    """Build the repository; returns (model, version) -> version id."""
    subprocess.run(["git", "init", "-q", str(repo_dir)], check=True, env=env)
    (repo_dir / ".gitattributes").write_text(
        "*.safetensors filter=mgit diff=mgit merge=mgit -text\n"
    )
    stream, mark = [], 0
    marks: dict[tuple[int, int], int] = {}
    for i in range(MODELS):
        for j in range(VERSIONS):
            mark += 1
            marks[i, j] = mark
            body = _manifest(i, j)
            stream.append(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(body), body))
    stamp, step = 1_700_000_000, 0
    for j in range(VERSIONS):
        for first in range(0, MODELS, PER_COMMIT):
            step += 1
            msg = f"version {j} of models {first}-{first + PER_COMMIT - 1}".encode()
            head = b"commit refs/heads/main\ncommitter Bench <b@x> %d +0000\ndata %d\n%s\n" % (
                stamp + step,
                len(msg),
                msg,
            )
            files = b"".join(
                b"M 100644 :%d %s\n" % (marks[i, j], _path(i).encode())
                for i in range(first, first + PER_COMMIT)
            )
            stream.append(head + files + b"\n")
    subprocess.run(
        ["git", "fast-import", "--quiet"], cwd=repo_dir, input=b"".join(stream), check=True, env=env
    )
    return {key: _blob_id(_manifest(*key)) for key in marks}


def _blob_id(body: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()


def write_lineage(repo_dir: Path, ids: dict[tuple[int, int], str]) -> None:
    repo = find_repo(repo_dir)
    texts: dict[str, str] = {}
    for (i, j), oid in ids.items():
        recs = []
        if i > 0:
            parent = ids[(i - 1) // 2, j]
            recs.append(records.make("provenance", parent=parent, function="train:derive"))
        if j % 10 == 0:
            recs.append(records.make("node", name=f"m{i}-v{j}"))
        if recs:
            texts[oid] = records.merge_text("", recs)
    notes.write(repo, lambda _: texts, "bench lineage")


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bench(scratch: Path, env: dict[str, str]) -> dict[str, object]:
    repo_dir = scratch / "lineage"
    log("lineage: generating a 10,000-version repository")
    gen_s, ids = timed(lambda: generate(repo_dir, env))
    write_s, _ = timed(lambda: write_lineage(repo_dir, ids))
    lin = Lineage(find_repo(repo_dir))
    load_s, g = timed(lambda: lin.graph)
    root, leaf = ids[0, 0], ids[MODELS - 1, VERSIONS - 1]
    queries: dict[str, Callable[[], object]] = {
        "bfs over every edge from the first root": lambda: sum(1 for _ in traversal.bfs(g, root)),
        "all-parents-first order from the first root": lambda: sum(
            1 for _ in traversal.all_parents_first(g, root, ("provenance", "version"))
        ),
        "provenance ancestors of the deepest leaf": lambda: len(g.ancestors(leaf)),
        "versions of one model": lambda: sum(1 for _ in traversal.versions(g, root)),
        "resolve a version name": lambda: lin.resolve("m50-v50").id,
        "get_next_version": lambda: lin.get_next_version(ids[7, 3]),
        "text tree of the whole graph": lambda: len(FORMATS["text"](g, None)),
        "JSON of the whole graph": lambda: len(FORMATS["json"](g, None)),
    }
    times: dict[str, float] = {}
    for name, fn in queries.items():
        log(f"lineage: {name}")
        times[name] = min(timed(fn)[0] for _ in range(3))
    edit_s, _ = timed(lambda: lin.add_edge(ids[3, 99], ids[90, 99], function="bench:edit"))
    return {
        "versions": len(g.nodes),
        "edges": sum(1 for _ in g.edges()),
        "generate_s": gen_s,
        "bulk_notes_write_s": write_s,
        "load_s": load_s,
        "query_s": times,
        "one_edit_s": edit_s,
    }
