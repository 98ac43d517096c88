"""Spark reads a file spliced by purge with plain ``spark.read.parquet``, and sees the
old file minus the erased rows, in order."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import caslake
from caslake.testing.parquet_files import add_parquet_file
from tests.maintenance.test_purge import SCHEMA, rows

pytestmark = pytest.mark.spark


def test_spark_reads_the_spliced_file(spark: SparkSession, tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.store.min_part_size = 16 * 1024
    add_parquet_file(t, rows(10_000, 64), row_group_rows=1000)
    old = t.io.live_files(t.snapshot)[0]
    full = pq.read_table(io.BytesIO(t.store.get(old.path).data))
    report = t.purge("user = 'user7'")
    assert report.strategy[old.path] == "splice"
    (new,) = t.io.live_files(t.snapshot)
    path = t.store.local_path(new.path)
    assert path is not None
    got = spark.read.parquet(path).toPandas()
    want = full.filter(pc.not_equal(full["user"], "user7")).to_pandas()
    assert got["id"].tolist() == want["id"].tolist()
    assert got["user"].tolist() == want["user"].tolist()
    assert [bytes(b) for b in got["blob"]] == want["blob"].tolist()
    # Spark's own row-group pruning on the spliced file's statistics.
    assert spark.read.parquet(path).where("id BETWEEN 4000 AND 4009").count() == 9
