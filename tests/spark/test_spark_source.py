"""Round trips through the ``caslake`` PySpark data source (local filesystem and moto S3)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNull, Not, StringStartsWith
from pyspark.testing import assertDataFrameEqual

import caslake
from caslake.spark.filters import split_filters
from tests.spark.helpers import SCHEMA, T0, as_df, read, rows

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

FILTER_NODE = re.compile(r"\bFilter \(")


def test_append_then_read_equals_caslake_scan(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    as_df(spark, rows(0, 50)).write.format("caslake").mode("append").save(uri)  # creates
    as_df(spark, rows(50, 80)).write.format("caslake").mode("append").save(uri)
    table = caslake.open_table(uri)
    assert table.version == 2  # create (0) + one commit per Spark write
    assert [h.operation for h in table.history()] == ["append", "append", "create"]
    table.delete("user = 'u1'")  # tombstones must apply to Spark reads too
    df = read(spark, uri)
    assert df.schema.simpleString() == "struct<id:bigint,user:string,ts:timestamp,score:double>"
    expected = table.scan().to_arrow()
    assert df.count() == expected.num_rows == 80 - len([i for i in range(80) if i % 3 == 1])
    assertDataFrameEqual(df, as_df(spark, expected))


def test_overwrite_replaces_rows_in_one_version(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    table.append(rows(0, 10))
    as_df(spark, rows(100, 105)).write.format("caslake").mode("overwrite").save(uri)
    table.refresh()
    assert table.version == 2 and table.history()[0].operation == "overwrite"
    assertDataFrameEqual(read(spark, uri), as_df(spark, rows(100, 105)))
    with pytest.raises(AnalysisException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        as_df(spark, rows(0, 1)).write.format("caslake").mode("errorifexists").save(uri)
    with pytest.raises(AnalysisException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        as_df(spark, rows(0, 1)).write.format("caslake").mode("ignore").save(uri)
    assert caslake.open_table(uri).version == 2


def test_time_travel_and_column_narrowing(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    table.append(rows(0, 10))
    at_v1 = table.history()[0].created_at
    table.append(rows(10, 20))
    table.delete("id < 5")
    old = read(spark, uri, version="1", columns="score,id")
    assert old.columns == ["score", "id"]
    assertDataFrameEqual(old, as_df(spark, rows(0, 10).select(["score", "id"])))
    by_time = read(spark, uri, timestamp=at_v1.isoformat())
    assert by_time.count() == 10
    assert read(spark, uri).count() == 15


def test_filters_stay_with_spark_and_filter_exactly(spark: SparkSession,
                                                   tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    for lo in (0, 100, 200):  # three files with disjoint id ranges
        table.append(rows(lo, lo + 100))
    table.delete("id = 155")
    df = read(spark, uri, minPartitions="8")
    assert df.rdd.getNumPartitions() == 3  # one task per file
    hit = df.filter((F.col("id") >= 150) & (F.col("id") < 160) & (F.col("user") != "u0"))
    # The reader takes no pushed filters (issue 27): Spark's Filter node applies them.
    assert FILTER_NODE.search(hit._jdf.queryExecution().executedPlan().toString())
    expected = table.scan(where="id >= 150 AND id < 160 AND user <> 'u0'").to_arrow()
    assertDataFrameEqual(hit, as_df(spark, expected))
    by_time = df.filter(F.col("ts") > T0 + dt.timedelta(hours=295))
    assert sorted(r.id for r in by_time.collect()) == [296, 297, 298, 299]
    assert df.filter(F.col("score") > 149.0).count() == 1
    assert sorted(r.id for r in df.filter(F.col("id").isin(5, 105, 155, 999)).collect()) == \
        [5, 105]
    assert df.count() == 299  # and the DataFrame itself is still whole


def test_filter_translation_absorbs_only_exact_filters() -> None:
    schema = SCHEMA
    absorbed = [EqualTo(("id",), 3), Not(IsNull(("user",))), In(("user",), ("u1", "u2")),
                GreaterThan(("ts",), T0)]
    kept = [GreaterThan(("score",), 1.0), StringStartsWith(("user",), "u"),
            In(("id",), (1, None)), EqualTo(("missing",), 1), EqualTo(("id",), "3"),
            GreaterThan(("ts",), T0.replace(tzinfo=None))]
    where, rest = split_filters(absorbed + kept, schema)
    assert rest == kept and all(a is b for a, b in zip(rest, kept, strict=True))
    assert where is not None
    assert str(where).count("AND") == 3


@pytest.mark.s3
def test_s3_round_trip_with_storage_options(spark: SparkSession, s3_uri: str,
                                            s3_options: dict[str, str]) -> None:
    opts = {"storage_options": json.dumps(s3_options)}
    as_df(spark, rows(0, 20)).write.format("caslake").options(**opts).mode("append").save(s3_uri)
    per_key = {f"storage.{k}": v for k, v in s3_options.items()}
    df = read(spark, s3_uri, **per_key).filter(F.col("id") < 5)
    assertDataFrameEqual(df, as_df(spark, rows(0, 5)))
    table = caslake.open_table(s3_uri, storage_options=s3_options)
    assert table.version == 1 and table.scan().count() == 20
