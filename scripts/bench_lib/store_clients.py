"""The stores' own protocols spoken by a plain client: the baseline of the stores section.

`python store_clients.py` reads a JSON spec on stdin, downloads a set of objects
from a store and uploads them again under another name, and prints the two
timings (wall seconds, and this process's CPU seconds) as JSON. It runs as a
process of its own, as git-mgit does, so it never competes with the bench's
in-process LFS server for the GIL.

- `lfs`: the Git LFS Batch API's `basic` transfer with urllib3: one batch
  request per 100 objects, then a GET (download) or a PUT and its `verify`
  (upload) per object, `concurrency` at once over one connection pool;
- `s3`: obstore GETs and PUTs of the same keys, `concurrency` at once, each
  object in one PUT up to the size git-mgit's S3 store does so (multipart above).

Nothing is hashed, checked or written to disk: this is what the wire and the
server allow, which git-mgit's push and clone are measured against.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

LFS_MEDIA = "application/vnd.git-lfs+json"
BATCH_MAX = 100


def s3_client(endpoint: str, bucket: str, access_key: str, secret_key: str) -> Any:
    """An obstore client of `bucket` on a loopback endpoint, with these keys."""
    from obstore.store import S3Store

    return S3Store(
        bucket,
        config={
            "endpoint": endpoint,
            "access_key_id": access_key,
            "secret_access_key": secret_key,
            "region": "us-east-1",
        },
        client_options={"allow_http": True},
    )


def bucket_bytes(client: Any, prefix: str) -> dict[str, int]:
    """Key -> size of every object under `prefix`."""
    import obstore

    return {
        meta["path"]: meta["size"] for page in obstore.list(client, prefix + "/") for meta in page
    }


def _seconds(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds of fn(), and the CPU seconds this process (every thread) spent in it."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def _each(fn: Callable[[Any], object], items: Sequence[Any], concurrency: int) -> None:
    """fn on every item, `concurrency` at once; the first failure is raised."""
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(fn, items))


def _result(
    get: tuple[float, float], put: tuple[float, float], held: dict[str, bytes]
) -> dict[str, float]:
    return {
        "get_s": get[0],
        "get_cpu_s": get[1],
        "put_s": put[0],
        "put_cpu_s": put[1],
        "objects": len(held),
        "bytes": sum(map(len, held.values())),
    }


def s3_roundtrip(spec: dict[str, Any]) -> dict[str, float]:
    """GET every object under spec["source"], then PUT them all under spec["target"]."""
    import obstore

    from git_mgit.transfer.stores.s3.store import _PART, _PARTS_AT_ONCE, _SINGLE_PUT_MAX

    client = s3_client(spec["endpoint"], spec["bucket"], spec["access_key"], spec["secret_key"])
    keys = sorted(bucket_bytes(client, spec["source"]))
    held: dict[str, bytes] = {}

    def get(key: str) -> None:
        held[key] = bytes(obstore.get(client, key).bytes())

    def put(key: str) -> None:
        data = held[key]
        obstore.put(
            client,
            spec["target"] + key[len(spec["source"]) :],
            data,
            use_multipart=len(data) > _SINGLE_PUT_MAX,
            chunk_size=_PART,
            max_concurrency=_PARTS_AT_ONCE,
        )

    got = _seconds(lambda: _each(get, keys, spec["concurrency"]))
    sent = _seconds(lambda: _each(put, keys, spec["concurrency"]))
    return _result(got, sent, held)


class _Lfs:
    """Batch requests with HTTP Basic, actions as the server hands them out."""

    def __init__(self, spec: dict[str, Any]) -> None:
        import urllib3

        self.http = urllib3.PoolManager(maxsize=spec["concurrency"] + 1, block=True)
        raw = f"{spec['username']}:{spec['password']}".encode()
        self.auth = "Basic " + base64.b64encode(raw).decode()

    def batch(self, url: str, operation: str, objects: Sequence[tuple[str, int]]) -> list[dict]:
        """Every object's answer, one request per 100."""
        answers: list[dict] = []
        for i in range(0, len(objects), BATCH_MAX):
            body = {
                "operation": operation,
                "transfers": ["basic"],
                "hash_algo": "sha256",
                "objects": [{"oid": o, "size": s} for o, s in objects[i : i + BATCH_MAX]],
            }
            headers = {"Accept": LFS_MEDIA, "Content-Type": LFS_MEDIA, "Authorization": self.auth}
            reply = self.http.request(
                "POST", f"{url}/objects/batch", body=json.dumps(body), headers=headers
            )
            if reply.status != 200:
                raise RuntimeError(f"batch {operation}: HTTP {reply.status} {reply.data[:200]!r}")
            answers += json.loads(reply.data)["objects"]
        return answers

    def send(
        self,
        method: str,
        action: dict[str, Any],
        body: bytes | None = None,
        media: str = "application/octet-stream",
    ) -> bytes:
        """One action's request; its body (the object, for a download)."""
        headers = {"Content-Type": media, "Accept": LFS_MEDIA, **action.get("header", {})}
        reply = self.http.request(method, action["href"], body=body, headers=headers)
        if not 200 <= reply.status < 300:
            raise RuntimeError(f"{method}: HTTP {reply.status}")
        return reply.data


def lfs_roundtrip(spec: dict[str, Any]) -> dict[str, float]:
    """Download spec["objects"] from spec["source"] (an LFS URL), upload them to spec["target"]."""
    lfs = _Lfs(spec)
    objects = [(oid, size) for oid, size in spec["objects"]]
    held: dict[str, bytes] = {}

    n = spec["concurrency"]

    def get(answer: dict) -> None:
        held[answer["oid"]] = lfs.send("GET", answer["actions"]["download"])

    def put(answer: dict) -> None:
        actions = answer.get("actions", {})
        if "upload" in actions:
            lfs.send("PUT", actions["upload"], held[answer["oid"]])
        if "verify" in actions:
            check = json.dumps({"oid": answer["oid"], "size": answer["size"]}).encode()
            lfs.send("POST", actions["verify"], check, LFS_MEDIA)

    got = _seconds(lambda: _each(get, lfs.batch(spec["source"], "download", objects), n))
    sent = _seconds(lambda: _each(put, lfs.batch(spec["target"], "upload", objects), n))
    return _result(got, sent, held)


def main() -> int:
    spec = json.load(sys.stdin)
    run = {"lfs": lfs_roundtrip, "s3": s3_roundtrip}[spec["store"]]
    print(json.dumps(run(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
