"""Real wire faults between the real S3 clients (obstore, boto3) and moto: the fault proxy.

Every test asserts that the faults it set up fired (``FaultProxy.fired``) and,
where it matters, how many requests reached the proxy -- so a test cannot pass
because its fault never happened.  The last test runs the 6-writer workload of
issue 9 (a short slice; ``make stress`` runs it long) and audits every outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pyarrow as pa
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import caslake
from caslake.dataset import DatasetIncomplete, ParquetDatasetStore
from caslake.errors import AlreadyExists, CaslakeError, PutOutcomeUnknown, TableNotFound
from caslake.export.delta import LOG_PREFIX
from caslake.ops.verify import verify_table
from caslake.store import IfMatch, PutMode, S3Store, open_store
from caslake.testing.moto_server import DUMMY_KEY_ID, DUMMY_SECRET, REGION, storage_options
from caslake.testing.wire_faults import FaultProxy, WireFault, run_fault_proxy, standard_mix
from caslake.testing.wire_stress import run_wire_workload
from tests.conftest import make_bucket
from tests.export.readers import deltalake_rows, pyiceberg_rows
from tests.reliability.crash_harness import told_the_truth
from tests.reliability.test_crash_every_step import (
    ExportReaders,
    iceberg_metadata_key,
    read_iceberg_hint,
)

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


# --- purge, clone, export and dataset writes under wire faults ------------------------

# The issue-9 mix without its delays (they cost time and change no outcome), denser:
# each operation below makes a few dozen requests, so faults hit most of its runs.
OPERATION_MIX = [WireFault("slowdown", 0.06), WireFault("reset", 0.05),
                 WireFault("lost_reply", 0.08)]
OP_ROUNDS = 3
ID_SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])
Run = Callable[[dict[str, str]], object]  # the operation, run with these storage options


def _batch(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "s": [f"s{i % 5}" for i in range(lo, hi)]}, schema=ID_SCHEMA)


def _ids(uri: str, options: dict[str, str]) -> list[int]:
    t = caslake.open_table(uri, storage_options=options)
    return sorted(t.to_arrow(columns=["id"]).column("id").to_pylist())


def _round(op: str, r: int, uri: str, direct: dict[str, str],
           readers: ExportReaders) -> tuple[Run, Callable[[], str]]:
    """Round ``r`` of ``op`` on the table at ``uri``: the run, and a check that (faults
    off, straight from moto) says whether it is done ("new") or not ("old"), and
    fails on anything in between."""
    old = _ids(uri, direct)
    if op == "purge":
        where = f"id BETWEEN {100 * r} AND {100 * r + 19}"
        new = [i for i in old if not 100 * r <= i <= 100 * r + 19]

        def purged() -> str:
            now = caslake.open_table(uri, storage_options=direct)
            got = _ids(uri, direct)
            assert got in (old, new), "a half-done purge"
            assert verify_table(now.store, deep=True, all_versions=True).ok
            return "new" if got == new else "old"
        return lambda o: caslake.open_table(uri, storage_options=o).purge(where), purged
    if op == "clone":
        target = f"{uri}-clone-{r}"

        def cloned() -> str:
            try:
                got = _ids(target, direct)
            except TableNotFound:
                return "old"
            assert got == old, "a clone of other rows"
            return "new"
        return lambda o: caslake.clone(uri, target, storage_options=o), cloned
    if op.startswith("export_"):
        fmt = op.removeprefix("export_")
        caslake.open_table(uri, storage_options=direct).append(_batch(1000 + 10 * r,
                                                                      1010 + 10 * r))
        new = _ids(uri, direct)

        def exported() -> str:
            store = open_store(uri, direct)
            if fmt == "iceberg":
                version = read_iceberg_hint(store)
                got = [] if version is None else pyiceberg_rows(
                    f"{uri}/{iceberg_metadata_key(version)}", ID_SCHEMA,
                    properties=readers.iceberg).column("id").to_pylist()
            elif store.exists(LOG_PREFIX + f"{0:020d}.json"):
                got = deltalake_rows(uri, ID_SCHEMA,
                                     storage_options=readers.delta).column("id").to_pylist()
            else:
                got = []
            assert got in (new, old) or (r == 0 and got == []), "a half-done export"
            return "new" if got == new else "old"
        return lambda o: getattr(caslake.open_table(uri, storage_options=o), op)(), exported
    key, data = f"ds/{r}", _batch(100 * r, 100 * r + 50)

    def written() -> str:
        try:
            got = ParquetDatasetStore(open_store(uri, direct)).read_dataset(key)
        except DatasetIncomplete:
            return "old"
        assert got.equals(data), "a dataset of other rows"
        return "new"
    return (lambda o: ParquetDatasetStore(open_store(uri, o), max_rows_per_file=20)
            .write_dataset(data, key, overwrite=True)), written


def under_faults(proxy: FaultProxy, faults: list[WireFault], run: Callable[[Any], object],
                 arg: Any) -> str:
    """``run(arg)`` with ``faults`` set on the proxy (and none after): "ok", or the
    typed error's name."""
    proxy.set_faults(faults)
    try:
        run(arg)
        return "ok"
    except CaslakeError as e:
        return type(e).__name__
    finally:
        proxy.set_faults([])


@pytest.mark.parametrize("op", ["purge", "clone", "export_iceberg", "export_delta",
                                "dataset_write"])
def test_operations_under_the_fault_mix_tell_the_truth(
        proxy: FaultProxy, bucket: str, moto_server: str, op: str) -> None:
    """Each round runs ``op`` once through the proxy under the mix; then, faults off,
    it is done or not, never half-done, and the outcome told the truth (a returned
    run is done; a typed error other than CommitOutcomeUnknown means not done); a
    run without faults then finishes it.  The faults must have fired."""
    direct, faulty = storage_options(moto_server), storage_options(proxy.endpoint)
    uri = f"s3://{bucket}/tables/t"
    t = caslake.create_table(uri, ID_SCHEMA, storage_options=direct)
    t.append(_batch(0, 300))
    t.append(_batch(300, 600))
    t.delete("id < 10")
    readers = ExportReaders.moto(moto_server)
    outcomes: dict[str, int] = {}
    for r in range(OP_ROUNDS):
        run, state = _round(op, r, uri, direct, readers)
        outcome = under_faults(proxy, OPERATION_MIX, run, faulty)
        label = f"{outcome}->{state()}"
        assert told_the_truth(*label.split("->")), f"{op} round {r}: {label}"
        if label.endswith("old"):
            run(direct)
            assert state() == "new", f"{op} round {r}: not finished after {label}"
        outcomes[label] = outcomes.get(label, 0) + 1
    fired = proxy.fired()
    print(f"\n{op}: {outcomes}; faults fired {fired} in {proxy.requests()} requests")
    assert sum(fired.values()) >= 1, "no fault fired"


# --- update, merge and restore under the issue-9 mix ----------------------------------

# standard_mix() without its delays (they cost time and change no outcome).
DML_MIX = [w for w in standard_mix() if w.kind != "delay"]
DML_ROUNDS = 12  # four of each operation


def _dml_round(r: int, version: int, rows: list[tuple[int, str]], history: list[list[
        tuple[int, str]]]) -> tuple[Callable[[caslake.Table], object], list[tuple[int, str]]]:
    """Round ``r``'s operation on a table at ``version`` holding ``rows`` (sorted), and
    the rows it makes: an update of an id range, a merge (update_all, insert_all and
    a by-source delete) or a restore of the version two before."""
    op = ("update", "merge", "restore")[r % 3]
    if op == "update":
        lo = 10 * (r % 4)
        return (lambda t: t.update(set={"s": f"'u{r}'"}, where=f"id BETWEEN {lo} AND {lo + 9}"),
                [(i, f"u{r}" if lo <= i <= lo + 9 else s) for i, s in rows])
    if op == "merge":
        source = _batch(35 + r, 45 + r)
        keys = set(range(35 + r, 45 + r))
        new = sorted([(i, s) for i, s in rows if i not in keys and i % 7 != r % 7]
                     + [(i, f"s{i % 5}") for i in keys])
        return (lambda t: t.merge(source, on=["id"]).when_matched_update_all()
                .when_not_matched_insert_all()
                .when_not_matched_by_source_delete(condition=f"target.id % 7 = {r % 7}")
                .execute(), new)
    return lambda t: t.restore(version=version - 2), history[version - 2]


def test_update_merge_restore_under_the_fault_mix_succeed_and_tell_the_truth(
        proxy: FaultProxy, bucket: str, moto_server: str) -> None:
    """One writer runs updates, merges and restores through the proxy under the issue-9
    mix.  After each, faults off and straight from moto, the table is at the old
    version with the old rows or one version on with exactly the model's new rows;
    the outcome told the truth (no false outcome: a returned run landed, a typed
    error other than CommitOutcomeUnknown did not), and >= 97% of them succeeded,
    as the six-writer workload must.  The faults must have fired."""
    direct, faulty = storage_options(moto_server), storage_options(proxy.endpoint)
    uri = f"s3://{bucket}/tables/t"
    t = caslake.create_table(uri, ID_SCHEMA, storage_options=direct)
    t.append(_batch(0, 40))
    history: list[list[tuple[int, str]]] = [[], [(i, f"s{i % 5}") for i in range(40)]]
    writer = caslake.open_table(uri, storage_options=faulty)
    outcomes: dict[str, int] = {}
    for r in range(DML_ROUNDS):
        version = len(history) - 1
        run, new = _dml_round(r, version, history[-1], history)
        outcome = under_faults(proxy, DML_MIX, run, writer)
        now = caslake.open_table(uri, storage_options=direct)
        got = sorted(zip(*now.to_arrow().to_pydict().values(), strict=True))
        assert now.version in (version, version + 1), f"round {r}: version {now.version}"
        state = "new" if now.version == version + 1 else "old"
        assert got == (new if state == "new" else history[-1]), f"round {r}: {state} rows differ"
        assert told_the_truth(outcome, state), f"round {r}: {outcome} but {state}"
        if state == "new":
            history.append(new)
        label = f"{outcome}->{state}"
        outcomes[label] = outcomes.get(label, 0) + 1
    fired = proxy.fired()
    print(f"\nupdate/merge/restore: {outcomes}; faults fired {fired} in {proxy.requests()}")
    assert sum(fired.values()) >= 3, f"too few faults fired: {fired}"
    succeeded = sum(n for k, n in outcomes.items() if k.startswith("ok->"))
    assert succeeded / DML_ROUNDS >= 0.97, outcomes
    assert verify_table(caslake.open_table(uri, storage_options=direct).store, deep=True,
                        all_versions=True).ok
