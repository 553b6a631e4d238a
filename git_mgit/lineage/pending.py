"""Lineage records held back until their model version is in history.

Some commands make a model version before git has committed it: the merge
driver and `git mgit resolve` (a merge can still be aborted), `git mgit
compress` (the user may never commit the rewritten file). A note on a
version that never reaches history would be a ghost in the graph. So they
write the records to `.git/mgit/pending/<version>.<what>.json`, and the next
lineage load or push that finds that version in history turns them into
notes. Files whose version never made it are dropped after STALE_DAYS.

A merge holds provenance edges from both parents (function "merge", with the
strategies used) and, when changes on both sides touched dependent tensors,
a `possible_conflict` record for `git mgit test --pending`; a lossy
compression holds its `compress` record and the test results it measured.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Container, Iterable
from pathlib import Path

from git_mgit.gitcmd import Repo
from git_mgit.lineage import notes, records

STALE_DAYS = 30
POSSIBLE_CONFLICT = "possible_conflict"


def _dir(repo: Repo) -> Path:
    return repo.mgit_dir / "pending"


def hold(repo: Repo, version: str, recs: Iterable[records.Record], what: str) -> None:
    """Keep `recs` for `version` (a model version id) until it is in history.

    `what` names the file (a merge, a compress), so holds of different
    commands on one version never replace each other.
    """
    body = {"version": version, "records": [r.line() for r in recs], "created": int(time.time())}
    folder = _dir(repo)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{version}.{what}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(body, sort_keys=True, indent=1), encoding="utf-8")
    os.replace(tmp, folder / f"{version}.{what}.json")


def record(
    repo: Repo,
    path: str,
    merged: str,
    parents: tuple[str, str],
    base: str | None,
    strategies: dict[str, str],
    dependent: tuple[list[str], list[str]] | None,
) -> None:
    """Remember a merge that produced `merged` (a version id) from `parents` (ours, theirs)."""
    summary = "; ".join(f"{k}={v}" for k, v in sorted(strategies.items())) or None
    recs = [
        records.make("provenance", parent=p, parent_path=path, function="merge", strategies=summary)
        for p in parents
    ]
    if dependent is not None:
        recs.append(
            records.make(POSSIBLE_CONFLICT, base=base, ours=dependent[0], theirs=dependent[1])
        )
    hold(repo, merged, recs, "merge")


def waiting(repo: Repo) -> bool:
    """Whether any records wait (cheap: one directory listing)."""
    folder = _dir(repo)
    return folder.is_dir() and any(p.suffix == ".json" for p in folder.iterdir())


def finalize(repo: Repo, in_history: Container[str]) -> int:
    """Write the held records of versions now in history; returns how many versions."""
    folder = _dir(repo)
    if not folder.is_dir():
        return 0
    ready: dict[str, list[records.Record]] = {}
    done: list[Path] = []
    for file in sorted(folder.glob("*.json")):
        try:
            body = json.loads(file.read_text(encoding="utf-8"))
            version = body["version"]
            held = [records.parse_line(line) for line in body["records"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # half-written or foreign: leave it
        if version in in_history:
            ready.setdefault(version, []).extend(r for r in held if r is not None)
            done.append(file)
        elif time.time() - body.get("created", 0) > STALE_DAYS * 86400:
            done.append(file)  # aborted, or reset away: its version never made history

    def edit(snapshot: notes.Notes) -> dict[str, str]:
        return {
            oid: records.merge_text(snapshot.texts.get(oid, ""), recs)
            for oid, recs in ready.items()
        }

    if ready:
        notes.write(repo, edit, f"record the lineage of {len(ready)} new version(s)")
    for file in done:
        file.unlink(missing_ok=True)
    return len(ready)
