"""Real wire faults between the real S3 clients (obstore, boto3) and moto: the fault proxy.

Every test asserts that the faults it set up fired (``FaultProxy.fired``) and,
where it matters, how many requests reached the proxy -- so a test cannot pass
because its fault never happened.  The last test runs the 6-writer workload of
issue 9 (a short slice; ``make stress`` runs it long) and audits every outcome.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pyarrow as pa
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import caslake
from caslake.errors import AlreadyExists, PutOutcomeUnknown
from caslake.store import IfMatch, PutMode, S3Store, open_store
from caslake.testing.moto_server import DUMMY_KEY_ID, DUMMY_SECRET, REGION, storage_options
from caslake.testing.wire_faults import FaultProxy, WireFault, run_fault_proxy
from caslake.testing.wire_stress import run_wire_workload
from tests.conftest import make_bucket

pytestmark = pytest.mark.s3

PUT = frozenset({"PUT"})
PREFIX = "tables/t/"


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultProxy]:
    with run_fault_proxy(moto_server, seed=1, lifetime_s=300) as p:
        yield p


@pytest.fixture
def bucket(moto_server: str) -> str:
    return make_bucket(moto_server)


def boto(endpoint: str, **config: Any) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                        aws_access_key_id=DUMMY_KEY_ID, aws_secret_access_key=DUMMY_SECRET,
                        config=Config(**config))


def via(proxy: FaultProxy, bucket: str, **options: str) -> S3Store:
    store = open_store(f"s3://{bucket}/tables/t", {**storage_options(proxy.endpoint), **options})
    assert isinstance(store, S3Store)
    return store


def stored(moto: str, bucket: str, key: str) -> bytes | None:
    try:
        body: bytes = boto(moto).get_object(Bucket=bucket, Key=PREFIX + key)["Body"].read()
    except ClientError:
        return None
    return body


def wait_for(fn: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.05)
    return False


# --- the proxy itself, seen by boto3 with its retries off ---------------------------


def test_each_fault_kind_does_what_it_says_and_is_counted(
        proxy: FaultProxy, bucket: str, moto_server: str) -> None:
    client = boto(proxy.endpoint, retries={"total_max_attempts": 1, "mode": "standard"},
                  read_timeout=0.4, connect_timeout=2)

    def put(key: str) -> str:
        try:
            client.put_object(Bucket=bucket, Key=PREFIX + key, Body=key.encode())
        except ClientError as e:
            return str(e.response["Error"]["Code"])
        except Exception as e:
            return type(e).__name__
        return "ok"

    proxy.set_faults([WireFault("slowdown", 1.0, PUT, times=1)])
    assert put("slow") == "SlowDown" and stored(moto_server, bucket, "slow") is None
    proxy.set_faults([WireFault("reset", 1.0, PUT, times=1)])
    assert put("reset") != "ok" and stored(moto_server, bucket, "reset") is None
    proxy.set_faults([WireFault("lost_reply", 1.0, PUT, times=1)])
    assert put("lost") != "ok" and stored(moto_server, bucket, "lost") == b"lost"
    proxy.set_faults([WireFault("delay", 1.0, PUT, max_delay_s=0.05, times=1)])
    assert put("delayed") == "ok"
    proxy.set_faults([WireFault("late", 1.0, PUT, hold_s=1.0, times=1)])
    assert put("late") == "ReadTimeoutError"
    assert stored(moto_server, bucket, "late") is None  # not yet ...
    assert wait_for(lambda: stored(moto_server, bucket, "late") == b"late")  # ... but it lands
    assert proxy.fired() == {"slowdown": 1, "reset": 1, "lost_reply": 1, "delay": 1, "late": 1}


def test_faults_match_method_and_key_prefix(proxy: FaultProxy, bucket: str) -> None:
    store = via(proxy, bucket)
    proxy.set_faults([WireFault("slowdown", 1.0, frozenset({"GET"}), prefix=PREFIX + "data/")])
    store.put("manifest/m", b"m")
    store.put("data/d", b"d")
    assert store.get("manifest/m").data == b"m"
    assert proxy.fired() == {}
    with pytest.raises(caslake.errors.TransientStoreError):
        store.get("data/d")  # every try answered 503
    assert proxy.fired()["slowdown"] >= 4


def test_boto3_standard_retries_absorb_503(proxy: FaultProxy, bucket: str,
                                           moto_server: str) -> None:
    proxy.set_faults([WireFault("slowdown", 1.0, PUT, times=2)])
    boto(proxy.endpoint, retries={"max_attempts": 4, "mode": "standard"}).put_object(
        Bucket=bucket, Key=PREFIX + "k", Body=b"v")
    assert proxy.fired() == {"slowdown": 2} and proxy.requests()["PUT"] == 3
    assert stored(moto_server, bucket, "k") == b"v"


# --- S3Store (obstore plus caslake's Retrier) ---------------------------------------


@pytest.mark.parametrize("kind", ["lost_reply", "reset"])
def test_create_is_retried_and_recognises_its_own_landed_object(
        proxy: FaultProxy, bucket: str, moto_server: str, kind: str) -> None:
    store = via(proxy, bucket)
    proxy.set_faults([WireFault(kind, 1.0, PUT, times=1)])
    etag = store.put("data/x", b"mine", mode=PutMode.CREATE)
    assert proxy.fired() == {kind: 1} and proxy.requests()["PUT"] == 2
    assert store.head("data/x").etag == etag
    assert stored(moto_server, bucket, "data/x") == b"mine"
    meta = boto(moto_server).head_object(Bucket=bucket, Key=PREFIX + "data/x")["Metadata"]
    assert "caslake-sha256" in meta


@pytest.mark.parametrize("theirs", [b"theirs", b"mind", b"mine"])
def test_someone_elses_object_at_the_key_is_already_exists(
        proxy: FaultProxy, bucket: str, moto_server: str, theirs: bytes) -> None:
    """Written by another caslake create (its own SHA-256), or without metadata (other
    bytes of any size): not ours, even after a create of ours failed on the wire."""
    store = via(proxy, bucket)
    if theirs == b"mine":  # another caslake writer with the same key but its own content
        open_store(f"s3://{bucket}/tables/t", storage_options(moto_server)).put(
            "data/x", b"mine-too", mode=PutMode.CREATE)
    else:
        boto(moto_server).put_object(Bucket=bucket, Key=PREFIX + "data/x", Body=theirs)
    proxy.set_faults([WireFault("reset", 1.0, PUT, times=1)])
    with pytest.raises(AlreadyExists):
        store.put("data/x", b"mine", mode=PutMode.CREATE)
    assert proxy.fired() == {"reset": 1}
    assert stored(moto_server, bucket, "data/x") in (theirs, b"mine-too")


@pytest.mark.parametrize("kind, applied", [("lost_reply", True), ("reset", False)])
def test_compare_and_swap_is_never_retried_its_outcome_is_unknown(
        proxy: FaultProxy, bucket: str, moto_server: str, kind: str, applied: bool) -> None:
    store = via(proxy, bucket)
    etag = store.put("p", b"1")
    before = proxy.requests()["PUT"]
    proxy.set_faults([WireFault(kind, 1.0, PUT, times=1)])
    with pytest.raises(PutOutcomeUnknown):
        store.put("p", b"2", mode=IfMatch(etag))
    assert proxy.fired() == {kind: 1}
    assert proxy.requests()["PUT"] == before + 1  # one request: no blind retry
    assert stored(moto_server, bucket, "p") == (b"2" if applied else b"1")


def test_a_compare_and_swap_can_land_after_the_client_gave_up(
        proxy: FaultProxy, bucket: str, moto_server: str) -> None:
    store = via(proxy, bucket, request_timeout="0.3")
    etag = store.put("p", b"1")
    proxy.set_faults([WireFault("late", 1.0, PUT, hold_s=0.8, times=1)])
    with pytest.raises(PutOutcomeUnknown):
        store.put("p", b"2", mode=IfMatch(etag))
    assert proxy.fired() == {"late": 1}
    assert wait_for(lambda: stored(moto_server, bucket, "p") == b"2")  # it applied late


def test_a_late_landing_create_meets_our_retry_and_changes_nothing(
        proxy: FaultProxy, bucket: str, moto_server: str) -> None:
    store = via(proxy, bucket, request_timeout="0.3")
    proxy.set_faults([WireFault("late", 1.0, PUT, hold_s=0.8, times=1)])
    etag = store.put("data/x", b"mine", mode=PutMode.CREATE)  # the retry creates it
    time.sleep(1.0)  # the held first attempt lands now, and is refused (412)
    assert proxy.fired() == {"late": 1}
    assert store.head("data/x").etag == etag and stored(moto_server, bucket, "data/x") == b"mine"


def test_deletes_and_reads_are_retried(proxy: FaultProxy, bucket: str,
                                       moto_server: str) -> None:
    store = via(proxy, bucket)
    store.put("k", b"v")
    proxy.set_faults([WireFault("lost_reply", 1.0, frozenset({"POST"}), times=1),
                      WireFault("reset", 1.0, frozenset({"GET"}), times=5)])
    store.delete("k")  # applied, reply lost, retried: a missing key is a success
    assert stored(moto_server, bucket, "k") is None
    store.put("k", b"w")
    assert store.get("k").data == b"w"  # obstore's 3 retries + ours outlast 5 resets
    assert proxy.fired() == {"lost_reply": 1, "reset": 5}


def test_an_append_survives_a_lost_reply_on_each_of_its_creates(
        proxy: FaultProxy, bucket: str, moto_server: str) -> None:
    """Before creates were retried, each of these failed the append with
    TransientStoreError although nothing was wrong with the table."""
    uri = f"s3://{bucket}/tables/t"
    schema = pa.schema([("id", pa.int64())])
    caslake.create_table(uri, schema, storage_options=storage_options(moto_server))
    table = caslake.open_table(uri, storage_options=storage_options(proxy.endpoint))
    for n, prefix in enumerate(["data/", "manifest/", "_latest_manifest"], start=1):
        proxy.set_faults([WireFault("lost_reply", 1.0, PUT, prefix=PREFIX + prefix, times=1)])
        result = table.append(pa.table({"id": pa.array([n], pa.int64())}))
        assert proxy.fired() == {"lost_reply": n}, prefix  # counts accumulate
        assert result.version == n
    check = caslake.open_table(uri, storage_options=storage_options(moto_server))
    assert sorted(check.to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert [h.commit_id for h in check.history()][:3] == [
        h.commit_id for h in table.history()][:3]


# --- the workload of issue 9 --------------------------------------------------------


def test_six_writers_under_the_fault_mix_succeed_without_false_outcomes(
        moto_server: str) -> None:
    report = run_wire_workload(moto_server, writers=6, ops_per_writer=8, seed=7)
    print(report.summary())
    assert report.attempted == 48
    assert set(report.fired) == {"slowdown", "reset", "lost_reply", "delay"}, report.fired
    assert min(report.fired.values()) >= 3, report.fired
    assert report.false_outcomes == []
    assert report.unexplained_versions == []
    assert report.success_rate >= 0.97, report.summary()
