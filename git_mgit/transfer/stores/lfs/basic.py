"""The `basic` transfer adapter: one object up (PUT, then `verify`) or down (GET), with retries.

The action's href and headers are used as given. An action that expired, or
whose href answers 401/403 once, is asked for again with a one-object batch
request (its token may have run out while the object waited its turn). An
action with no Authorization of its own gets git's credentials for its host
only if that host asks (tq/adapterbase.go).
"""

from __future__ import annotations

import json

from git_mgit.transfer.stores.blobs import BlobStoreError, Body, Data, Pieces
from git_mgit.transfer.stores.lfs import batch
from git_mgit.transfer.stores.lfs.api import BatchApi
from git_mgit.transfer.stores.lfs.batch import Action, Answer
from git_mgit.transfer.stores.lfs.http import read_body, read_object
from git_mgit.transfer.stores.lfs.retry import Transient

_EXPIRED = frozenset({401, 403})


class _Actions:
    """One object's current answer, renewed when its action expires."""

    def __init__(self, api: BatchApi, operation: str, answer: Answer) -> None:
        self.api, self.operation, self.answer = api, operation, answer
        self.renewed = False

    def get(self, name: str) -> Action | None:
        action = self.answer.actions.get(name)
        if action is not None and action.expired():
            self.renew()
            action = self.answer.actions.get(name)
        return action

    def renew(self) -> None:
        answer = self.api.batch(self.operation, [self.answer.pointer])[self.answer.pointer]
        if answer.error:
            raise batch.object_error(self.api.where, self.operation, answer)
        self.answer, self.renewed = answer, True

    def cred_url(self, action: Action) -> str | None:
        if self.answer.authenticated or any(k.lower() == "authorization" for k in action.header):
            return None
        return self.api.credential_url(action.href)

    def refused(self, status: int, body: bytes, doing: str) -> BlobStoreError | Transient:
        """A storage href's refusal: renew a stale action once, else one line for the user."""
        if status in _EXPIRED and not self.renewed:
            self.renew()
            return Transient(f"HTTP {status} from storage; action renewed")
        said = batch.server_message(body)
        return BlobStoreError(
            f"{self.api.where}: {doing} object sha256:{self.answer.pointer.oid[:12]} failed "
            f"(HTTP {status}{': ' + said if said else ''}); "
            "try again, or report it to the server's owner with the message"
        )


def upload(api: BatchApi, answer: Answer, data: Body) -> bool:
    """PUT the object where the server said, then verify; False if it turned out to be there."""
    actions = _Actions(api, "upload", answer)
    pointer = answer.pointer

    def put() -> bool:
        action = actions.get("upload")
        if action is None:
            return False  # renewed: the server has it now
        headers = action.headers({"Content-Type": "application/octet-stream"})
        if isinstance(data, Pieces):  # sent as its runs, framed by Content-Length (not chunked)
            headers["Content-Length"] = str(len(data))
        response = api.http.send(
            "PUT", action.href, headers=headers, body=data, cred_url=actions.cred_url(action)
        )
        body = read_body(response, action.href)
        if 200 <= response.status < 300:
            return True
        raise actions.refused(response.status, body, "uploading")

    def verify() -> None:
        action = actions.get("verify")
        if action is None:
            return
        response = api.http.send(
            "POST",
            action.href,
            headers=action.headers({"Accept": batch.MEDIA_TYPE, "Content-Type": batch.MEDIA_TYPE}),
            body=json.dumps({"oid": pointer.oid, "size": pointer.size}).encode(),
            cred_url=actions.cred_url(action),
        )
        body = read_body(response, action.href)
        if not 200 <= response.status < 300:
            raise actions.refused(response.status, body, "verifying the upload of")

    name = f"sha256:{pointer.oid[:12]}"
    if not api.retry.run(f"uploading {name} to {api.where}", put):
        return False
    api.retry.run(f"verifying {name} on {api.where}", verify)
    return True


def download(api: BatchApi, answer: Answer) -> Data:
    """The object's bytes as the server sent them (at most size + 1 bytes read; unverified)."""
    actions = _Actions(api, "download", answer)
    pointer = answer.pointer

    def get() -> Data:
        action = actions.get("download")
        if action is None:
            raise batch.object_error(
                api.where, "download", Answer(pointer, error=(0, "no download action given"))
            )
        response = api.http.send(
            "GET", action.href, headers=dict(action.header), cred_url=actions.cred_url(action)
        )
        if 200 <= response.status < 300:
            return read_object(response, action.href, pointer.size)
        body = read_body(response, action.href, limit=64 * 1024)
        if response.status in (404, 410):
            error = Answer(pointer, error=(response.status, batch.server_message(body)))
            raise batch.object_error(api.where, "download", error)
        raise actions.refused(response.status, body, "downloading")

    return api.retry.run(f"downloading sha256:{pointer.oid[:12]} from {api.where}", get)
