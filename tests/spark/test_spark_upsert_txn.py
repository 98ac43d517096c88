"""A foreachBatch upsert with ``txn`` is one commit that carries its rows and its txn,
and a replay of the same batch commits nothing and leaves no file behind."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

import caslake
from caslake.spark import upsert


def test_an_upsert_with_txn_is_one_commit_and_a_replay_is_a_noop(spark: SparkSession,
                                                                 tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("id", pa.int64()), ("v", pa.string())]))
    t.append(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    df = spark.createDataFrame([(2, "B"), (3, "c")], "id long, v string")
    before = t.refresh().version
    res = upsert(spark, uri, df, "id", txn=("app", 7))
    t.refresh()
    assert not res.noop and t.version == before + 1  # one commit, not an upsert + a marker
    assert t.snapshot.manifest.txns == {"app": 7}
    want = [(1, "a"), (2, "B"), (3, "c")]
    assert sorted(tuple(r.values()) for r in t.scan().to_arrow().to_pylist()) == want
    data_files = {p for p in (tmp_path / "t" / "data").rglob("*.parquet")}
    again = upsert(spark, uri, df, "id", txn=("app", 7))  # the batch replayed
    assert again.noop and t.refresh().version == before + 1
    assert {p for p in (tmp_path / "t" / "data").rglob("*.parquet")} == data_files
    assert sorted(tuple(r.values()) for r in t.scan().to_arrow().to_pylist()) == want
    # Spark's own batch read agrees
    got = spark.read.format("caslake").load(uri).orderBy("id").collect()
    assert [tuple(r) for r in got] == want
