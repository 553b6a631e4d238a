"""Lineage records: the lines of a note on `refs/notes/mgit`.

A note is attached to the git object that *is* a model version (a manifest
blob, or the tree of a model folder) and holds one canonical JSON object per
line, sorted and de-duplicated, so `git notes merge -s cat_sort_uniq` merges
two clones' edits by plain set union:

    {"kind":"node","name":"base","path":"models/base.safetensors","time":1763800000000000,"type":"bert"}
    {"function":"train:finetune","kind":"provenance","parent":"<40 hex>","parent_path":"models/base.safetensors","time":...}
    {"kind":"version","previous":"<40 hex>","time":...}
    {"kind":"provenance","parent":"<40 hex>","removed":true,"time":...}
    {"code":"b3:...","id":"accuracy:b3:...","kind":"test","metrics":{"accuracy":0.93},"test":"accuracy","time":...}
    {"eps":0.0001,"kind":"compress","parent":"<40 hex>","stored_after":...,"stored_before":...,"time":...}

Nothing is ever deleted from a note. Each record sets one *key* (the node
itself, or one edge into it); among the records for a key the one with the
latest `time` (microseconds; ties broken by the line's text) wins, and a
winning record with `"removed": true` is a tombstone. That makes the notes a
last-writer-wins set: union-merge is always safe, and removing then re-adding
an edge works.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

FORMAT_KINDS = ("node", "provenance", "version", "possible_conflict", "test", "compress")
# A provenance function that is a model query (`git mgit query`'s slice or construct),
# its canonical text after the prefix, not a `module:callable` a worker can import.
QUERY_FUNCTION = "query: "
# The field that, with the kind, names what a record sets (its key); a test result is
# keyed by "NAME:CODE" (the test and the hash of its code), so new code means a new key.
_LINK = {"provenance": "parent", "version": "previous", "test": "id"}


@dataclass(frozen=True)
class Record:
    """One parsed line; `fields` holds everything but kind, time and removed."""

    kind: str
    time: int
    removed: bool
    fields: dict

    @property
    def key(self) -> tuple[str, str]:
        """What the record sets: ("node", "") or (edge kind, the other version)."""
        return self.kind, self.fields.get(_LINK.get(self.kind, ""), "")

    def line(self) -> str:
        body = {"kind": self.kind, "time": self.time, **self.fields}
        if self.removed:
            body["removed"] = True
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def now() -> int:
    """Record time: microseconds since the epoch, never going backwards in this process."""
    global _last
    t = max(time.time_ns() // 1000, _last + 1)
    _last = t
    return t


_last = 0


def make(kind: str, removed: bool = False, **fields: object) -> Record:
    clean = {k: v for k, v in fields.items() if v is not None}
    return Record(kind, now(), removed, clean)


def parse_line(line: str) -> Record | None:
    """A record, or None for a line this version does not understand (kept, ignored)."""
    try:
        body = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(body, dict) or body.get("kind") not in FORMAT_KINDS:
        return None
    stamp = body.pop("time", None)
    if not isinstance(stamp, int):
        return None
    kind = body.pop("kind")
    removed = bool(body.pop("removed", False))
    link = _LINK.get(kind)
    if link is not None and not isinstance(body.get(link), str):
        return None
    return Record(kind, stamp, removed, body)


def merge_text(existing: str, new: Iterable[Record]) -> str:
    """The note text after adding `new`: sorted unique lines (what cat_sort_uniq produces)."""
    lines = {ln for ln in existing.splitlines() if ln.strip()}
    lines.update(r.line() for r in new)
    return "".join(ln + "\n" for ln in sorted(lines))


def current(lines: Iterable[str]) -> dict[tuple[str, str], Record]:
    """The winning record per key (tombstones included; callers drop them)."""
    best: dict[tuple[str, str], tuple[int, str, Record]] = {}
    for line in lines:
        rec = parse_line(line)
        if rec is None:
            continue
        rank = (rec.time, line)
        held = best.get(rec.key)
        if held is None or rank > held[:2]:
            best[rec.key] = (*rank, rec)
    return {key: held[2] for key, held in best.items()}
