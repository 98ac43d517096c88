"""``spark.readStream.format("caslake")`` (docs/protocol.md, "Spark streaming reads"):
appends stream once each, a change commit stops the stream (or is skipped), the
change feed equals ``Table.changes``, rate limits, starting points, branches and
typed errors.  Expected rows come from the pyarrow tables the test appended."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import DataFrame, SparkSession

import caslake
from caslake.errors import InvalidArgument, RefNotFound, VersionExpired, VersionNotFound
from caslake.spark.stream_source import (
    CaslakeStreamReader,
    ChangeCommitInStream,
    Position,
    StreamOptions,
)
from caslake.spark.types import spark_schema_for
from tests.spark.helpers import rows

pytestmark = [pytest.mark.spark]

Batches = list[tuple[int, pa.Table]]


def run(spark: SparkSession, uri: str, chk: Path, **options: str) -> Batches:
    """One ``Trigger.AvailableNow`` run of a stream on checkpoint ``chk``: the
    micro-batches foreachBatch saw (batch id, rows)."""
    out: Batches = []

    def sink(df: DataFrame, batch_id: int) -> None:
        out.append((batch_id, df.toArrow()))

    query = (spark.readStream.format("caslake").options(**options).load(uri)
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(chk))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    return out


def ids_of(batches: Batches) -> list[int]:
    return sorted(i for _, t in batches for i in t.column("id").to_pylist())


def failure(call: Callable[[], object]) -> str:
    with pytest.raises(Exception) as err:  # Spark wraps it: StreamingQueryException
        call()
    return str(err.value)


def table_with(tmp_path: Path, *chunks: tuple[int, int]) -> caslake.Table:
    t = caslake.create_table(str(tmp_path / "t"), rows(0, 0).schema)
    for lo, hi in chunks:
        t.append(rows(lo, hi))
    return t


def test_appends_stream_once_and_a_delete_stops_the_stream_naming_it(
        spark: SparkSession, tmp_path: Path) -> None:
    t = table_with(tmp_path, (0, 10), (10, 20))
    chk = tmp_path / "chk"
    first = run(spark, t.uri, chk)
    assert ids_of(first) == list(range(20))  # the snapshot at start, every row once
    t.append(rows(20, 25))
    t.compact()  # changes no row: nothing to stream, no error
    t.append(rows(25, 30))
    assert ids_of(run(spark, t.uri, chk)) == list(range(20, 30))
    assert run(spark, t.uri, chk) == [] or ids_of(run(spark, t.uri, chk)) == []
    t.append(rows(30, 33))
    deleted = t.delete("id < 5").version
    t.append(rows(33, 36))
    text = failure(lambda: run(spark, t.uri, chk))
    assert "ChangeCommitInStream" in text and f"version {deleted} (delete)" in text, text[:3000]
    # The append before the delete was delivered before the stream stopped; the
    # stream stays stopped at the delete on every restart.
    text = failure(lambda: run(spark, t.uri, chk))
    assert f"version {deleted} (delete)" in text
    skipped = run(spark, t.uri, chk, skipChangeCommits="true")
    assert ids_of(skipped) == list(range(33, 36))


def test_skip_change_commits_skips_deletes_and_upserts_whole(
        spark: SparkSession, tmp_path: Path) -> None:
    t = table_with(tmp_path, (0, 5))
    t.delete("id = 1")
    t.upsert(rows(3, 8), key="id")  # replaces 3, 4; adds 5..7: skipped with the version
    t.append(rows(100, 103))
    got = run(spark, t.uri, tmp_path / "chk", startingVersion="1", skipChangeCommits="true")
    assert ids_of(got) == [0, 1, 2, 3, 4, 100, 101, 102]


def _feed(table: pa.Table) -> list[tuple[object, ...]]:
    cols = ["id", "user", "score", "_change_type", "_commit_version"]
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True),
                  key=repr)


def test_read_change_feed_equals_table_changes(spark: SparkSession, tmp_path: Path) -> None:
    t = table_with(tmp_path, (0, 10))
    t.delete("id < 3")
    t.upsert(rows(8, 12).set_column(3, "score", pa.array([9.5] * 4)), key="id")
    t.compact()
    t.purge("id = 9")
    t.restore(version=1)
    t.append(rows(50, 52))
    chk = tmp_path / "chk"
    got = run(spark, t.uri, chk, readChangeFeed="true", startingVersion="1",
              maxFilesPerTrigger="1")
    want = t.changes(1).to_arrow()
    assert _feed(pa.concat_tables(b for _, b in got)) == _feed(want)
    assert {"update_preimage", "update_postimage", "delete", "insert"} <= set(
        want.column("_change_type").to_pylist())
    assert len(got) >= 5  # one version a batch (maxFilesPerTrigger=1)
    ts = pa.concat_tables(b for _, b in got).column("_commit_timestamp")
    assert pc.min(ts).as_py() is not None
    # The batch change feed is the same range as a DataFrame.
    batch = spark.read.format("caslake").option("readChangeFeed", "true") \
        .option("startingVersion", "1").load(t.uri).toArrow()
    assert _feed(batch) == _feed(want)


def test_change_feed_stream_starts_with_the_snapshot_as_inserts(
        spark: SparkSession, tmp_path: Path) -> None:
    t = table_with(tmp_path, (0, 4), (4, 8))
    t.delete("id = 0")
    head = t.version
    got = pa.concat_tables(b for _, b in run(spark, t.uri, tmp_path / "chk",
                                             readChangeFeed="true"))
    assert sorted(got.column("id").to_pylist()) == list(range(1, 8))
    assert set(got.column("_change_type").to_pylist()) == {"insert"}
    assert set(got.column("_commit_version").to_pylist()) == {head}


def test_rate_limits_and_available_now(spark: SparkSession, tmp_path: Path) -> None:
    t = table_with(tmp_path, *((i * 10, i * 10 + 10) for i in range(5)))
    files = run(spark, t.uri, tmp_path / "c1", startingVersion="1", maxFilesPerTrigger="2")
    assert [len(b) for _, b in files] == [20, 20, 10]
    assert ids_of(files) == list(range(50))
    one = run(spark, t.uri, tmp_path / "c2", startingVersion="1", maxBytesPerTrigger="1")
    assert [len(b) for _, b in one] == [10] * 5
    size = max(f["bytes"] for f in t.live_files())
    two = run(spark, t.uri, tmp_path / "c3", maxBytesPerTrigger=str(size + 1))
    assert [len(b) for _, b in two] == [20, 20, 10]  # soft: the file crossing it is in
    unlimited = run(spark, t.uri, tmp_path / "c4", startingVersion="1")
    assert [len(b) for _, b in unlimited] == [50]


def test_starting_points_and_branches(spark: SparkSession, tmp_path: Path) -> None:
    t = table_with(tmp_path, (0, 3), (3, 6))
    t.create_tag("v2", 2)
    time.sleep(0.05)
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    t.append(rows(6, 9))
    assert ids_of(run(spark, t.uri, tmp_path / "a", startingVersion="2")) == list(range(3, 9))
    assert ids_of(run(spark, t.uri, tmp_path / "b", startingVersion="v2")) == list(range(3, 9))
    assert ids_of(run(spark, t.uri, tmp_path / "c",
                      startingTimestamp=between.isoformat())) == list(range(6, 9))
    latest = tmp_path / "d"
    assert ids_of(run(spark, t.uri, latest, startingVersion="latest")) == []
    t.append(rows(9, 10))
    assert ids_of(run(spark, t.uri, latest)) == [9]
    b = t.create_branch("dev")
    b.append(rows(200, 202))
    t.append(rows(300, 301))
    on_dev = run(spark, t.uri, tmp_path / "e", branch="dev", startingVersion=str(b.version))
    assert ids_of(on_dev) == [200, 201]


def test_bad_input_is_typed(spark: SparkSession, tmp_path: Path) -> None:
    t = table_with(tmp_path, (0, 3), (3, 6))

    def start(**options: str) -> str:
        return failure(lambda: run(spark, t.uri, tmp_path / f"k{len(options)}{time.time()}",
                                   **options))

    assert "VersionNotFound" in start(startingVersion="9")
    assert "RefNotFound" in start(startingVersion="no-such-tag")
    assert "RefNotFound" in start(branch="nope")
    for bad in ({"maxFilesPerTrigger": "0"}, {"maxBytesPerTrigger": "lots"},
                {"startingVersion": "1", "startingTimestamp": "0"},
                {"skipChangeCommits": "maybe"}, {"version": "1"}):
        assert "InvalidArgument" in start(**bad), bad
    # A batch change feed: start after the end, and a range gc expired.
    feed = spark.read.format("caslake").option("readChangeFeed", "true")
    text = failure(lambda: feed.option("startingVersion", "2").option("endingVersion", "1")
                   .load(t.uri).collect())
    assert "InvalidArgument" in text and "after end_version" in text
    t.append(rows(6, 9))
    t.gc(retention=dt.timedelta(0), force=True,
         now=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    oldest = t.refresh().snapshot.manifest.oldest_version
    assert oldest > 1
    text = failure(lambda: feed.option("startingVersion", "1").load(t.uri).collect())
    assert "VersionExpired" in text, text[:2000]
    assert "VersionExpired" in start(startingVersion="1", readChangeFeed="true")
    assert "VersionExpired" in start(startingVersion="1")


def test_the_reader_raises_caslake_errors_directly(tmp_path: Path) -> None:
    t = table_with(tmp_path, (0, 3))
    t.delete("id = 0")

    def reader(**options: str) -> CaslakeStreamReader:
        opts = StreamOptions.parse({"path": t.uri, **options}, True)
        return CaslakeStreamReader(opts, spark_schema_for(rows(0, 0).schema))

    r = reader(startingVersion="1")
    before = r.latestOffset(r.initialOffset(), r.getDefaultReadLimit())
    assert before == {"version": 2, "index": 0, "snapshot": False}  # the append first
    with pytest.raises(ChangeCommitInStream) as err:
        r.latestOffset(before, r.getDefaultReadLimit())
    assert err.value.version == 2 and err.value.operation == "delete"
    with pytest.raises(VersionNotFound):
        reader(startingVersion="3").initialOffset()
    with pytest.raises(RefNotFound):
        reader(branch="x").initialOffset()
    with pytest.raises(InvalidArgument):
        Position.from_json({"version": "1"})
    r = reader()
    start = r.initialOffset()
    assert start == {"version": -1, "index": 0, "snapshot": True}  # planned by the first batch
    t.append(rows(10, 12))  # a restart asks again: the same offset, whatever landed
    assert reader().initialOffset() == start
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == {"version": 4, "index": 0, "snapshot": False}  # the batch ends the snapshot
    assert sorted(i for p in r.partitions(start, end) for b in r.read(p)
                  for i in b.column("id").to_pylist()) == [1, 2, 10, 11]
    assert r.latestOffset(end, r.getDefaultReadLimit()) == end  # nothing new: unchanged
    assert isinstance(VersionExpired("x", oldest_readable=1), VersionNotFound)
