"""``caslake.spark.write_dataset`` / ``read_dataset``: tasks write or read the parts of an
RFC-0008 dataset, one commit per job; checked with pyarrow, DuckDB and remote-store."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from remote_store import Store
from remote_store.backends import LocalBackend
from remote_store.ext.parquet import ParquetDatasetStore as RemoteStorePDS

import caslake.spark
from caslake.dataset import DatasetAlreadyExists, ParquetDatasetStore
from caslake.errors import InvalidArgument


def _frame(spark: SparkSession, n: int, parts: int, tag: str = "a"):  # type: ignore[no-untyped-def]
    return (spark.range(n, numPartitions=parts)
            .selectExpr("id", f"concat('{tag}', cast(id % 7 as string)) AS s",
                        "id * 0.5 AS f"))


def _expected(n: int, tag: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "s": [f"{tag}{i % 7}" for i in range(n)],
                     "f": [i * 0.5 for i in range(n)]})


def _same(got: pa.Table, want: pa.Table) -> bool:
    """Same columns and values (Spark marks ``id`` of ``spark.range`` non-nullable)."""
    return got.sort_by("id").to_pydict() == want.to_pydict()


def test_write_then_read_local(spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "lake")
    m = caslake.spark.write_dataset(_frame(spark, 5000, 4), root, "silver/orders",
                                    max_rows_per_file=600, run_id="job-1")
    assert m.row_count == 5000 and len(m.parts) >= 8
    gens = {p.split("/")[0] for p in m.parts}
    assert len(gens) == 1 and all("/task-" in p for p in m.parts)
    pds = ParquetDatasetStore(root)
    assert _same(pds.read_dataset("silver/orders"), _expected(5000))
    files = [str(tmp_path / "lake" / "silver/orders" / p) for p in m.parts]
    assert duckdb.sql(f"SELECT count(*), sum(id) FROM read_parquet({files})").fetchone() == (
        5000, sum(range(5000)))
    rs = RemoteStorePDS(Store(LocalBackend(root)))
    assert rs.read_dataset("silver/orders").num_rows == 5000
    # Reads: whole, projected and filtered, compared with pyarrow on the same data.
    df = caslake.spark.read_dataset(spark, root, "silver/orders")
    assert df.count() == 5000
    got = caslake.spark.read_dataset(spark, root, "silver/orders", columns=["id", "s"],
                                     filter="id >= 4990 OR s = 'a3' AND id < 30")
    rows = sorted((r["id"], r["s"]) for r in got.collect())
    want = [(i, f"a{i % 7}") for i in range(5000) if i >= 4990 or (i % 7 == 3 and i < 30)]
    assert rows == want
    # No overwrite: refused before any task writes; overwrite: atomic switch.
    before = sorted(p.name for p in (tmp_path / "lake").rglob("*"))
    with pytest.raises(DatasetAlreadyExists):
        caslake.spark.write_dataset(_frame(spark, 10, 2), root, "silver/orders")
    assert sorted(p.name for p in (tmp_path / "lake").rglob("*")) == before
    caslake.spark.write_dataset(_frame(spark, 30, 3, tag="b"), root, "silver/orders",
                                overwrite=True)
    assert _same(pds.read_dataset("silver/orders"), _expected(30, "b"))
    # An empty DataFrame is one empty part with the DataFrame's schema.
    empty = caslake.spark.write_dataset(_frame(spark, 0, 2), root, "empty")
    assert empty.row_count == 0 and pds.read_dataset("empty").column_names == ["id", "s", "f"]
    with pytest.raises(InvalidArgument):
        caslake.spark.write_dataset(_frame(spark, 1, 1), "memory://x", "k")


@pytest.mark.s3
def test_write_then_read_moto_s3(spark: SparkSession, s3_uri: str,
                                 s3_options: dict[str, str]) -> None:
    m = caslake.spark.write_dataset(_frame(spark, 2000, 3), s3_uri, "gold/s3",
                                    storage_options=s3_options)
    pds = ParquetDatasetStore(s3_uri, storage_options=s3_options)
    assert _same(pds.read_dataset("gold/s3"), _expected(2000))
    df = caslake.spark.read_dataset(spark, pds.store, "gold/s3", filter="id < 100")
    assert sorted(r["id"] for r in df.collect()) == list(range(100))
    assert len(m.parts) == 3
