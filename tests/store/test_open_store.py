"""open_store URI dispatch, S3 settings resolution (options, then environment),
error mapping and the S3-specific extras (boto3 accessor, LIST page counting)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import obstore.exceptions as obx
import pytest

from caslake.errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    StoreConfigError,
    StoreError,
    TransientStoreError,
)
from caslake.store import LIST, LocalStore, MemoryStore, PutMode, S3Store, open_store
from caslake.store.s3 import map_obstore_error, parse_s3_uri, resolve_s3_settings

AWS_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID",
           "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# --- dispatch ------------------------------------------------------------------------


def test_memory_uris() -> None:
    a = open_store("memory://shared-test-space")
    b = open_store("memory://shared-test-space")
    assert isinstance(a, MemoryStore) and a.uri == "memory://shared-test-space"
    a.put("k", b"v")
    assert b.get("k").data == b"v"  # same name, same data: a table can be reopened
    p, q = open_store("memory://"), open_store("memory://")
    p.put("k", b"v")
    assert not q.exists("k")  # unnamed spaces are private
    assert not open_store("memory://other-space").exists("k")


def test_local_paths_and_file_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = open_store(str(tmp_path / "t"))
    assert isinstance(plain, LocalStore) and plain.root == tmp_path / "t"
    via_uri = open_store((tmp_path / "t").as_uri())
    assert isinstance(via_uri, LocalStore) and via_uri.root == tmp_path / "t"
    assert via_uri.uri == plain.uri == (tmp_path / "t").as_uri()
    monkeypatch.chdir(tmp_path)
    relative = open_store("rel/table")
    assert isinstance(relative, LocalStore) and relative.root == tmp_path / "rel" / "table"
    plain.put("x/y", b"1")
    assert via_uri.get("x/y").data == b"1"


def test_s3_uris(clean_env: pytest.MonkeyPatch) -> None:
    store = open_store("s3://my-bucket/tables/events")
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.uri) == (
        "my-bucket", "tables/events", "s3://my-bucket/tables/events")
    assert parse_s3_uri("s3://b1k") == ("b1k", "")
    assert parse_s3_uri("s3://bkt/") == ("bkt", "")
    assert parse_s3_uri("s3://bkt//a//b/") == ("bkt", "a/b")
    assert S3Store("s3://bkt//a//b/").full_key("c/d") == "a/b/c/d"


@pytest.mark.parametrize("uri", [
    "s3://", "s3:///prefix", "s3://-bad/x", "s3://bkt/x?versionId=3", "s3://bkt/a/../b",
    "gs://Bad_Bucket/x", "gs://bkt/a/../b", "ftp://host/x", "az://c/x", "", "   ", "file://relative/path",
])
def test_bad_uris_raise_store_config_error_naming_the_uri(uri: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        open_store(uri)
    assert repr(uri) in str(info.value)


def test_storage_options_only_apply_to_s3(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="endpoint_url"):
        open_store("memory://x", {"endpoint_url": "http://localhost"})
    with pytest.raises(StoreConfigError):
        open_store(str(tmp_path), {"region": "eu-west-1"})
    assert isinstance(open_store(str(tmp_path), {}), LocalStore)


def test_local_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(StoreConfigError):
        open_store(str(tmp_path / "f"))


# --- S3 settings ---------------------------------------------------------------------


def test_options_win_over_environment() -> None:
    env = {"AWS_ENDPOINT_URL": "http://env:1", "AWS_REGION": "eu-west-1",
           "AWS_ACCESS_KEY_ID": "env-id", "AWS_SECRET_ACCESS_KEY": "env-secret",
           "AWS_SESSION_TOKEN": "env-token"}
    s = resolve_s3_settings("s3://bkt/p", {"endpoint_url": "https://opt:2/", "region": "us-west-2",
                                         "aws_access_key_id": "opt-id",
                                         "aws_secret_access_key": "opt-secret"}, env)
    assert (s.endpoint_url, s.region) == ("https://opt:2", "us-west-2")
    # Credentials come as a group: the environment's token is not mixed in.
    assert (s.access_key_id, s.secret_access_key, s.session_token) == (
        "opt-id", "opt-secret", None)
    assert s.allow_http is False and s.virtual_hosted_style is False
    assert "opt-secret" not in repr(s)


def test_environment_fallback() -> None:
    env = {"AWS_ENDPOINT_URL": "http://minio:9000", "AWS_DEFAULT_REGION": "eu-central-1",
           "AWS_ACCESS_KEY_ID": "env-id", "AWS_SECRET_ACCESS_KEY": "env-secret",
           "AWS_SESSION_TOKEN": "env-token"}
    s = resolve_s3_settings("s3://bkt/p", None, env)
    assert (s.bucket, s.prefix, s.endpoint_url, s.region) == (
        "bkt", "p", "http://minio:9000", "eu-central-1")
    assert (s.access_key_id, s.secret_access_key, s.session_token) == (
        "env-id", "env-secret", "env-token")
    assert s.allow_http is True  # the endpoint is plain http
    assert s.virtual_hosted_style is False  # explicit endpoint: path style
    # AWS_REGION wins over AWS_DEFAULT_REGION; AWS_ENDPOINT_URL_S3 over AWS_ENDPOINT_URL.
    env |= {"AWS_REGION": "ap-south-1", "AWS_ENDPOINT_URL_S3": "https://s3-only:1"}
    s = resolve_s3_settings("s3://bkt/p", {}, env)
    assert (s.region, s.endpoint_url, s.allow_http) == ("ap-south-1", "https://s3-only:1", False)


def test_defaults_without_anything() -> None:
    s = resolve_s3_settings("s3://bucket/x", None, {})
    assert s.endpoint_url is None and s.region == "us-east-1"
    assert s.access_key_id is None and s.secret_access_key is None
    assert s.virtual_hosted_style is True  # AWS itself
    assert resolve_s3_settings("s3://dotted.bucket/x", None, {}).virtual_hosted_style is False
    assert (s.max_retries, s.retry_timeout) == (3, 20.0)


@pytest.mark.parametrize(("options", "fragment"), [
    ({"endpoint_url": "http://x:1", "allow_http": "false"}, "allow_http"),
    ({"allow_http": "maybe"}, "boolean"),
    ({"aws_access_key_id": "id"}, "incomplete"),
    ({"secret_access_key": "s"}, "without access_key_id"),
    ({"endpoint_url": "minio:9000"}, "http://"),
    ({"bogus_option": "1"}, "bogus_option"),
    ({"max_retries": "lots"}, "not a number"),
])
def test_bad_options(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(StoreConfigError, match=fragment) as info:
        resolve_s3_settings("s3://bkt/p", options, {})
    assert "'s3://bkt/p'" in str(info.value)


def test_boolean_and_numeric_options() -> None:
    s = resolve_s3_settings("s3://bkt/p", {"endpoint_url": "https://e", "allow_http": True,
                                         "virtual_hosted_style": "TRUE", "max_retries": "0",
                                         "retry_timeout": "2.5"}, {})
    assert s.allow_http and s.virtual_hosted_style
    assert (s.max_retries, s.retry_timeout) == (0, 2.5)


@pytest.mark.s3
def test_s3_store_configured_only_by_environment(clean_env: pytest.MonkeyPatch, s3_uri: str,
                                                 s3_options: dict[str, str]) -> None:
    clean_env.setenv("AWS_ENDPOINT_URL", s3_options["endpoint_url"])
    clean_env.setenv("AWS_ACCESS_KEY_ID", s3_options["access_key_id"])
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", s3_options["secret_access_key"])
    clean_env.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = open_store(s3_uri)
    etag = store.put("k", b"from env", mode=PutMode.CREATE)
    assert store.get("k").etag == etag


@pytest.mark.s3
def test_wrong_credentials_are_a_config_error(s3_uri: str, s3_options: dict[str, str],
                                              moto_server: str) -> None:
    # moto accepts any key, so check the bucket-does-not-exist path instead.
    store = open_store("s3://no-such-bucket-caslake/x", s3_options)
    with pytest.raises(StoreConfigError, match="bucket"):
        store.put("k", b"v")
    with pytest.raises(NotFound):
        store.get("k")


def test_unreachable_endpoint_is_transient_and_bounded(clean_env: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = open_store("s3://bucket/p", {
        "endpoint_url": f"http://127.0.0.1:{port}", "access_key_id": "a",
        "secret_access_key": "b", "max_retries": "1", "retry_timeout": "2"})
    started = time.monotonic()
    with pytest.raises(TransientStoreError):
        store.get("k")
    with pytest.raises(TransientStoreError):
        store.put("k", b"v", mode=PutMode.CREATE)
    assert time.monotonic() - started < 10


# --- error mapping -------------------------------------------------------------------


def test_map_obstore_error() -> None:
    def mapped(exc: BaseException, op: str = "get") -> StoreError:
        err = map_obstore_error(exc, op=op, key="k", where="s3://bkt/p")  # type: ignore[arg-type]
        assert isinstance(err, StoreError)
        assert err.key == "k"
        return err

    assert type(mapped(FileNotFoundError("x"))) is NotFound
    assert type(mapped(FileNotFoundError("x"), "put")) is StoreConfigError
    assert type(mapped(obx.AlreadyExistsError("x"), "put_create")) is AlreadyExists
    assert type(mapped(obx.PreconditionError("x"), "put_create")) is AlreadyExists
    assert type(mapped(obx.PreconditionError("x"), "put_cas")) is PreconditionFailed
    assert type(mapped(obx.AlreadyExistsError("x"), "put_cas")) is PreconditionFailed
    assert type(mapped(obx.PreconditionError("x"), "get_range")) is PreconditionFailed
    assert type(mapped(obx.PermissionDeniedError("x"))) is StoreConfigError
    assert type(mapped(obx.UnauthenticatedError("x"))) is StoreConfigError
    slow_down = obx.GenericError(
        "Error performing PUT http://h/b/k in 1s, after 3 retries - Server returned non-2xx "
        "status code: 503 Service Unavailable: <Code>SlowDown</Code>")
    assert type(mapped(slow_down, "put")) is TransientStoreError
    assert type(mapped(obx.GenericError("HttpError { kind: Timeout }"))) is TransientStoreError
    assert type(mapped(TimeoutError("t"))) is TransientStoreError
    bad_request = obx.GenericError("Server returned non-2xx status code: 400 Bad Request")
    assert type(mapped(bad_request)) is StoreError
    assert type(mapped(obx.GenericError("416 Range Not Satisfiable"), "get_range")) is StoreError


# --- S3 extras -----------------------------------------------------------------------


@pytest.mark.s3
def test_boto3_client_sees_the_same_objects(s3_uri: str, s3_options: dict[str, str]) -> None:
    store = open_store(s3_uri, s3_options)
    assert isinstance(store, S3Store)
    etag = store.put("dir/k", b"via obstore")
    client = store.boto3_client()
    assert store.boto3_client() is client
    got = client.get_object(Bucket=store.bucket, Key=store.full_key("dir/k"))
    assert got["Body"].read() == b"via obstore"
    assert got["ETag"] == etag
    assert store.counters.snapshot()["put"] == 1  # boto3 traffic is not counted


@pytest.mark.s3
def test_s3_list_counts_one_request_per_page(s3_uri: str, s3_options: dict[str, str]) -> None:
    store = open_store(s3_uri, s3_options)
    assert isinstance(store, S3Store)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: store.put(f"m/{i:05d}", b""), range(1003)))
    store.put("n/0", b"")
    store.counters.reset()
    assert len(list(store.list("m/"))) == 1003
    assert store.counters.count(LIST) == 2
    store.counters.reset()
    assert [m.key for m in store.list("m/0000")] == [f"m/{i:05d}" for i in range(10)]
    assert store.counters.count(LIST) == 1  # starts just before the prefix, stops after it
    store.counters.reset()
    assert [m.key for m in store.list("m/010")] == [f"m/{i:05d}" for i in range(1000, 1003)]
    assert store.counters.count(LIST) == 1


def test_storage_options_documents_every_key_the_s3_store_reads() -> None:
    from caslake import StorageOptions
    from caslake.store.azure import _OPTION_ALIASES as AZURE_KEYS
    from caslake.store.gcs import _OPTION_ALIASES as GCS_KEYS
    from caslake.store.s3 import _OPTION_ALIASES

    assert set(StorageOptions.__annotations__) == (set(_OPTION_ALIASES) | set(AZURE_KEYS)
                                                   | set(GCS_KEYS))
    assert StorageOptions.__total__ is False
