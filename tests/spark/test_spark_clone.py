"""Spark reads and distributed DML of a clone (docs/format.md, "Clones"; notes/model.md
defects 5 and 6): the ``caslake`` data source, ``read_native`` and
``caslake.spark.delete`` / ``upsert`` read a clone's sources' files and tombstones
through the same routing as ``Table.scan``, for chains one, two and three deep with
deletes at every level, on the local filesystem and (the data source) on S3."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import caslake
import caslake.spark
from caslake.api import Table
from tests.export.test_export_clone import batch, clone_chain

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]


def rows_of(df: DataFrame) -> list[tuple[int, str]]:
    return sorted((r["id"], r["s"]) for r in df.collect())


def scan_rows(t: Table, where: str | None = None) -> list[tuple[int, str]]:
    got = t.scan(where=where).to_arrow()
    return sorted(zip(got.column("id").to_pylist(), got.column("s").to_pylist(), strict=True))


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_spark_reads_of_a_clone_chain_equal_its_scan(spark: SparkSession, tmp_path: Path,
                                                     depth: int) -> None:
    chain = clone_chain(tmp_path, depth)
    failures = []
    for level, t in enumerate(chain):
        want, want_hit = scan_rows(t), scan_rows(t, "id BETWEEN 3 AND 25")

        def load(t: Table = t, want: list[tuple[int, str]] = want,
                 want_hit: list[tuple[int, str]] = want_hit) -> list[tuple[int, str]]:
            df = spark.read.format("caslake").load(t.uri)  # one DataFrame, reused
            hit = rows_of(df.where(F.col("id").between(3, 25)))
            assert hit == want_hit, ("filtered", hit, want_hit)
            assert df.count() == len(want)
            return rows_of(df)

        def native(t: Table = t) -> list[tuple[int, str]]:
            return rows_of(caslake.spark.read_native(spark, t.uri))

        for path, read in (("Spark load", load), ("read_native", native)):
            try:
                got = read()
            except Exception as e:  # every (level, path) is reported at once
                failures.append(f"level {level}, {path}: {type(e).__name__}: "
                                f"{str(e).splitlines()[0][:300]}")
                continue
            if got != want:
                failures.append(f"level {level}, {path}: {got} != {want}")
    assert not failures, "\n".join(failures)


def test_distributed_delete_and_upsert_of_a_clone(spark: SparkSession, tmp_path: Path) -> None:
    """``caslake.spark.delete`` / ``upsert`` on the third clone of a chain (rows in
    files of every table of the chain) do what ``Table.delete`` / ``upsert`` do on a
    twin clone, and leave the sources as they were."""
    chain = clone_chain(tmp_path, 3)
    before = [scan_rows(t) for t in chain[:-1]]
    twin = str(tmp_path / "twin")
    caslake.clone(chain[2].uri, twin)
    local = caslake.open_table(twin)
    local.delete("id = 4 OR id = 12 OR id = 32")  # the third clone's own delete
    target = chain[3]
    assert scan_rows(local) == scan_rows(target)
    where = "id IN (0, 13, 22, 33)"  # one row in a file of each table of the chain
    got = caslake.spark.delete(spark, target.uri, where)
    want = local.delete(where)
    assert got.rows_deleted == want.rows_deleted == 4
    assert scan_rows(target.refresh()) == scan_rows(local.refresh())
    changes = pa.concat_tables([batch(5, 8), batch(34, 38)])
    changes = changes.set_column(1, "s", pa.array([f"new{i}" for i in range(changes.num_rows)]))
    caslake.spark.upsert(spark, target.uri, spark.createDataFrame(changes.to_pandas()),
                         key=["id"])
    local.upsert(changes, key=["id"])
    assert scan_rows(target.refresh()) == scan_rows(local.refresh())
    assert [scan_rows(t.refresh()) for t in chain[:-1]] == before


@pytest.mark.s3
def test_spark_load_of_a_clone_on_s3(spark: SparkSession, s3_uri: str,
                                     s3_options: dict[str, str], tmp_path: Path) -> None:
    import json

    chain = clone_chain(tmp_path, 2, storage_options=s3_options, base=s3_uri)
    for t in chain:
        df = (spark.read.format("caslake").option("storage_options", json.dumps(s3_options))
              .load(t.uri))
        assert rows_of(df) == scan_rows(t)
