"""The Git LFS Batch API on the wire: requests, answers, and what a refusal means to a user.

A request asks about at most 100 objects (the API's limit), offers only the
`basic` transfer and names SHA-256 as the hash. The answer gives each object
either actions (`upload`, `verify`, `download`: an href, headers, an expiry),
no actions (an upload the server already holds), or an error (404, 410, 422...).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from git_mgit.console.quoted import quoted
from git_mgit.transfer.stores.blobs import BlobStoreError, Pointer

MEDIA_TYPE = "application/vnd.git-lfs+json"
MAX_OBJECTS = 100
_EXPIRY_MARGIN_S = 5.0
_MAX_MESSAGE = 300
# Headers about the framing of a request or its connection: the HTTP client sets them for
# the body it sends. Taken from a server they would contradict it (GitLab's upload actions
# say `Transfer-Encoding: chunked`, and the body goes out framed by its Content-Length),
# so they are left out, as Go's net/http, git-lfs's client, ignores them in a header map.
_FRAMING = frozenset(
    {"connection", "content-length", "host", "keep-alive", "proxy-connection", "te", "trailer"}
    | {"transfer-encoding", "upgrade"}
)

# What to do when a batch request as a whole is refused, by status.
_ADVICE = {
    401: "check the credentials your git credential helper holds for this host",
    403: "check that your account may {access} this repository",
    404: "check the remote's URL, or set lfs.url / remote.<name>.lfsurl to the LFS server",
    406: "the server speaks another LFS API version; set lfs.url to its Batch API URL",
    413: "the server refused the request's size; push fewer objects at once",
    422: "the server rejected the request; report it with the message above",
    429: "the server is rate limiting; try again later",
    507: "the server is out of storage; ask its owner for space",
}
# What to do when the server refuses one object.
_OBJECT_ADVICE = {
    (
        "download",
        404,
    ): "it was never pushed there: push from a clone that has it, or fetch from another remote",
    ("download", 410): "the server removed it: push it again from a clone that has it",
    (
        "download",
        422,
    ): "the server's copy is damaged or incomplete: push it again from a clone that has it",
    ("upload", 403): "check that your account may write to this repository",
    ("upload", 413): "the server refuses objects this large: set mgit.maxObjectSize lower",
    ("upload", 422): "the server rejected it: report it with the message above",
    ("upload", 507): "the server is out of storage: ask its owner for space",
}


class BatchRefused(BlobStoreError):
    """A batch request refused as a whole; `status` and the server's `message` kept."""

    def __init__(self, text: str, status: int, message: str) -> None:
        super().__init__(text)
        self.status, self.message = status, message
        self.absent = status == 404


@dataclass(frozen=True)
class Action:
    """One step of a transfer: where to send the request, with which headers, until when."""

    href: str
    header: dict[str, str] = field(default_factory=dict)
    expires_at: float | None = None

    def expired(self) -> bool:
        return self.expires_at is not None and time.time() + _EXPIRY_MARGIN_S >= self.expires_at

    def headers(self, defaults: dict[str, str]) -> dict[str, str]:
        """The action's headers over `defaults`, a name given either way once (the action's)."""
        given = {k.lower() for k in self.header}
        return {k: v for k, v in defaults.items() if k.lower() not in given} | self.header


def header_map(raw: object) -> dict[str, str]:
    """The headers a server hands out (an action's, git-lfs-authenticate's), the framing
    ones left out; ValueError if they are no map of names to text, or hold a line break."""
    if not isinstance(raw, dict):
        raise ValueError("headers are not a JSON object")
    out = {}
    for key, value in raw.items():
        name, text = str(key), str(value)
        if any(c in name + text for c in "\r\n\0") or not name:
            raise ValueError("a header name or value holds a line break")
        if name.lower() not in _FRAMING:
            out[name] = text
    return out


@dataclass(frozen=True)
class Answer:
    """The server's answer for one object."""

    pointer: Pointer
    actions: dict[str, Action] = field(default_factory=dict)
    error: tuple[int, str] | None = None
    authenticated: bool = False  # the actions carry their own authorization


def request_body(operation: str, objects: Sequence[Pointer]) -> bytes:
    return json.dumps(
        {
            "operation": operation,
            "transfers": ["basic"],
            "objects": [{"oid": p.oid, "size": p.size} for p in objects],
            "hash_algo": "sha256",
        }
    ).encode()


def parse_answers(data: bytes, asked: Sequence[Pointer], where: str) -> dict[Pointer, Answer]:
    """Each asked object's answer; an object the server left out is an error of its own."""
    started = time.time()
    try:
        reply = json.loads(data)
        transfer = reply.get("transfer") or "basic"
        algo = reply.get("hash_algo") or "sha256"
        objects = reply["objects"]
        answers = {(str(o["oid"]), int(o["size"])): o for o in objects}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BlobStoreError(
            f"{where} answered a batch request with something that is not Batch API JSON; "
            "check that the LFS URL is the server's (lfs.url)"
        ) from None
    if transfer != "basic" or algo != "sha256":
        raise BlobStoreError(
            f"{where} chose transfer {transfer!r} with hash {algo!r}; git-mgit speaks basic "
            "transfers of SHA-256 objects only; ask the server's owner to allow them"
        )
    by_oid = {oid: o for (oid, _), o in answers.items()}
    result = {}
    for pointer in asked:
        raw = answers.get((pointer.oid, pointer.size)) or by_oid.get(pointer.oid)
        if raw is None:
            result[pointer] = Answer(pointer, error=(0, "the server's answer left this object out"))
            continue
        try:
            result[pointer] = _answer(pointer, raw, started)
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            raise BlobStoreError(
                f"{where} answered a batch request with an object it does not describe as "
                f"the Batch API does (sha256:{pointer.oid[:12]}: its error or actions); "
                "report it to the server's owner"
            ) from None
    return result


def _answer(pointer: Pointer, raw: dict, started: float) -> Answer:
    if raw.get("error"):
        err = raw["error"]
        return Answer(pointer, error=(int(err.get("code") or 0), str(err.get("message") or "")))
    actions = {}
    for name, spec in (raw.get("actions") or {}).items():
        href = spec["href"]
        if not isinstance(href, str) or not href:
            raise ValueError("an action without an href")
        actions[str(name)] = Action(
            href, header_map(spec.get("header") or {}), expiry(spec, started)
        )
    return Answer(pointer, actions, authenticated=bool(raw.get("authenticated")))


def expiry(spec: dict, started: float) -> float | None:
    """When an answer's `expires_in` (seconds from `started`) or `expires_at` ends it."""
    if spec.get("expires_in"):
        return started + float(spec["expires_in"])
    if spec.get("expires_at"):
        try:
            text = str(spec["expires_at"]).replace("Z", "+00:00")
            stamp = datetime.fromisoformat(text)
            return stamp.timestamp() if stamp.year > 1 else None  # Go's zero time: none given
        except (ValueError, OverflowError, OSError):
            return None
    return None


def server_message(data: bytes) -> str:
    """The `message` (and `documentation_url`) of an error body, as one short line."""
    try:
        reply = json.loads(data)
        message = str(reply.get("message") or "")
        doc = str(reply.get("documentation_url") or "")
    except (ValueError, AttributeError):
        return ""
    text = quoted(message, _MAX_MESSAGE)
    if doc:
        text += f" (see {quoted(doc, _MAX_MESSAGE)})"
    return text


def refused(where: str, operation: str, status: int, body: bytes) -> BatchRefused:
    """One line for a batch request the server refused as a whole."""
    message = server_message(body)
    access = "write to" if operation == "upload" else "read"
    advice = _ADVICE.get(status, "try again later, or report it to the server's owner")
    said = f": {message}" if message else ""
    return BatchRefused(
        f"{where} refused the batch {operation} request (HTTP {status}{said}); "
        + advice.format(access=access),
        status,
        message,
    )


def object_error(where: str, operation: str, answer: Answer, others: int = 0) -> BlobStoreError:
    """One line for an object (and `others` asked with it) the server refused to take or give."""
    code, message = answer.error or (0, "")
    advice = _OBJECT_ADVICE.get(
        (operation, code), "try again, or report it to the server's owner with the message"
    )
    text = quoted(message, _MAX_MESSAGE)
    verb = "give" if operation == "download" else "take"
    also = f" nor {others} other object(s) asked with it" if others else ""
    return BlobStoreError(
        f"{where} would not {verb} object sha256:{answer.pointer.oid[:12]}{also} "
        f"({answer.pointer.size} bytes; error {code}: {text or 'no message'}); {advice}"
    )
