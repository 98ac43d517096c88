"""``caslake.spark.save`` (issue 10, item 13): Spark's save modes, which PySpark 4.3
refuses for Python data sources, with the semantics Spark users know; and a
caslake error raised in a Spark task reaches the user as that error, first line
``SchemaMismatch: ...``, not as an 11-line PYTHON_DATA_SOURCE_ERROR."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import caslake
import caslake.spark
from caslake.errors import InvalidArgument, SchemaMismatch, TableAlreadyExists
from tests.spark.helpers import as_df, rows

# The dev extra keeps pandas 3 (caslake's own pandas paths are tested on it); the tests
# build their DataFrames from pandas, which PySpark 4.3 warns about (the spark extra
# pins pandas < 3 for users).
pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas"),
              pytest.mark.filterwarnings("ignore:Cannot infer the eval type")]


def test_save_modes(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.spark.save(as_df(spark, rows(0, 10)), uri)  # default errorifexists: creates
    assert caslake.open_table(uri).scan().count() == 10
    for mode in ("errorifexists", "error"):
        with pytest.raises(TableAlreadyExists, match="mode='append'"):
            caslake.spark.save(as_df(spark, rows(10, 20)), uri, mode=mode)
    v = caslake.open_table(uri).version
    caslake.spark.save(as_df(spark, rows(10, 20)), uri, mode="ignore")
    assert caslake.open_table(uri).version == v  # ignore: an existing table is left alone
    caslake.spark.save(as_df(spark, rows(10, 20)), uri, mode="append")
    assert caslake.open_table(uri).scan().count() == 20
    caslake.spark.save(as_df(spark, rows(100, 103)), uri, mode="overwrite")
    got = caslake.open_table(uri).to_arrow()
    assert sorted(got.column("id").to_pylist()) == [100, 101, 102]
    fresh = str(tmp_path / "u")
    caslake.spark.save(as_df(spark, rows(0, 4)), fresh, mode="ignore")  # creates when absent
    caslake.spark.save(as_df(spark, rows(0, 4)), str(tmp_path / "w"), mode="append")
    assert caslake.open_table(fresh).scan().count() == 4
    assert caslake.open_table(str(tmp_path / "w")).scan().count() == 4
    with pytest.raises(InvalidArgument, match="mode"):
        caslake.spark.save(as_df(spark, rows(0, 1)), uri, mode="upsert")


def test_caslake_error_in_a_task_is_the_first_line(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.spark.save(as_df(spark, rows(0, 4)), uri)
    wrong = spark.createDataFrame([(1, "x")], "id string, other string")
    with pytest.raises(SchemaMismatch) as ei:
        caslake.spark.save(wrong, uri, mode="append")
    first = str(ei.value).splitlines()[0]
    assert first.startswith("SchemaMismatch: ") and "PYTHON_DATA_SOURCE_ERROR" not in first, first
    assert "'other'" in first or "'id'" in first


def test_register_docstring_points_to_save() -> None:
    doc = caslake.spark.register.__doc__ or ""
    assert "caslake.spark.save" in doc and "errorifexists" in doc
