"""Google Cloud Storage (caslake.store.gcs) on fake-gcs-server: the emulator's
preconditions, URI and credential resolution, error mapping (404, 412, 429, 503),
and purge's whole-file fallback.

The store contract itself runs in tests/store/test_conformance.py (kind "gcs"); the
table round trip in tests/store/test_cloud_tables.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import google.api_core.exceptions as gx
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

import caslake
from caslake.errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    PutOutcomeUnknown,
    StoreCapabilityUnsupported,
    StoreConfigError,
    TransientStoreError,
)
from caslake.store import CopyFrom, IfMatch, PutMode, open_store
from caslake.store.gcs import GcsStore, Throttled, resolve_gcs_settings
from caslake.store.retry import RetryPolicy
from caslake.testing import gcs_emulator
from caslake.testing.wire_faults import WireFault, run_fault_proxy
from tests.conftest import make_gcs_bucket

pytestmark = pytest.mark.gcs


# --- the emulator itself ----------------------------------------------------------


def test_emulator_refuses_stale_generations_and_second_creates(fake_gcs: str) -> None:
    """Checked with google-cloud-storage alone, before caslake relies on it:
    ifGenerationMatch=0 on an existing object and a stale generation are refused
    with 412; the current generation is accepted; an old generation reads 404."""
    bucket = storage.Client(project="p", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": fake_gcs}).bucket(
        make_gcs_bucket(fake_gcs))
    first = bucket.blob("k")
    first.upload_from_string(b"one", if_generation_match=0, retry=None)
    with pytest.raises(gx.PreconditionFailed):
        bucket.blob("k").upload_from_string(b"two", if_generation_match=0, retry=None)
    second = bucket.blob("k")
    second.upload_from_string(b"two", if_generation_match=first.generation, retry=None)
    assert second.generation != first.generation
    with pytest.raises(gx.PreconditionFailed):
        bucket.blob("k").upload_from_string(b"three", if_generation_match=first.generation,
                                            retry=None)
    with pytest.raises(gx.NotFound):
        bucket.blob("k", generation=first.generation).download_as_bytes(start=0, end=0)
    pinned = bucket.blob("k", generation=second.generation)
    assert pinned.download_as_bytes(start=0, end=1) == b"tw"
    assert bucket.blob("k").download_as_bytes() == b"two"


def test_the_store_maps_refusals_to_typed_errors(gcs_uri: str,
                                                 gcs_options: dict[str, str]) -> None:
    store = open_store(gcs_uri, gcs_options)  # type: ignore[arg-type]
    assert isinstance(store, GcsStore)
    etag = store.put("k", b"one", mode=PutMode.CREATE)
    assert etag == f'"{store._store.get_blob("tables/t/k").generation}"'
    with pytest.raises(AlreadyExists):
        store.put("k", b"two", mode=PutMode.CREATE)
    new = store.put("k", b"two", mode=IfMatch(etag))
    with pytest.raises(PreconditionFailed):  # 412: the stale generation
        store.put("k", b"three", mode=IfMatch(etag))
    with pytest.raises(PreconditionFailed):  # the old generation is gone
        store.get_ranges("k", [(0, 1)], etag=etag)
    store.delete("k")
    with pytest.raises(NotFound):
        store.get_ranges("k", [(0, 1)], etag=new)
    with pytest.raises(NotFound):
        store.put("k", b"four", mode=IfMatch(new))


# --- URIs and settings --------------------------------------------------------------


def test_settings_come_from_options_then_the_environment(tmp_path: Path) -> None:
    env = {"STORAGE_EMULATOR_HOST": "localhost:4443", "GOOGLE_CLOUD_PROJECT": "envproj"}
    s = resolve_gcs_settings("gs://data.lake/a//b/", None, env)
    assert (s.bucket, s.prefix, s.endpoint_url, s.anonymous, s.project) == (
        "data.lake", "a/b", "http://localhost:4443", True, "envproj")
    key = tmp_path / "sa.json"
    s = resolve_gcs_settings("gs://bkt/p", {"Project": "mine", "endpoint": "https://x.test"},
                             {**env, "GOOGLE_APPLICATION_CREDENTIALS": str(key)})
    assert (s.project, s.endpoint_url, s.anonymous, s.service_account_path) == (
        "mine", "https://x.test", False, str(key))
    s = resolve_gcs_settings("gs://bkt/p", {"service_account_key": '{"secret": 1}'}, {})
    assert s.service_account_path is None and "secret" not in repr(s)
    # The library's retries are off: max_retries sets caslake's own.
    store = GcsStore("gs://bkt/p", {"anonymous": "true", "max_retries": "1"}, environ={})
    assert store.retrier.policy.attempts == 2


@pytest.mark.parametrize(("opts", "names"), [
    ({"service_account_path": "/no/such/key.json"}, "GOOGLE_APPLICATION_CREDENTIALS"),
    ({"service_account_key": "not json"}, "service_account_key"),
    ({"service_account_key": json.dumps({"type": "service_account"})},
     "service_account_key"),
    ({"anonymous": "maybe"}, "anonymous"),
    ({"region": "eu"}, "region"),
    ({"retry_timeout": "5"}, "retry_timeout"),
])
def test_bad_settings_are_one_line_config_errors(opts: dict[str, str], names: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        GcsStore("gs://bkt/t", opts, environ={})  # type: ignore[arg-type]
    assert names in str(info.value) and "\n" not in str(info.value)


def test_no_credentials_anywhere_names_the_variable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from google.auth.compute_engine import _metadata

    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # never probe a metadata server
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login either
    with pytest.raises(StoreConfigError) as info:
        open_store("gs://bkt/t")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_bucket_is_a_one_line_error(fake_gcs: str,
                                              gcs_options: dict[str, str]) -> None:
    store = open_store("gs://no-such-bucket/t", gcs_options)  # type: ignore[arg-type]
    for call in (lambda: store.put("k", b"x"), lambda: list(store.list(""))):
        with pytest.raises(StoreConfigError) as info:
            call()
        assert "bucket 'no-such-bucket' does not exist" in str(info.value)
        assert "\n" not in str(info.value)


def test_compose_reports_it_cannot_copy_ranges(gcs_uri: str,
                                               gcs_options: dict[str, str]) -> None:
    store = open_store(gcs_uri, gcs_options)  # type: ignore[arg-type]
    etag = store.put("src", b"x" * 10)
    with pytest.raises(StoreCapabilityUnsupported):
        store.compose("dst", [CopyFrom("src", 0, 10, etag)])
    assert not store.exists("dst")


# --- wire faults: 429 and 503 (a cut connection: tests/store/test_cloud_races.py) -----


def _through_proxy(fake_gcs: str, proxy_endpoint: str) -> tuple[GcsStore, GcsStore]:
    """(a store through the proxy, one straight to the emulator) on a fresh bucket."""
    uri = f"gs://{make_gcs_bucket(fake_gcs)}/t"
    direct = GcsStore(uri, gcs_emulator.storage_options(fake_gcs))
    faulty = GcsStore(uri, gcs_emulator.storage_options(proxy_endpoint),
                      retry_policy=RetryPolicy(attempts=4, base_s=0.001, cap_s=0.01))
    return faulty, direct


@pytest.mark.parametrize("kind", ["throttle", "slowdown"])
def test_429_and_503_are_retried(fake_gcs: str, kind: str) -> None:
    with run_fault_proxy(fake_gcs) as proxy:
        store, direct = _through_proxy(fake_gcs, proxy.endpoint)
        etag = store.put("p", b"0", mode=PutMode.CREATE)
        proxy.set_faults([WireFault(kind, 1.0, times=2)])
        assert store.get("p").data == b"0"  # a read, retried by the Retrier
        proxy.set_faults([WireFault(kind, 1.0, methods=frozenset({"POST"}), times=2)])
        if kind == "throttle":  # a refused CAS did not apply: sent again
            etag = store.put("p", b"1", mode=IfMatch(etag))
            assert direct.get("p").data == b"1"
        else:  # a 503 CAS may have applied: unknown, and never re-sent
            with pytest.raises(PutOutcomeUnknown):
                store.put("p", b"1", mode=IfMatch(etag))
        # (counts add up: two reads refused, then the CAS twice, or once and never again)
        assert proxy.fired() == {kind: 4 if kind == "throttle" else 3}
        proxy.set_faults([WireFault(kind, 1.0)])
        with pytest.raises(Throttled if kind == "throttle" else TransientStoreError):
            store.head("p")


# --- purge: compose cannot splice, so the file is rewritten whole -------------------


def test_purge_rewrites_whole_files_and_pyarrow_reads_the_result(
        gcs_uri: str, gcs_options: dict[str, str]) -> None:
    import io

    import pyarrow.parquet as pq

    from caslake.testing.parquet_files import add_parquet_file
    from tests.maintenance.test_purge_estimate import SCHEMA, rows

    t = caslake.create_table(gcs_uri, SCHEMA, storage_options=gcs_options)
    t.store.min_part_size = 16 * 1024  # the splice would copy ranges if it could
    add_parquet_file(t, rows(0, 4000, 64), row_group_rows=1000)
    old = t.live_files()[0]["path"]
    report = t.purge("user = 'user7'")
    assert report.strategy == {old: "rewrite"} and report.bytes_copied == 0
    new = t.live_files()[0]["path"]
    read = pq.read_table(io.BytesIO(t.store.get(new).data))
    expected = rows(0, 4000, 64)
    kept = [u != "user7" for u in expected["user"].to_pylist()]
    assert read.num_rows == sum(kept) and "user7" not in read["user"].to_pylist()
    assert read["id"].to_pylist() == [i for i, k in zip(range(4000), kept, strict=True) if k]


def test_purge_dry_run_estimates_the_rewrite_it_falls_back_to(
        gcs_uri: str, gcs_options: dict[str, str]) -> None:
    """The estimate counts the ranges the rewrite downloads, not a server-side copy."""
    from caslake.testing.parquet_files import add_parquet_file
    from tests.maintenance.test_purge_estimate import SCHEMA, handle, rows

    t = caslake.create_table(gcs_uri, SCHEMA, storage_options=gcs_options)
    add_parquet_file(t, rows(0, 4000, 64), row_group_rows=1000)
    dry = handle(gcs_uri, gcs_options, 16 * 1024).purge("id = 1200", dry_run=True)
    t = handle(gcs_uri, gcs_options, 16 * 1024)
    before = t.store.counters.snapshot()["bytes_in"]
    real = t.purge("id = 1200")
    downloaded = t.store.counters.snapshot()["bytes_in"] - before
    assert set(real.strategy.values()) == {"rewrite"}
    assert abs(dry.bytes_downloaded - downloaded) <= 0.01 * downloaded + 256, (
        dry.bytes_downloaded, downloaded)
