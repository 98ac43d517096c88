"""Non-nullable columns on either side of every Spark write path (issue 27).

``spark.range`` gives ``id bigint NOT NULL``; a table created from such a
DataFrame has ``id int64 not null``.  Nullability differences between the
DataFrame and the table must not matter while the values conform, on every
path (``df.write``, ``caslake.spark.save``, ``upsert`` both ways of matching
keys, ``delete``, the streaming sink); a NULL bound for a non-nullable table
column is a SchemaMismatch naming the column.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import caslake
import caslake.spark
from caslake.errors import SchemaMismatch

pytestmark = [pytest.mark.spark]

NULLABLE = pa.schema([("id", pa.int64()), ("v", pa.string())])
NOT_NULL = pa.schema([pa.field("id", pa.int64(), nullable=False),
                      pa.field("v", pa.string(), nullable=False)])


def _table(uri: str, schema: pa.Schema) -> caslake.Table:
    t = caslake.create_table(uri, schema)
    t.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema))
    return t


def _range_df(spark: SparkSession, lo: int, hi: int) -> DataFrame:
    """Both columns NOT NULL, as spark.range and expressions over it give them."""
    df = spark.range(lo, hi).withColumn("v", F.concat(F.lit("r"), F.col("id").cast("string")))
    assert not any(f.nullable for f in df.schema.fields)
    return df


def _nullable_df(spark: SparkSession, rows: list[tuple[int | None, str | None]]) -> DataFrame:
    return spark.createDataFrame(rows, "id bigint, v string")


def _rows(uri: str) -> list[tuple[Any, Any]]:
    t = caslake.open_table(uri).scan().to_arrow()
    return sorted(zip(t["id"].to_pylist(), t["v"].to_pylist(), strict=True),
                  key=lambda r: (r[0] is None, r[0] or 0))


# (table schema, DataFrame factory): every pairing of nullable and NOT NULL
PAIRS = [(NULLABLE, "range"), (NOT_NULL, "range"), (NOT_NULL, "nullable")]
PAIR_IDS = ["nullable-table/notnull-df", "notnull-table/notnull-df",
            "notnull-table/nullable-df"]


def _df(spark: SparkSession, kind: str, lo: int, hi: int) -> DataFrame:
    if kind == "range":
        return _range_df(spark, lo, hi)
    return _nullable_df(spark, [(i, f"r{i}") for i in range(lo, hi)])


@pytest.mark.parametrize("limit", [None, 0], ids=["broadcast-keys", "semi-join"])
@pytest.mark.parametrize(("schema", "kind"), PAIRS, ids=PAIR_IDS)
def test_upsert_ignores_nullability_differences(spark: SparkSession, tmp_path: Path,
                                                schema: pa.Schema, kind: str,
                                                limit: int | None) -> None:
    uri = str(tmp_path / "t")
    _table(uri, schema)
    kwargs: dict[str, Any] = {} if limit is None else {"broadcast_keys_limit": limit}
    got = caslake.spark.upsert(spark, uri, _df(spark, kind, 2, 6), key=["id"], **kwargs)
    assert got.rows_deleted == 2 and got.rows_added == 4
    assert _rows(uri) == [(1, "a"), (2, "r2"), (3, "r3"), (4, "r4"), (5, "r5")]
    assert caslake.open_table(uri).schema == schema  # the table keeps its nullability


@pytest.mark.parametrize(("schema", "kind"), PAIRS, ids=PAIR_IDS)
def test_writes_and_delete_ignore_nullability_differences(
        spark: SparkSession, tmp_path: Path, schema: pa.Schema, kind: str) -> None:
    uri = str(tmp_path / "t")
    _table(uri, schema)
    _df(spark, kind, 10, 12).write.format("caslake").mode("append").save(uri)
    caslake.spark.save(_df(spark, kind, 20, 22), uri, mode="append")
    res = caslake.spark.delete(spark, uri, "id = 2 OR id = 21")
    assert res.rows_deleted == 2
    assert [r[0] for r in _rows(uri)] == [1, 3, 10, 11, 20]
    caslake.spark.save(_df(spark, kind, 30, 32), uri, mode="overwrite")
    assert _rows(uri) == [(30, "r30"), (31, "r31")]
    assert caslake.open_table(uri).schema == schema


def test_table_created_from_range_keeps_not_null_and_takes_nullable_rows(
        spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.spark.save(_range_df(spark, 0, 3), uri)  # errorifexists: creates the table
    assert not caslake.open_table(uri).schema.field("id").nullable
    caslake.spark.upsert(spark, uri, _nullable_df(spark, [(1, "x"), (7, "y")]), key="id")
    caslake.spark.upsert(spark, uri, _range_df(spark, 2, 4), key="id",
                         broadcast_keys_limit=0)
    assert _rows(uri) == [(0, "r0"), (1, "x"), (2, "r2"), (3, "r3"), (7, "y")]
    assert caslake.spark.delete(spark, uri, "id >= 3").rows_deleted == 2


def _null_error_paths(spark: SparkSession, uri: str
                      ) -> list[tuple[str, Callable[[], object]]]:
    bad = _nullable_df(spark, [(40, None), (41, "ok")])
    return [("save", lambda: caslake.spark.save(bad, uri, mode="append")),
            ("upsert", lambda: caslake.spark.upsert(spark, uri, bad, key="id")),
            ("upsert-semi-join", lambda: caslake.spark.upsert(spark, uri, bad, key="id",
                                                              broadcast_keys_limit=0))]


def test_null_in_a_not_null_column_is_a_schema_mismatch(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = _table(uri, NOT_NULL)
    for name, call in _null_error_paths(spark, uri):
        with pytest.raises(SchemaMismatch, match="'v'") as err:
            call()
        assert err.value.column == "v", name
    bad = _nullable_df(spark, [(40, None)])
    with pytest.raises(Exception, match=r"SchemaMismatch: column 'v' is not nullable"):
        bad.write.format("caslake").mode("append").save(uri)  # inside Spark's own error
    assert t.refresh().version == 1 and _rows(uri)[-1] == (3, "c")


# --- streaming ----------------------------------------------------------------


def _stream(spark: SparkSession, src: Path, uri: str, ckpt: Path) -> None:
    """An availableNow query over JSON files whose columns are made NOT NULL."""
    stream = (spark.readStream.schema("id BIGINT, v STRING").json(str(src))
              .select(F.coalesce("id", F.lit(-1)).alias("id"),
                      F.coalesce("v", F.lit("none")).alias("v")))
    assert not any(f.nullable for f in stream.schema.fields)
    query = (stream.writeStream.format("caslake").option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start(uri))
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    err = query.exception()
    if err is not None:
        raise err


@pytest.mark.parametrize("schema", [NULLABLE, NOT_NULL], ids=["nullable", "notnull"])
def test_stream_of_not_null_columns(spark: SparkSession, tmp_path: Path,
                                    schema: pa.Schema) -> None:
    src, uri = tmp_path / "src", str(tmp_path / "t")
    src.mkdir()
    (src / "a.json").write_text("".join(json.dumps({"id": i, "v": f"s{i}"}) + "\n"
                                        for i in (5, 6)))
    _table(uri, schema)
    _stream(spark, src, uri, tmp_path / "ckpt")
    assert _rows(uri) == [(1, "a"), (2, "b"), (3, "c"), (5, "s5"), (6, "s6")]
    fresh = str(tmp_path / "fresh")  # a table the stream creates: NOT NULL columns
    _stream(spark, src, fresh, tmp_path / "ckpt2")
    assert _rows(fresh) == [(5, "s5"), (6, "s6")]


def test_stream_null_into_not_null_column_fails_naming_it(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    src, uri = tmp_path / "src", str(tmp_path / "t")
    src.mkdir()
    (src / "a.json").write_text(json.dumps({"id": 9, "v": None}) + "\n")
    _table(uri, NOT_NULL)
    stream = spark.readStream.schema("id BIGINT, v STRING").json(str(src))
    query = (stream.writeStream.format("caslake")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start(uri))
    try:
        with pytest.raises(StreamingQueryException,
                           match=r"SchemaMismatch: column 'v' is not nullable"):
            query.awaitTermination(180)
    finally:
        query.stop()
    assert caslake.open_table(uri).version == 1
