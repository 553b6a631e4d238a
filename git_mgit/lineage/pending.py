"""Lineage records of merges, held back until the merged version is in history.

The merge driver runs before git has committed anything, and a merge can
still be aborted; a note on a version that never reaches history would be a
ghost in the graph. So the driver (and `git mgit resolve`) writes what it
knows to `.git/mgit/merges/<merged version>.json`, and the next lineage load
or push that finds that version in history turns it into notes: provenance
edges from both parents (function "merge", with the strategies used) and,
when changes on both sides touched dependent tensors, a `possible_conflict`
record for `git mgit test --pending`. Files whose version never made it are
dropped after STALE_DAYS.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Container
from pathlib import Path

from git_mgit.gitcmd import Repo
from git_mgit.lineage import notes, records

STALE_DAYS = 30
POSSIBLE_CONFLICT = "possible_conflict"


def _dir(repo: Repo) -> Path:
    return repo.mgit_dir / "merges"


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
    body = {
        "path": path,
        "merged": merged,
        "parents": list(parents),
        "base": base,
        "strategies": strategies,
        "dependent": None if dependent is None else {"ours": dependent[0], "theirs": dependent[1]},
        "created": int(time.time()),
    }
    folder = _dir(repo)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{merged}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(body, sort_keys=True, indent=1), encoding="utf-8")
    os.replace(tmp, folder / f"{merged}.json")


def waiting(repo: Repo) -> bool:
    """Whether any merge waits (cheap: one directory listing)."""
    folder = _dir(repo)
    return folder.is_dir() and any(p.suffix == ".json" for p in folder.iterdir())


def _records(body: dict) -> list[records.Record]:
    strategies = "; ".join(f"{k}={v}" for k, v in sorted(body["strategies"].items())) or None
    out = [
        records.make(
            "provenance",
            parent=p,
            parent_path=body["path"],
            function="merge",
            strategies=strategies,
        )
        for p in body["parents"]
    ]
    if body.get("dependent"):
        out.append(
            records.make(
                POSSIBLE_CONFLICT,
                base=body.get("base"),
                ours=body["dependent"]["ours"],
                theirs=body["dependent"]["theirs"],
            )
        )
    return out


def finalize(repo: Repo, in_history: Container[str]) -> int:
    """Write the notes of waiting merges whose version is in history; returns how many."""
    folder = _dir(repo)
    if not folder.is_dir():
        return 0
    ready: dict[str, list[records.Record]] = {}
    done: list[Path] = []
    for file in sorted(folder.glob("*.json")):
        try:
            body = json.loads(file.read_text(encoding="utf-8"))
            merged = body["merged"]
        except (OSError, ValueError, KeyError):
            continue  # half-written or foreign: leave it
        if merged in in_history:
            ready.setdefault(merged, []).extend(_records(body))
            done.append(file)
        elif time.time() - body.get("created", 0) > STALE_DAYS * 86400:
            done.append(file)  # aborted, or reset away: its version never made history

    def edit(snapshot: notes.Notes) -> dict[str, str]:
        return {
            oid: records.merge_text(snapshot.texts.get(oid, ""), recs)
            for oid, recs in ready.items()
        }

    if ready:
        notes.write(repo, edit, f"record {len(ready)} merge(s)")
    for file in done:
        file.unlink(missing_ok=True)
    return len(ready)
