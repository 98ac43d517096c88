"""Spark reads an evolved table (rename, widen, add, drop-then-add) by field id: the
data source (caslake's scan) and read_native (Spark's own Parquet reader)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import caslake
import caslake.spark

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string()), ("secret", pa.string())])


def test_spark_reads_files_written_before_a_rename_by_field_id(spark: SparkSession,
                                                                tmp_path: Path) -> None:
    caslake.spark.register(spark)
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(pa.table({"id": pa.array([1, 2, 3], pa.int32()), "name": ["a", "b", "c"],
                       "secret": ["s1", "s2", "s3"]}, schema=SCHEMA))
    t.delete("id = 2")
    (t.update_schema().rename_column("name", "label").widen_column("id", "int64")
     .drop_column("secret").commit())
    t.update_schema().add_column("secret", "string").commit()
    t.append(pa.table({"id": pa.array([4], pa.int64()), "label": ["d"], "secret": ["new"]}))
    want = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert want == [{"id": 1, "label": "a", "secret": None},
                    {"id": 3, "label": "c", "secret": None},
                    {"id": 4, "label": "d", "secret": "new"}]
    for df in (spark.read.format("caslake").load(uri), caslake.spark.read_native(spark, uri)):
        assert df.columns == ["id", "label", "secret"]
        got = sorted((r.asDict() for r in df.collect()), key=lambda r: r["id"])
        assert got == want
