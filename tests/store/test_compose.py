"""ObjectStore.compose (multipart assembly with server-side range copies), every backend.

The same contract on memory, local and s3 (moto): create-only, parts in order,
copied ranges pinned to the source ETag, S3's 5 MiB rule for non-final parts,
nothing left behind on failure, and the bytes counted as copied or uploaded.
"""

from __future__ import annotations

import os
import uuid

import pytest

from caslake.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StoreCapabilityUnsupported,
)
from caslake.store import CopyFrom, ObjectStore, S3Store, open_store
from caslake.store.base import MIN_PART_SIZE
from caslake.store.s3_multipart import multipart_etag
from caslake.testing.moto_server import storage_options
from tests.conftest import make_bucket
from tests.store.rejecting_proxy import rejecting_upload_part_copy

MiB = 1024 * 1024


def _source(store: ObjectStore, size: int = 12 * MiB) -> tuple[str, bytes, str]:
    data = os.urandom(size)
    key = f"data/src-{uuid.uuid4().hex}.bin"
    etag = store.put(key, data)
    return key, data, etag


def test_compose_copies_ranges_and_bytes_in_order(any_store: ObjectStore) -> None:
    key, data, etag = _source(any_store)
    new = os.urandom(MIN_PART_SIZE)
    any_store.counters.reset()
    parts = [CopyFrom(key, 0, 5 * MiB + 7, etag), new,
             CopyFrom(key, 6 * MiB, 12 * MiB, etag), b"tail"]
    tag = any_store.compose("data/out.bin", parts)
    counters = any_store.counters.snapshot()
    assert counters["bytes_copied"] == (5 * MiB + 7) + 6 * MiB
    assert counters["bytes_out"] == len(new) + 4
    assert counters["bytes_in"] == 0  # nothing crossed the wire downwards
    got = any_store.get("data/out.bin")
    assert got.etag == tag
    assert got.data == data[:5 * MiB + 7] + new + data[6 * MiB:] + b"tail"
    assert list(any_store.list_multipart_uploads()) == []


def test_compose_is_create_only(any_store: ObjectStore) -> None:
    key, _, etag = _source(any_store)
    any_store.put("data/out.bin", b"mine")
    with pytest.raises(AlreadyExists):
        any_store.compose("data/out.bin", [CopyFrom(key, 0, 6 * MiB, etag), b"x"])
    assert any_store.get("data/out.bin").data == b"mine"
    assert list(any_store.list_multipart_uploads()) == []


def test_compose_refuses_a_changed_source_and_leaves_nothing(any_store: ObjectStore) -> None:
    key, _, etag = _source(any_store)
    any_store.put(key, os.urandom(12 * MiB))  # replaced behind the planner's back
    with pytest.raises(PreconditionFailed):
        any_store.compose("data/out.bin", [CopyFrom(key, 0, 6 * MiB, etag), b"x"])
    assert not any_store.exists("data/out.bin")
    assert list(any_store.list_multipart_uploads()) == []


def test_compose_missing_source_is_not_found(any_store: ObjectStore) -> None:
    with pytest.raises(NotFound):
        any_store.compose("data/out.bin", [CopyFrom("data/nope", 0, 6 * MiB, '"x"'), b"x"])
    assert not any_store.exists("data/out.bin")
    assert list(any_store.list_multipart_uploads()) == []


def test_compose_enforces_the_part_size_rule(any_store: ObjectStore) -> None:
    key, _, etag = _source(any_store)
    with pytest.raises(InvalidArgument, match="at least"):
        any_store.compose("data/out.bin", [CopyFrom(key, 0, MiB, etag), b"x"])
    with pytest.raises(InvalidArgument):
        any_store.compose("data/out.bin", [])
    # the last part may be small, a single part too
    any_store.compose("data/small.bin", [CopyFrom(key, 0, 10, etag)])
    assert any_store.get("data/small.bin").data == any_store.get(key).data[:10]


@pytest.mark.s3
def test_s3_compose_is_a_multipart_upload_with_part_copies(s3_uri: str,
                                                            s3_options: dict[str, str]) -> None:
    store = open_store(s3_uri, s3_options)
    assert isinstance(store, S3Store)
    key, _, etag = _source(store)
    store.counters.reset()
    tag = store.compose("data/out.bin", [CopyFrom(key, 0, 6 * MiB, etag), b"abc"])
    counts = store.counters.snapshot()
    assert counts["mpu_create"] == 1 and counts["mpu_copy_part"] == 1
    assert counts["mpu_upload_part"] == 1 and counts["mpu_complete"] == 1
    assert tag.endswith('-2"')  # a multipart ETag


@pytest.mark.s3
def test_s3_endpoint_without_upload_part_copy_is_a_typed_capability_error(
        moto_server: str) -> None:
    bucket = make_bucket(moto_server)
    with rejecting_upload_part_copy(moto_server) as proxy:
        store = open_store(f"s3://{bucket}/t", storage_options(proxy))
        key, _, etag = _source(store)
        with pytest.raises(StoreCapabilityUnsupported):
            store.compose("data/out.bin", [CopyFrom(key, 0, 6 * MiB, etag), b"x"])
        assert not store.exists("data/out.bin")
        assert list(store.list_multipart_uploads()) == []


@pytest.mark.s3
def test_s3_stale_uploads_are_listed_and_aborted(s3_uri: str,
                                                 s3_options: dict[str, str]) -> None:
    store = open_store(s3_uri, s3_options)
    assert isinstance(store, S3Store)
    client = store.boto3_client()
    client.create_multipart_upload(Bucket=store.bucket, Key=store.full_key("data/left.bin"))
    uploads = store.list_multipart_uploads()
    assert [u.key for u in uploads] == ["data/left.bin"]
    assert store.list_multipart_uploads("tombstone/") == []
    store.abort_multipart_upload(uploads[0])
    store.abort_multipart_upload(uploads[0])  # twice is fine
    assert store.list_multipart_uploads() == []


def test_multipart_etag_formula() -> None:
    # Two parts whose MD5s are known: the S3 formula is md5(concat(binary md5s))-N.
    import hashlib

    a, b = hashlib.md5(b"a").hexdigest(), hashlib.md5(b"b").hexdigest()
    want = hashlib.md5(bytes.fromhex(a) + bytes.fromhex(b)).hexdigest()
    assert multipart_etag([f'"{a}"', b]) == f'"{want}-2"'


@pytest.mark.s3
def test_s3_prepare_compose_sets_up_the_multipart_client_in_the_background(
        s3_uri: str, s3_options: dict[str, str]) -> None:
    store = open_store(s3_uri, s3_options)
    other = open_store(s3_uri, s3_options)
    assert isinstance(store, S3Store) and isinstance(other, S3Store)
    store.prepare_compose()
    store.close()  # waits for the store's threads: the client is made by then
    assert store._boto3 is not None
    client = store._boto3
    key, data, etag = _source(store)
    store.compose("data/out.bin", [CopyFrom(key, 0, 6 * MiB, etag), b"tail"])
    assert store.boto3_client() is client  # kept, not made again
    assert other.get("data/out.bin").data == data[:6 * MiB] + b"tail"
    other.prepare_compose()  # a hint on any store: never fails
    open_store("memory://hint", None).prepare_compose()
