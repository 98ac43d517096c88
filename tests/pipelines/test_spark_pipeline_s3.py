"""A three-stage streaming pipeline on moto S3 (issue 30 acceptance): bronze
(appends, a correction by upsert, an erasure by delete, then a purge) -> silver
(bronze's change feed, foreachBatch upserts with txn) -> gold (per-user
aggregates); gold ends equal to DuckDB's aggregation of bronze, and silver to
bronze's cleaned rows.  A replayed micro-batch changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import caslake
from caslake.spark.pipeline import GoldStage, SilverStage

pytestmark = [pytest.mark.spark, pytest.mark.s3]

BRONZE = pa.schema([("event_id", pa.int64()), ("user_id", pa.string()),
                    ("event_type", pa.string()), ("amount", pa.float64())])
SILVER = BRONZE
GOLD = pa.schema([("user_id", pa.string()), ("events", pa.int64()), ("total", pa.float64())])


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    pytest.importorskip("pyspark")
    from tests.spark.helpers import local_spark

    return local_spark()


def events(lo: int, hi: int, bump: float = 0.0) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"event_id": ids, "user_id": [f"u{i % 7}" for i in ids],
                     "event_type": ["buy" if i % 2 else "view" for i in ids],
                     "amount": [None if i % 11 == 0 else round(i * 1.5 + bump, 2)
                                for i in ids]}, schema=BRONZE)


def sorted_rows(t: pa.Table, key: str) -> list[dict[str, object]]:
    return sorted(t.to_pylist(), key=lambda r: str(r[key]))


def test_bronze_silver_gold_on_s3(spark: SparkSession, s3_uri: str,
                                  s3_options: dict[str, str], tmp_path: Path) -> None:
    base = s3_uri.rsplit("/", 1)[0]
    uris = {n: f"{base}/{n}" for n in ("bronze", "silver", "gold")}
    opts = dict(s3_options)
    bronze = caslake.create_table(uris["bronze"], BRONZE, storage_options=opts)
    caslake.create_table(uris["silver"], SILVER, storage_options=opts)
    caslake.create_table(uris["gold"], GOLD, storage_options=opts)
    silver = SilverStage(spark, uris["bronze"], uris["silver"], str(tmp_path / "c1"),
                         "silver-from-bronze", opts)
    gold = GoldStage(spark, uris["silver"], uris["gold"], str(tmp_path / "c2"),
                     "gold-from-silver", opts)

    def run_all() -> None:
        silver.run()
        gold.run()

    bronze.append(events(0, 60))
    bronze.append(events(60, 100))
    run_all()
    bronze.upsert(events(50, 70, bump=100.0), key="event_id")  # corrections
    bronze.append(events(100, 130))
    bronze.delete("user_id = 'u3'")  # an erasure: flows through as deletes
    run_all()
    bronze.purge("user_id = 'u3'")  # then physical erasure: nothing left to delete
    bronze.append(events(130, 140))  # u3 comes back with new events
    run_all()

    con = duckdb.connect()
    con.register("bronze", caslake.open_table(uris["bronze"], storage_options=opts).to_arrow())
    want_silver = con.execute("SELECT * FROM bronze WHERE amount IS NOT NULL"
                              ).fetch_arrow_table()
    want_gold = con.execute("SELECT user_id, count(*) AS events, round(sum(amount), 2) AS "
                            "total FROM bronze WHERE amount IS NOT NULL GROUP BY user_id"
                            ).fetch_arrow_table()
    got_silver = caslake.open_table(uris["silver"], storage_options=opts).to_arrow()
    got_gold = caslake.open_table(uris["gold"], storage_options=opts).to_arrow()
    assert sorted_rows(got_silver, "event_id") == sorted_rows(want_silver, "event_id")
    assert [r["user_id"] for r in sorted_rows(got_gold, "user_id")] == \
        [r["user_id"] for r in sorted_rows(want_gold, "user_id")]
    for g, w in zip(sorted_rows(got_gold, "user_id"), sorted_rows(want_gold, "user_id"),
                    strict=True):
        assert g["events"] == w["events"] and g["total"] == pytest.approx(w["total"]), (g, w)
    erased = [r for r in got_silver.to_pylist() if r["user_id"] == "u3"]
    assert erased and all(r["event_id"] >= 130 for r in erased)

    # A replayed micro-batch (Spark re-runs the last one after a crash) commits nothing.
    head = caslake.open_table(uris["silver"], storage_options=opts).version
    txns = caslake.open_table(uris["silver"], storage_options=opts).snapshot.manifest.txns
    assert txns == {"silver-from-bronze": 2}  # three batches, each recorded
    feed = spark.read.format("caslake").option("readChangeFeed", "true") \
        .option("startingVersion", "1").option("storage_options", json.dumps(opts)) \
        .load(uris["bronze"])
    silver.apply(feed, 0)
    assert caslake.open_table(uris["silver"], storage_options=opts).version == head
