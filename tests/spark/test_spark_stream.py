"""Structured Streaming into caslake: exactly-once micro-batches across restarts.

Every query reads JSON files (one per micro-batch, ``maxFilesPerTrigger=1``) and
runs with ``trigger(availableNow=True)``, so each run processes what is there
and stops.  A crash after a batch's table commit but before Spark records the
batch in its checkpoint commit log is simulated by deleting ``commits/<N>``:
the next run must replay batch N, and the replay must change nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import LongType, StringType, StructField, StructType

import caslake
from caslake.spark.stream import CaslakeStreamWriter, app_id_for_checkpoint
from caslake.spark.write import CaslakeCommitMessage
from tests.spark.helpers import data_files, ids, read, referenced_files

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

SOURCE_SCHEMA = "id BIGINT, user STRING"
ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string())])


def add_source_file(src: Path, n: int, lo: int, hi: int) -> None:
    """One JSON-lines file of rows lo..hi-1, renamed into place (the file source must
    never see it half written)."""
    src.mkdir(exist_ok=True)
    tmp = src.parent / f".tmp-{n}.json"
    tmp.write_text("".join(json.dumps({"id": i, "user": f"u{i % 3}"}) + "\n"
                           for i in range(lo, hi)))
    os.replace(tmp, src / f"part-{n:03d}.json")


def run_stream(spark: SparkSession, src: Path, uri: str,
               configure: Callable[[DataStreamWriter], DataStreamWriter]) -> None:
    """Run one availableNow query to its end; raise what it failed with."""
    stream = (spark.readStream.schema(SOURCE_SCHEMA).option("maxFilesPerTrigger", 1)
              .json(str(src)))
    query = configure(stream.writeStream).trigger(availableNow=True).start(uri)
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None


def caslake_sink(checkpoint: Path, **options: str
                 ) -> Callable[[DataStreamWriter], DataStreamWriter]:
    return lambda w: (w.format("caslake").option("checkpointLocation", str(checkpoint))
                      .options(**options))


def forget_batch(checkpoint: Path, batch_id: int) -> None:
    """Spark crashed after the sink committed batch_id but before it logged the commit."""
    (checkpoint / "commits" / str(batch_id)).unlink()
    (checkpoint / "commits" / f".{batch_id}.crc").unlink(missing_ok=True)


def test_restarted_stream_does_not_duplicate_a_replayed_batch(spark: SparkSession,
                                                              tmp_path: Path) -> None:
    src, ckpt, uri = tmp_path / "src", tmp_path / "ckpt", str(tmp_path / "t")
    for n, (lo, hi) in enumerate([(0, 10), (10, 25)]):
        add_source_file(src, n, lo, hi)
    run_stream(spark, src, uri, caslake_sink(ckpt))  # batches 0 and 1; creates the table
    table = caslake.open_table(uri)
    app = app_id_for_checkpoint(str(ckpt))
    assert table.version == 2 and table.snapshot.manifest.txns == {app: 1}
    assert [h.params.get("streaming_batch") for h in table.history()[:2]] == ["1", "0"]
    assert ids(uri) == list(range(25))

    forget_batch(ckpt, 1)
    run_stream(spark, src, uri, caslake_sink(ckpt))
    assert (ckpt / "commits" / "1").exists()  # Spark really ran batch 1 again ...
    assert caslake.open_table(uri).version == 2  # ... and the replay committed nothing
    assert ids(uri) == list(range(25))
    assert data_files(uri) == referenced_files(uri)  # the replay's files were removed

    add_source_file(src, 2, 25, 30)  # the restarted query carries on with batch 2
    run_stream(spark, src, uri, caslake_sink(ckpt))
    table = caslake.open_table(uri)
    assert table.version == 3 and table.snapshot.manifest.txns == {app: 2}
    assert ids(uri) == list(range(30))
    assert read(spark, uri).count() == 30


def test_query_id_option_names_the_txn_app(spark: SparkSession, tmp_path: Path) -> None:
    src, uri = tmp_path / "src", str(tmp_path / "t")
    caslake.create_table(uri, ARROW_SCHEMA)
    add_source_file(src, 0, 0, 5)
    run_stream(spark, src, uri, caslake_sink(tmp_path / "ckpt", queryId="orders-ingest"))
    table = caslake.open_table(uri)
    assert table.snapshot.manifest.txns == {"orders-ingest": 0}
    # A different checkpoint is a different query (a fresh start of batch ids): its
    # derived app id must differ, or its batch 0 would be skipped as a replay.
    assert app_id_for_checkpoint(str(tmp_path / "a")) != app_id_for_checkpoint(
        str(tmp_path / "b"))
    assert app_id_for_checkpoint(str(tmp_path / "a")) == app_id_for_checkpoint(
        str(tmp_path / "a") + "/")


def test_stream_without_checkpoint_option_needs_an_app_id(spark: SparkSession,
                                                          tmp_path: Path) -> None:
    src, uri = tmp_path / "src", str(tmp_path / "t")
    add_source_file(src, 0, 0, 5)
    key = "spark.sql.streaming.checkpointLocation"
    spark.conf.set(key, str(tmp_path / "root"))  # Spark picks the location: not passed to us
    try:
        with pytest.raises(StreamingQueryException,
                           match=r"InvalidArgument.*checkpointLocation.*queryId"):
            run_stream(spark, src, uri, lambda w: w.format("caslake"))
        with pytest.raises(caslake.errors.TableNotFound):
            caslake.open_table(uri)
        run_stream(spark, src, uri, lambda w: w.format("caslake").option("queryId", "q"))
    finally:
        spark.conf.unset(key)
    assert caslake.open_table(uri).snapshot.manifest.txns == {"q": 0}
    assert ids(uri) == list(range(5))


def test_foreach_batch_with_txn_options_is_exactly_once(spark: SparkSession,
                                                        tmp_path: Path) -> None:
    src, ckpt, uri = tmp_path / "src", tmp_path / "ckpt", str(tmp_path / "t")
    add_source_file(src, 0, 0, 10)
    add_source_file(src, 1, 10, 20)

    def write_batch(df: DataFrame, batch_id: int) -> None:
        (df.write.format("caslake").mode("append").option("txnAppId", "fb-ingest")
         .option("txnVersion", str(batch_id)).save(uri))

    def sink(w: DataStreamWriter) -> DataStreamWriter:
        return w.foreachBatch(write_batch).option("checkpointLocation", str(ckpt))

    run_stream(spark, src, uri, sink)
    assert caslake.open_table(uri).version == 2  # create + one commit per batch
    files = data_files(uri)
    forget_batch(ckpt, 1)
    run_stream(spark, src, uri, sink)
    assert (ckpt / "commits" / "1").exists()
    table = caslake.open_table(uri)
    assert table.version == 2 and table.snapshot.manifest.txns == {"fb-ingest": 1}
    assert data_files(uri) == files
    assert ids(uri) == list(range(20))



def test_stream_commit_and_abort_on_fresh_writers(tmp_path: Path) -> None:
    """Spark builds a new stream writer for every commit and abort call.  An abort that
    runs after its batch committed (the table has moved on since) keeps the files; an
    abort or commit of a replayed attempt of a recorded batch removes that attempt's."""
    uri = str(tmp_path / "t")
    caslake.create_table(uri, ARROW_SCHEMA)
    schema = StructType([StructField("id", LongType()), StructField("user", StringType())])

    def writer() -> CaslakeStreamWriter:
        return CaslakeStreamWriter(uri, {}, schema, False, "app")

    def task(lo: int, hi: int) -> CaslakeCommitMessage:
        batch = pa.record_batch({"id": list(range(lo, hi)), "user": ["u"] * (hi - lo)},
                                schema=ARROW_SCHEMA)
        message = writer().write(iter([batch]))
        assert isinstance(message, CaslakeCommitMessage) and message.files
        return message

    def paths(m: CaslakeCommitMessage) -> set[str]:
        return {f["path"] for f in m.files}

    first = task(0, 5)
    writer().commit([first], 7)
    caslake.open_table(uri).append(pa.table({"id": [99], "user": ["x"]}, schema=ARROW_SCHEMA))
    writer().abort([first], 7)  # e.g. the commit worker died after the commit landed
    assert paths(first) <= data_files(uri)
    replay = task(0, 5)
    writer().abort([replay], 7)
    replay2 = task(0, 5)
    writer().commit([replay2], 7)
    assert not (paths(replay) | paths(replay2)) & data_files(uri)
    table = caslake.open_table(uri)
    assert table.version == 2 and table.snapshot.manifest.txns == {"app": 7}
    assert ids(uri) == [0, 1, 2, 3, 4, 99]


def test_complete_mode_replaces_the_rows_once_per_batch(tmp_path: Path) -> None:
    """Output mode complete (Spark passes overwrite=True): each batch's result replaces
    the table's rows in one commit; a replayed batch changes nothing."""
    uri = str(tmp_path / "t")
    schema = StructType([StructField("id", LongType()), StructField("user", StringType())])

    def run_batch(batch_id: int, lo: int, hi: int) -> None:
        writer = CaslakeStreamWriter(uri, {}, schema, True, "agg")
        batch = pa.record_batch({"id": list(range(lo, hi)), "user": ["u"] * (hi - lo)},
                                schema=ARROW_SCHEMA)
        message = writer.write(iter([batch]))
        CaslakeStreamWriter(uri, {}, schema, True, "agg").commit([message], batch_id)

    run_batch(0, 0, 3)  # creates the table
    run_batch(1, 10, 12)
    run_batch(1, 50, 60)  # a replay of batch 1 (its result may differ): a no-op
    table = caslake.open_table(uri)
    assert [h.operation for h in table.history()] == ["overwrite", "overwrite", "create"]
    assert table.snapshot.manifest.txns == {"agg": 1}
    assert ids(uri) == [10, 11]
    assert data_files(uri) == referenced_files(uri)  # the replay's files were removed
