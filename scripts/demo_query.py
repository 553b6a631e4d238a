"""Section 8 of `scripts/demo`: ModelHub's four example queries on the demo repository.

The queries are docs/query.md's own, read from it, so the examples the docs
show are the ones that run: select the float32 fine-tunes, slice the base's
body into a model of its own, construct bfloat16 serving models from the
fine-tunes, and evaluate ft-a's recipe under three learning rates, keeping
the best two. The models they made are pushed; a fresh clone checks each
out byte for byte and finds the query on its provenance edge.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from demo_shell import DemoFailure, Shell, heading, note

DOCS = Path(__file__).resolve().parents[1] / "docs" / "query.md"
MADE = 'select m.id, m.path, m.function where m derived by "query: %" order by m.path'


def modelhub_queries() -> list[str]:
    """docs/query.md's equivalents of ModelHub's Queries 1-4, in order."""
    return re.findall(r"```dql\n(-- ModelHub Query \d\n.*?)```", DOCS.read_text(), re.S)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def queries(sh: Shell) -> None:
    heading("8. Queries: ModelHub's four DQL examples, as git mgit query")
    for text in modelhub_queries():
        note(text.splitlines()[0].removeprefix("-- ") + " (docs/query.md)")
        for line in text.splitlines()[1:]:
            print(f"    | {line}")
        sh.run("git", "mgit", "query", "--jobs", "2", text, cwd="work")
    note("each derived model's provenance edge names the query that made it")
    sh.run("git", "mgit", "log", "base-body", cwd="work")
    sh.run("git", "push", "--quiet", "origin", "main", cwd="work")
    note("a fresh clone checks every derived model out byte for byte, with the same lineage")
    sh.run("git", "clone", "--quiet", str(sh.root / "remote.git"), "clone3")
    sh.run("git", "mgit", "fetch", cwd="clone3", show=False)
    made = json.loads(sh.run("git", "mgit", "query", "--json", MADE, cwd="work", show=False))
    cloned = json.loads(sh.run("git", "mgit", "query", "--json", MADE, cwd="clone3", show=False))
    if not made or made != cloned:
        raise DemoFailure(f"the clone's query-made models differ: {made} vs {cloned}")
    for row in made:
        path = row["m.path"]
        ours, theirs = sh.root / "work" / path, sh.root / "clone3" / path
        same = _digest(ours) == _digest(theirs)
        print(f"    {path}: sha256 {_digest(theirs)[:16]}... {'identical' if same else 'DIFFERS'}")
        if not same:
            raise DemoFailure(f"{path} differs in the clone")
    note(f"{len(made)} models made by queries, all identical in the clone")
