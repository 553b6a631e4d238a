"""The S3 blob store against a real SeaweedFS on loopback, directly and through a fault proxy.

What the bucket holds is never sent again, nothing unverified reaches the
caller, faults (500, 429, connections dropped mid-upload and mid-download)
end byte-exact, and every refusal is one line that names S3's error code and
never a credential.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import obstore
import pytest

from git_mgit.gitcmd import find_repo
from git_mgit.transfer.stores.blobs import BlobStoreError, Pieces, Pointer
from git_mgit.transfer.stores.s3 import open_s3, parse_s3_url
from git_mgit.transfer.stores.s3 import store as s3_store
from git_mgit.transfer.stores.s3.store import Retry, S3Store
from tests.gitsandbox import run_git
from tests.servers.faults import FaultProxy
from tests.servers.seaweed import S3Bucket, SeaweedServer

FAST = Retry(attempts=4, first_backoff_s=0.01, max_backoff_s=0.2, within_s=60)
MiB = 1 << 20


def _objects(*sizes: int) -> dict[Pointer, bytes]:
    return {Pointer.of(data): data for data in (os.urandom(size) for size in sizes)}


def _store(url: str, retry: Retry = FAST, concurrency: int = 4) -> S3Store:
    return S3Store(parse_s3_url(url), concurrency=concurrency, retry=retry)


def _key(pointer: Pointer) -> str:
    return f"models/{pointer.oid[:2]}/{pointer.oid[2:4]}/{pointer.oid}"


@pytest.fixture
def proxy(s3_bucket: S3Bucket) -> Iterator[FaultProxy]:
    with FaultProxy(s3_bucket.endpoint) as proxy:
        yield proxy


def test_upload_then_download_is_byte_exact_under_the_documented_keys(s3_bucket: S3Bucket) -> None:
    objects = _objects(0, 1, 1000, 3 * MiB, 65 * MiB)  # 65 MiB: a multipart upload
    store = _store(s3_bucket.url())
    wanted = [*objects, next(iter(objects))]  # a repeat is sent and yielded once
    assert store.upload(wanted, objects.__getitem__) == len(objects)
    got = {}
    for pointer, data in store.download(wanted):
        assert pointer not in got
        got[pointer] = data
    assert got == objects
    raw = obstore.store.S3Store(
        s3_bucket.name,
        endpoint=s3_bucket.endpoint,
        region="us-east-1",
        client_options={"allow_http": True},
    )
    assert sorted(m["path"] for m in obstore.list(raw).collect()) == sorted(map(_key, objects))
    assert store.describe() == f"s3://{s3_bucket.name}/models at {s3_bucket.endpoint}"


def test_a_bucket_made_ready_is_empty_and_takes_objects(
    seaweed: SeaweedServer, s3_bucket: S3Bucket
) -> None:
    """The bench's buckets are made ready (their first volume grown before anything is
    timed): such a bucket lists nothing, as a new one, and takes and gives back objects.
    (`s3_bucket` puts the server's credentials in the environment.)"""
    ready = seaweed.new_bucket(ready=True)
    raw = obstore.store.S3Store(
        ready.name, endpoint=ready.endpoint, region="us-east-1", client_options={"allow_http": True}
    )
    assert [m for batch in obstore.list(raw) for m in batch] == []
    objects = _objects(1000, 2 * MiB)
    store = _store(ready.url())
    assert store.upload(list(objects), objects.__getitem__) == len(objects)
    assert dict(store.download(list(objects))) == objects


def test_the_store_goes_through_the_proxy_the_environment_names(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network that reaches the bucket only through a proxy: `HTTP_PROXY` (`HTTPS_PROXY`
    for https endpoints), as obstore reads it; every request goes through it."""
    from tests.servers.proxy import ForwardProxy

    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name)
    objects = _objects(1000, 2 * MiB)
    with ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        store = _store(s3_bucket.url())
        assert store.upload(list(objects), objects.__getitem__) == len(objects)
        assert dict(store.download(list(objects))) == objects
    bucket = f"{s3_bucket.endpoint}/{s3_bucket.name}/"
    assert {method for method, target in proxy.requests if target.startswith(bucket)} >= {
        "PUT",
        "GET",
    }


def test_what_the_bucket_holds_is_not_sent_again(s3_bucket: S3Bucket, proxy: FaultProxy) -> None:
    objects = _objects(*range(10, 15))
    store = _store(s3_bucket.url(endpoint=proxy.url))
    first = list(objects)[:3]
    assert store.upload(first, objects.__getitem__) == 3
    assert proxy.count("PUT") == 3
    assert store.upload(list(objects), objects.__getitem__) == 2
    assert proxy.count("PUT") == 5
    assert store.upload(list(objects), objects.__getitem__) == 0
    assert proxy.count("PUT") == 5
    assert store.missing(list(objects)) == []


def test_uploads_are_signed_without_hashing_their_bodies_again(
    s3_bucket: S3Bucket, proxy: FaultProxy
) -> None:
    """Each object's name is its SHA-256 and every download is checked against it, so a
    PUT's signature leaves the body out (UNSIGNED-PAYLOAD, as AWS's SDKs sign uploads over
    HTTPS) rather than hash every byte again; the store takes them, and they come back
    exact."""
    objects = _objects(*range(20, 24), 3 * MiB)
    store = _store(s3_bucket.url(endpoint=proxy.url))
    assert store.upload(list(objects), objects.__getitem__) == len(objects)
    puts = [seen.content_sha256 for seen in proxy.requests if seen.method == "PUT"]
    assert puts == ["UNSIGNED-PAYLOAD"] * len(objects)
    assert dict(store.download(list(objects))) == objects


def test_many_objects_are_asked_for_by_listing_not_one_head_each(
    s3_bucket: S3Bucket, proxy: FaultProxy
) -> None:
    objects = _objects(*range(1, 1201))  # ~4.7 objects per `aa/` shard: shards are listed
    store = _store(s3_bucket.url(endpoint=proxy.url), concurrency=8)
    held = list(objects)[::2]
    assert store.upload(held, objects.__getitem__) == len(held)
    before = len(proxy.requests)
    assert set(store.missing(list(objects))) == set(objects) - set(held)
    asked = proxy.requests[before:]
    assert len(asked) < len(objects) / 3
    assert proxy.count("GET", r"list-type=2") > 0


def test_an_upload_fed_lazily_asks_and_sends_before_the_last_object_is_known(
    s3_bucket: S3Bucket, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a push hashes its objects: the bucket is asked about each 2 MiB (here) of them
    once they are known, while later pointers are still being computed."""
    monkeypatch.setattr(s3_store, "_CHUNK_BYTES", 2 * MiB)
    objects = _objects(MiB, MiB, MiB, MiB, 3000)
    heads_seen: list[int] = []

    def hashed() -> Iterator[Pointer]:
        for pointer in objects:
            heads_seen.append(proxy.count("HEAD"))
            yield pointer

    def pieces(p: Pointer) -> Pieces:  # the bytes as views, as a pack gives them
        view = memoryview(objects[p])
        return Pieces([view[:65535], view[65535:]])

    store = _store(s3_bucket.url(endpoint=proxy.url))
    assert store.upload(hashed(), pieces) == 5
    assert heads_seen == [0, 0, 2, 2, 4]
    assert proxy.count("PUT") == 5
    assert dict(store.download(list(objects))) == objects


def test_an_upload_the_bucket_mostly_holds_grows_its_chunks_until_it_lists(
    s3_bucket: S3Bucket, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks stay small while the bucket lacks what they name (the PUTs start early),
    and grow 4x after each chunk it held whole: a re-push lists shards, not a HEAD a key."""
    monkeypatch.setattr(s3_store, "_CHUNK_BYTES", 1000)
    objects: dict[Pointer, bytes] = {}
    while len(objects) < 2000:  # 10 objects a chunk, no 4 of them in one shard
        data = os.urandom(100)
        pointer = Pointer.of(data)
        chunk = list(objects)[len(objects) - len(objects) % 10 :]
        if sum(p.oid[:2] == pointer.oid[:2] for p in chunk) < 3:
            objects[pointer] = data
    store = _store(s3_bucket.url(endpoint=proxy.url), concurrency=8)
    assert store.upload(list(objects), objects.__getitem__) == len(objects)
    assert proxy.count("GET", r"list-type=2") == 0  # none held: a HEAD each, no listing
    before = len(proxy.requests)
    assert store.upload(list(objects), objects.__getitem__) == 0
    asked = proxy.requests[before:]
    assert proxy.count("PUT") == len(objects)
    assert proxy.count("GET", r"list-type=2") > 0
    assert len(asked) < 0.75 * len(objects)


def test_an_object_of_the_wrong_size_counts_as_missing(s3_bucket: S3Bucket) -> None:
    objects = _objects(5000)
    (pointer,) = objects
    store = _store(s3_bucket.url())
    obstore.put(store._client, _key(pointer).removeprefix("models/"), b"cut short")
    assert store.missing([pointer]) == [pointer]
    assert store.upload([pointer], objects.__getitem__) == 1
    assert dict(store.download([pointer])) == objects


def test_a_corrupted_object_is_refused_and_nothing_is_yielded(s3_bucket: S3Bucket) -> None:
    objects = _objects(4096, 100)
    store = _store(s3_bucket.url())
    store.upload(list(objects), objects.__getitem__)
    victim = next(iter(objects))
    other = bytes(b ^ 0xFF for b in objects[victim])  # same size, other bytes, same key
    obstore.put(store._client, _key(victim).removeprefix("models/"), other)
    yielded = []
    with pytest.raises(BlobStoreError) as refused:
        for pointer, data in store.download([victim]):
            yielded.append((pointer, data))
    assert yielded == []
    message = str(refused.value)
    assert "\n" not in message
    assert f"sha256:{victim.oid[:12]}" in message and "corrupt" in message
    assert f"s3://{s3_bucket.name}/models" in message
    rest = [p for p in objects if p != victim]
    assert dict(store.download(rest)) == {p: objects[p] for p in rest}


def test_a_missing_object_is_one_line_naming_it(s3_bucket: S3Bucket) -> None:
    (pointer,) = _objects(10)
    with pytest.raises(BlobStoreError, match=rf"lacks object sha256:{pointer.oid[:12]}"):
        list(_store(s3_bucket.url()).download([pointer]))


def test_a_damaged_object_id_fails_before_any_request(
    s3_bucket: S3Bucket, proxy: FaultProxy
) -> None:
    store = _store(s3_bucket.url(endpoint=proxy.url))
    for damaged in (Pointer("../../etc/passwd", 1), Pointer("AB" * 32, 1)):
        with pytest.raises(BlobStoreError, match="is not a SHA-256"):
            list(store.download([damaged]))
        with pytest.raises(BlobStoreError, match="is not a SHA-256"):
            store.missing([damaged])
    assert proxy.requests == []


def test_a_wrong_secret_is_one_line_that_names_the_refusal_and_no_secret(
    s3_bucket: S3Bucket, seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = _objects(100)
    _store(s3_bucket.url()).upload(list(objects), objects.__getitem__)
    wrong = "wrong-secret-" + os.urandom(8).hex()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    store = _store(s3_bucket.url())
    for attempt in (
        lambda: store.missing(list(objects)),
        lambda: store.upload(list(_objects(7)), lambda p: b""),
        lambda: list(store.download(list(objects))),
    ):
        with pytest.raises(BlobStoreError) as refused:
            attempt()
        message = str(refused.value)
        assert "\n" not in message
        assert "SignatureDoesNotMatch" in message and "AWS_SECRET_ACCESS_KEY" in message
        for secret in (wrong, seaweed.secret_key, seaweed.access_key):
            assert secret not in message


def test_faults_on_the_way_end_byte_exact(s3_bucket: S3Bucket, proxy: FaultProxy) -> None:
    objects = _objects(200_000, 300_000, 2 * MiB, 1)
    store = _store(s3_bucket.url(endpoint=proxy.url))
    proxy.fail("HEAD", status=429, headers={"Retry-After": "1"})
    proxy.fail("PUT", times=2)
    proxy.fail("PUT", status=503)
    proxy.drop_request("PUT", after=100_000)  # cut mid-upload
    assert store.upload(list(objects), objects.__getitem__) == len(objects)
    assert proxy.armed == 0
    proxy.fail("GET", status=429, headers={"Retry-After": "1"})
    proxy.fail("GET", status=500)
    proxy.drop_response("GET", after=150_000)  # cut mid-download
    proxy.drop_request("GET")  # hung up before any answer
    assert dict(store.download(list(objects))) == objects
    assert proxy.armed == 0
    faulted = [seen for seen in proxy.requests if seen.fault]
    assert len(faulted) == 9


def test_a_store_that_keeps_failing_is_one_line(s3_bucket: S3Bucket, proxy: FaultProxy) -> None:
    objects = _objects(10)
    store = _store(s3_bucket.url(endpoint=proxy.url), Retry(attempts=2, first_backoff_s=0.01))
    proxy.fail("PUT", times=100)
    with pytest.raises(BlobStoreError) as refused:
        store.upload(list(objects), objects.__getitem__)
    message = str(refused.value)
    assert "\n" not in message
    assert (
        "HTTP 500" in message
        and "after 2 retries" in message
        and "run the command again" in message
    )
    assert proxy.count("PUT") == 3


def test_a_shared_credentials_profile_is_read(
    s3_bucket: S3Bucket, seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n"
        f"[team]\naws_access_key_id = {seaweed.access_key}\n"
        f"aws_secret_access_key = {seaweed.secret_key}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", "team")
    objects = _objects(10, 20)
    store = _store(s3_bucket.url())
    assert store.upload(list(objects), objects.__getitem__) == 2
    assert dict(store.download(list(objects))) == objects
    monkeypatch.setenv("AWS_PROFILE", "default")
    with pytest.raises(BlobStoreError) as refused:
        _store(s3_bucket.url()).missing(list(objects))
    assert "InvalidAccessKeyId" in str(refused.value) and "profile default" in str(refused.value)
    monkeypatch.setenv("AWS_PROFILE", "absent")
    with pytest.raises(BlobStoreError, match="AWS_PROFILE=absent names no profile"):
        _store(s3_bucket.url())


def test_a_profile_with_credential_process_goes_through_botocore(
    s3_bucket: S3Bucket, seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("botocore", reason="SSO, role and process profiles need boto3 (aws extra)")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    answer = {
        "Version": 1,
        "AccessKeyId": seaweed.access_key,
        "SecretAccessKey": seaweed.secret_key,
    }
    process = tmp_path / "credentials-process.py"
    process.write_text(f"import json\nprint(json.dumps({answer!r}))\n")
    config = tmp_path / "aws-config"
    config.write_text(f"[profile ci]\ncredential_process = {sys.executable} {process}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "ci")
    objects = _objects(30)
    store = _store(s3_bucket.url())
    assert store.upload(list(objects), objects.__getitem__) == 1
    assert dict(store.download(list(objects))) == objects


def test_no_credentials_for_a_custom_endpoint_is_one_line(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(BlobStoreError, match="no S3 credentials found; export AWS_ACCESS_KEY_ID"):
        _store(s3_bucket.url())


def test_git_config_gives_what_the_url_lacks(
    s3_bucket: S3Bucket, workrepo: Path, proxy: FaultProxy
) -> None:
    run_git("config", "mgit.s3Endpoint", s3_bucket.endpoint, cwd=workrepo)
    run_git("config", "mgit.s3Concurrency", "3", cwd=workrepo)
    repo = find_repo(workrepo)
    store = open_s3(repo, f"s3://{s3_bucket.name}/models")
    assert (store.location.endpoint, store.concurrency) == (s3_bucket.endpoint, 3)
    objects = _objects(10)
    assert store.upload(list(objects), objects.__getitem__) == 1
    recorded = open_s3(repo, s3_bucket.url(endpoint=proxy.url))  # the URL's own endpoint wins
    assert dict(recorded.download(list(objects))) == objects
    assert proxy.count("GET") == 1


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("s3://", "s3://bucket/prefix"),
        ("s3://Bad_Bucket/x", "not a bucket name"),
        ("s3://bucket/../x", "a prefix is folder names"),
        ("s3://bucket/x?endpoint=http://s3.example.com", "plain HTTP"),
        ("s3://bucket/x?endpoint=https://user:hunter2@s3.example.com", "holds credentials"),
        ("s3://bucket/x?acl=public", "unknown setting 'acl'"),
    ],
)
def test_a_bad_location_is_refused_in_one_line(url: str, why: str) -> None:
    with pytest.raises(BlobStoreError, match=why) as refused:
        parse_s3_url(url)
    assert "hunter2" not in str(refused.value)


def test_a_location_round_trips_through_its_url() -> None:
    location = parse_s3_url("s3://bucket/team/models/?region=eu-west-1&endpoint=https://h:9000/")
    assert (location.bucket, location.prefix) == ("bucket", "team/models")
    assert (location.endpoint, location.region) == ("https://h:9000", "eu-west-1")
    assert parse_s3_url(location.url) == location
    assert parse_s3_url("s3://bucket").prefix == ""


def test_the_filter_process_never_imports_the_s3_client() -> None:
    code = (
        "import sys, git_mgit.filters, git_mgit.transfer.stores.s3;"
        "assert 'obstore' not in sys.modules, 'obstore imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
