"""Spark batch writes: one commit per job, abort rules, idempotent (txn) writes.

The driver-side tests call a ``CaslakeWriter``'s ``write``/``commit``/``abort``
directly, the way Spark does (each in its own worker, on a pickled copy of the
writer), so a store fault can be injected between them.
"""

from __future__ import annotations

import pickle
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import StructType

import caslake
from caslake.core.commit import CommitPolicy
from caslake.errors import (
    CommitOutcomeUnknown,
    ConcurrentModification,
    InvalidArgument,
    TableNotFound,
    TransientStoreError,
    WriterOutlivedGc,
)
from caslake.format.keys import MANIFEST_PREFIX, POINTER_KEY
from caslake.ops.verify import verify_table
from caslake.spark import CaslakeDataSource, CaslakeWriter
from caslake.spark.write import CaslakeCommitMessage
from caslake.store import ObjectStore, open_store
from caslake.store.faults import Fault, FaultyStore
from tests.spark.helpers import SCHEMA, as_df, data_files, ids, referenced_files, rows
from tests.table.late_landing import LateLandingStore, fail_after_the_settle_read

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas"),
              pytest.mark.filterwarnings("ignore:Cannot infer the eval type")]


def spark_schema(spark: SparkSession) -> StructType:
    return as_df(spark, rows(0, 1)).schema


def batch_of(lo: int, hi: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pandas(rows(lo, hi).to_pandas(), preserve_index=False)


def paths(message: CaslakeCommitMessage) -> set[str]:
    return {f["path"] for f in message.files}


class FaultyWriter(CaslakeWriter):
    """A writer whose driver-side store can be wrapped in a FaultyStore after Spark's
    (pickled) copy was taken: ``open_store`` is the one place a writer opens its store."""

    faulty: FaultyStore | None = None

    def open_store(self) -> ObjectStore:
        return self.faulty if self.faulty is not None else super().open_store()


# --- one commit per job; failed jobs leave nothing ---------------------------------


def test_failed_task_leaves_no_version_and_no_data_files(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    table.append(rows(0, 10))
    before = data_files(uri)

    def failing_write(target: str, known: set[str]) -> None:
        @F.udf("bigint")
        def explode_on_77(i: int) -> int:
            if i == 77:
                # Fail only once the other task has uploaded its file, so its commit
                # message reaches the driver and abort must delete that file.
                deadline = time.monotonic() + 60
                while not data_files(target) - known and time.monotonic() < deadline:
                    time.sleep(0.05)
                # Time for that task's message to reach the driver (0.5 s was not
                # enough at load 7: the file it names was left to gc).
                time.sleep(2.0)
                raise ValueError("boom on 77")
            return i

        df = as_df(spark, rows(0, 100)).repartition(2).withColumn("id", explode_on_77("id"))
        with pytest.raises(Exception, match="boom on 77"):
            df.write.format("caslake").mode("append").save(target)

    failing_write(uri, before)
    assert caslake.open_table(uri).version == 1
    assert data_files(uri) == before  # the files of the task that succeeded were deleted
    # No table at all: a failed first write creates nothing.
    fresh = str(tmp_path / "fresh")
    failing_write(fresh, set())
    with pytest.raises(TableNotFound):
        caslake.open_table(fresh)
    assert not data_files(fresh)


def test_spark_append_racing_python_appender_both_land(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    acknowledged: list[int] = []  # ids of Python appends that returned
    errors: list[BaseException] = []
    stop = threading.Event()

    def python_appender() -> None:
        try:
            t = caslake.open_table(uri)
            i = 1000
            while not stop.is_set():
                t.append(rows(i, i + 1))
                acknowledged.append(i)
                i += 1
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=python_appender)
    thread.start()
    try:
        while not acknowledged:
            time.sleep(0.01)
        as_df(spark, rows(0, 50)).repartition(2).write.format("caslake").mode("append").save(uri)
        time.sleep(0.2)  # let the appender commit on top of the Spark commit too
    finally:
        stop.set()
        thread.join()
    assert not errors
    history = caslake.open_table(uri).history()
    spark_commits = [h for h in history if h.params.get("engine") == "spark"]
    assert len(spark_commits) == 1 and spark_commits[0].summary["added_rows"] == 50
    spark_version = spark_commits[0].version
    python_versions = [h.version for h in history if h.operation == "append"
                       and h.version != spark_version]
    # The commits really interleaved: Python commits landed before and after Spark's.
    assert min(python_versions) < spark_version < max(python_versions)
    assert len(history) == 1 + 1 + len(acknowledged)  # create + Spark + each Python append
    assert ids(uri) == [*range(50), *acknowledged]


# --- save modes and new tables ----------------------------------------------------


def test_unsupported_save_modes_name_the_mode(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = as_df(spark, rows(0, 3))
    # PySpark 4.3 refuses these modes for every Python data source before it reaches
    # ours, with an error that names the mode and the supported ones.
    for mode, shown in [("errorifexists", "ErrorIfExists"), ("ignore", "Ignore")]:
        with pytest.raises(AnalysisException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE") as e:
            df.write.format("caslake").mode(mode).save(uri)
        assert f'"{shown}" mode' in str(e.value) and '"Append" or "Overwrite"' in str(e.value)
    with pytest.raises(TableNotFound):
        caslake.open_table(uri)


def test_append_and_overwrite_create_a_missing_table(spark: SparkSession,
                                                     tmp_path: Path) -> None:
    for mode in ("append", "overwrite"):
        uri = str(tmp_path / mode)
        as_df(spark, rows(0, 7)).write.format("caslake").mode(mode).save(uri)
        table = caslake.open_table(uri)
        assert [h.operation for h in table.history()] == [mode, "create"]
        assert ids(uri) == list(range(7))
        assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_a_dataframe_missing_a_column_is_refused_on_the_driver(
        spark: SparkSession, tmp_path: Path) -> None:
    # As Table.append and deltalake: NULL-filling is never silent.
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    writer = as_df(spark, rows(0, 3)).drop("score", "user").write.format("caslake")
    with pytest.raises(Exception, match=r"SchemaMismatch: the DataFrame is missing column\(s\) "
                       r"'user' \(string\), 'score' \(double\)"):
        writer.mode("append").save(uri)
    assert caslake.open_table(uri).version == 0 and data_files(uri) == set()


# --- idempotent writes: txnAppId + txnVersion --------------------------------------


def test_txn_replay_is_a_noop(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")

    def write(df_rows: pa.Table, version: int, mode: str = "append") -> None:
        (as_df(spark, df_rows).repartition(2).write.format("caslake").mode(mode)
         .option("txnAppId", "nightly-load").option("txnVersion", str(version)).save(uri))

    write(rows(0, 20), 5)
    table = caslake.open_table(uri)
    assert table.version == 1 and table.snapshot.manifest.txns == {"nightly-load": 5}
    files = data_files(uri)
    write(rows(0, 20), 5)  # the same pair again: a retried job
    write(rows(100, 120), 3, mode="overwrite")  # a lower version; overwrite obeys it too
    assert caslake.open_table(uri).version == 1
    assert ids(uri) == list(range(20))  # not doubled, not replaced
    assert data_files(uri) == files  # the replays left no data file behind
    write(rows(20, 30), 6)
    table = caslake.open_table(uri)
    assert table.version == 2 and table.snapshot.manifest.txns == {"nightly-load": 6}
    assert ids(uri) == list(range(30))


def test_txn_replay_found_at_commit_deletes_the_task_files(spark: SparkSession,
                                                           tmp_path: Path) -> None:
    """Two attempts of one job both pass planning; the second finds the txn at commit
    time, creates no version and removes the files its tasks wrote."""
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    schema = spark_schema(spark)
    first = CaslakeWriter(uri, {}, schema, overwrite=False, txn=("job", 1))
    second = CaslakeWriter(uri, {}, schema, overwrite=False, txn=("job", 1))
    m1, m2 = first.write(iter([batch_of(0, 5)])), second.write(iter([batch_of(0, 5)]))
    assert paths(m1) | paths(m2) <= data_files(uri)
    pickle.loads(pickle.dumps(first)).commit([m1])
    pickle.loads(pickle.dumps(second)).commit([m2])
    table = caslake.open_table(uri)
    assert table.version == 1 and table.snapshot.manifest.txns == {"job": 1}
    assert data_files(uri) == paths(m1) == referenced_files(uri)
    assert ids(uri) == list(range(5))


def test_txn_options_are_validated(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = spark_schema(spark)

    def writer(**options: str) -> CaslakeWriter:
        return CaslakeDataSource(CaseInsensitiveDict(path=uri, **options)).writer(schema, False)

    with pytest.raises(InvalidArgument, match="txnVersion"):
        writer(txnAppId="app")
    with pytest.raises(InvalidArgument, match="txnAppId"):
        writer(txnVersion="3")
    with pytest.raises(InvalidArgument, match=r"txnVersion.*'three'"):
        writer(txnAppId="app", txnVersion="three")
    with pytest.raises(InvalidArgument, match="txnVersion"):
        writer(txnAppId="app", txnVersion="-1")
    assert writer(txnappid="app", TXNVERSION="3").txn == ("app", 3)  # options ignore case
    # Through Spark the typed error reaches the user by name.
    with pytest.raises(Exception, match=r"InvalidArgument.*txnVersion"):
        (as_df(spark, rows(0, 3)).write.format("caslake").mode("append")
         .option("txnAppId", "a").save(uri))
    with pytest.raises(TableNotFound):
        caslake.open_table(uri)


# --- abort rules -------------------------------------------------------------------


def test_abort_after_a_provable_failure_deletes_the_files(spark: SparkSession,
                                                          tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    table.append(rows(0, 5))
    writer = CaslakeWriter(uri, {}, spark_schema(spark), overwrite=True)
    message = writer.write(iter([batch_of(10, 15)]))
    table.append(rows(5, 6))  # the overwrite's base moved: it must conflict
    with pytest.raises(ConcurrentModification):
        pickle.loads(pickle.dumps(writer)).commit([message])
    pickle.loads(pickle.dumps(writer)).abort([message])  # Spark's abort, its own copy
    assert not paths(message) & data_files(uri)
    assert caslake.open_table(uri).version == 2 and ids(uri) == list(range(6))


def test_a_job_that_outlived_gc_is_refused_and_references_nothing_collected(
        spark: SparkSession, tmp_path: Path) -> None:
    # RELIABILITY.md items 11-13 for Spark jobs: the tasks upload, gc (retention passed)
    # collects those still-unreferenced files, then the driver commits.
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    table.append(rows(0, 5))
    writer = CaslakeWriter(uri, {}, spark_schema(spark), overwrite=False)
    message = writer.write(iter([batch_of(10, 15)]))
    report = table.gc(now=datetime.now(UTC) + timedelta(days=30))
    collected = {k for keys in report.deleted.values() for k in keys}
    assert paths(message) <= collected  # the task's files are gone
    version = caslake.open_table(uri).version
    with pytest.raises(WriterOutlivedGc):
        pickle.loads(pickle.dumps(writer)).commit([message])
    assert caslake.open_table(uri).version == version and ids(uri) == list(range(5))
    assert verify_table(open_store(uri), deep=True).ok


def _pointer_faults(put_kind: str) -> tuple[Fault, Fault]:
    """A pointer PUT that fails (``before``: never applied; ``after``: applied, reply
    lost), then every pointer GET of the settle fails, so the outcome stays unknown."""
    reads = Fault(frozenset({"get"}), "before", prefix=POINTER_KEY, times=0)  # armed below

    def failed_put(key: str) -> TransientStoreError:
        reads.times = CommitPolicy().settle_attempts
        return TransientStoreError(f"injected: pointer PUT reply lost on {key}", key=key)

    put = Fault(frozenset({"put"}), put_kind, prefix=POINTER_KEY, times=1, error=failed_put)
    return put, reads


def _unknown_commit(spark: SparkSession, uri: str, put_kind: str
                    ) -> tuple[CaslakeWriter, CaslakeCommitMessage, FaultyStore]:
    writer = FaultyWriter(uri, {}, spark_schema(spark), overwrite=False)
    spark_copy = pickle.dumps(writer)  # what Spark hands to commit() and abort()
    message = writer.write(iter([batch_of(0, 5)]))
    assert paths(message) <= data_files(uri)
    faulty = FaultyStore(open_store(uri), _pointer_faults(put_kind))
    committing = pickle.loads(spark_copy)
    committing.faulty = faulty
    with pytest.raises(CommitOutcomeUnknown):
        committing.commit([message])
    settle = CommitPolicy().settle_attempts
    expected = {"after": 1, "before": settle} if put_kind == "after" else {"before": 1 + settle}
    assert faulty.fired_by_kind() == expected  # the faults really fired
    return pickle.loads(spark_copy), message, faulty


def _late_landing_commit(spark: SparkSession, uri: str, *, land_first: bool
                         ) -> tuple[CaslakeWriter, CaslakeCommitMessage, LateLandingStore,
                                    CaslakeWriter]:
    """A Spark commit whose first pointer PUT stays in flight, and whose next attempt's
    manifest PUT fails (after the held PUT landed, with ``land_first``)."""
    writer = FaultyWriter(uri, {}, spark_schema(spark), overwrite=False)
    spark_copy = pickle.dumps(writer)
    message = writer.write(iter([batch_of(0, 5)]))
    store = LateLandingStore(open_store(uri))
    fail_after_the_settle_read(store, "put", MANIFEST_PREFIX, land_first=land_first)
    committing = pickle.loads(spark_copy)
    committing.faulty = store
    return committing, message, store, pickle.loads(spark_copy)


def test_spark_commit_whose_open_pointer_write_landed_is_not_a_false_failure(
        spark: SparkSession, tmp_path: Path) -> None:
    """Issue 9, defect 1, Spark side: the job must succeed (a TransientStoreError
    would make Spark report a failed job whose rows are in the table)."""
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA).append(rows(100, 101))
    committing, message, store, _ = _late_landing_commit(spark, uri, land_first=True)
    committing.commit([message])
    assert store.failed == 1 and store.landed
    assert caslake.open_table(uri).version == 2 and ids(uri) == [0, 1, 2, 3, 4, 100]
    assert paths(message) <= data_files(uri)


def test_spark_commit_with_an_open_pointer_write_is_unknown_and_abort_keeps_the_files(
        spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA).append(rows(100, 101))
    committing, message, store, aborting = _late_landing_commit(spark, uri, land_first=False)
    with pytest.raises(CommitOutcomeUnknown):
        committing.commit([message])
    assert store.failed == 1 and not store.landed
    aborting.abort([message])  # the write may still land: keep everything
    assert paths(message) <= data_files(uri)
    store.land()  # ... and it does: the rows are in the table, once
    assert caslake.open_table(uri).version == 2 and ids(uri) == [0, 1, 2, 3, 4, 100]
    pickle.loads(pickle.dumps(aborting)).abort([message])  # settles: ours, keep
    assert paths(message) <= data_files(uri) == referenced_files(uri)


def test_abort_after_ambiguous_commit_that_landed_keeps_the_data(spark: SparkSession,
                                                                 tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA).append(rows(100, 101))
    aborting, message, _ = _unknown_commit(spark, uri, "after")
    aborting.abort([message])  # reads the pointer back: our commit id landed
    table = caslake.open_table(uri)
    assert table.version == 2 and table.history()[0].params.get("engine") == "spark"
    assert paths(message) <= data_files(uri)
    assert ids(uri) == [0, 1, 2, 3, 4, 100]  # visible


def test_abort_after_ambiguous_commit_deletes_only_once_provably_lost(
        spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    table.append(rows(100, 101))
    aborting, message, _ = _unknown_commit(spark, uri, "before")
    # The PUT never applied, but nothing proves it yet: a delayed write could still land
    # while the pointer is at the version it expected.  Abort must keep the files.
    aborting.abort([message])
    assert paths(message) <= data_files(uri)
    assert caslake.open_table(uri).version == 1
    # Another commit takes the version our commit aimed at: ours can never land now.
    table.append(rows(200, 201))
    pickle.loads(pickle.dumps(aborting)).abort([message])
    assert not paths(message) & data_files(uri)
    assert data_files(uri) == referenced_files(uri)
    assert ids(uri) == [100, 200]
