"""Spark's writes on a partitioned table (``day(ts)``, ``bucket(4, id)``): the data
source's append and ``caslake.spark.upsert`` write files of one partition each;
``caslake.spark.update`` / ``merge`` equal DuckDB running the same UPDATE / MERGE
on the same rows (Spark tasks compute and write the new rows, one commit); and
``save(..., mode="overwrite", partitionOverwriteMode="dynamic")`` replaces only the
partitions the DataFrame has rows in, in one commit (every row on an unpartitioned
table, as Delta does).  Layout checks: :mod:`tests.partition.layout`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType
from pyspark.sql import DataFrame, SparkSession

import caslake
import caslake.spark
from caslake.errors import DuplicateKey, InvalidArgument, SchemaMismatch
from tests.partition import data
from tests.partition.layout import PARTITION_BY, check_layout, file_partitions

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

DAY = dt.date(2026, 10, 31)
# Spark's timestamps are UTC instants: the table's ts is too.
SCHEMA = pa.schema([f.with_type(pa.timestamp("us", tz="UTC")) if f.name == "ts" else f
                    for f in data.SCHEMA])


def events(n: int, **kwargs: object) -> pa.Table:
    return data.events(n, **kwargs).cast(SCHEMA)  # type: ignore[arg-type]
_BUCKET = BucketTransform(4).transform(LongType())


def df_of(spark: SparkSession, t: pa.Table) -> DataFrame:
    return spark.createDataFrame(t)


def table_rows(uri: str) -> pa.Table:
    return caslake.open_table(uri).to_arrow()


def same_rows(got: pa.Table, want: pa.Table) -> None:
    got = duckdb.sql("select * from got order by id").fetch_arrow_table()
    want = duckdb.sql("select * from want order by id").fetch_arrow_table()
    assert got.num_rows == want.num_rows
    assert got.equals(want.cast(got.schema))


def test_spark_append_upsert_and_dynamic_overwrite_keep_partitions(
        spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA, partition_by=PARTITION_BY)
    base = events(800, seed=11, days=3)
    caslake.spark.save(df_of(spark, base), uri, mode="append")
    change = events(200, seed=12, days=3, first_id=700)  # 100 updated ids, 100 new
    caslake.spark.upsert(spark, uri, df_of(spark, change), key="id")
    expected = pa.concat_tables([base.slice(0, 700), change])
    check_layout(uri, expected, DAY)
    # Dynamic overwrite with rows of one day only: that day's (day, bucket)
    # partitions present in the data are replaced, every other row stays.
    t = caslake.open_table(uri)
    version = t.version
    new = events(60, seed=13, days=1, first_id=10_000, start=dt.datetime(2026, 10, 31))
    caslake.spark.save(df_of(spark, new), uri, mode="overwrite",
                       partitionOverwriteMode="dynamic")
    assert caslake.open_table(uri).version == version + 1
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

    def part(row: dict) -> tuple[int, int]:  # type: ignore[type-arg]
        return (row["ts"] - epoch).days, _BUCKET(row["id"])

    filled = {part(r) for r in new.to_pylist()}
    kept = pa.Table.from_pylist([r for r in expected.to_pylist() if part(r) not in filled],
                                schema=SCHEMA)
    assert kept.num_rows < expected.num_rows
    after = pa.concat_tables([kept, new])
    same_rows(table_rows(uri), after)
    check_layout(uri, after, DAY)
    history = caslake.open_table(uri).history(limit=1)[0]
    assert history.operation == "overwrite"
    # The same through Spark's own writer option (it was ignored there: a full overwrite).
    more = events(30, seed=16, days=1, first_id=20_000, start=dt.datetime(2026, 10, 31))
    (df_of(spark, more).write.format("caslake").mode("overwrite")
     .option("partitionOverwriteMode", "dynamic").save(uri))
    filled = {part(r) for r in more.to_pylist()}
    kept = pa.Table.from_pylist([r for r in after.to_pylist() if part(r) not in filled],
                                schema=SCHEMA)
    assert kept.num_rows > 0
    same_rows(table_rows(uri), pa.concat_tables([kept, more]))
    check_layout(uri, pa.concat_tables([kept, more]), DAY)


def test_dynamic_overwrite_of_an_unpartitioned_table_replaces_every_row(
        spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "plain")
    t = caslake.create_table(uri, SCHEMA)
    t.append(events(100, seed=14))
    new = events(10, seed=15, first_id=500)
    caslake.spark.save(df_of(spark, new), uri, mode="overwrite",
                       partitionOverwriteMode="dynamic")
    same_rows(table_rows(uri), new)
    with pytest.raises(InvalidArgument, match="partitionOverwriteMode"):
        caslake.spark.save(df_of(spark, new), uri, mode="overwrite",
                           partitionOverwriteMode="sometimes")


def test_spark_update_equals_duckdb_and_keeps_partitions(
        spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=PARTITION_BY)
    base = events(900, seed=16, days=3)
    t.append(base.slice(0, 450))
    t.append(base.slice(450))
    t.delete("amount > 95")
    version = t.version
    result = caslake.spark.update(spark, uri, set={"ts": "ts + INTERVAL 1 DAY",
                                                   "region": "upper(region)",
                                                   "amount": "amount * 2"},
                                  where="user_id < 300 AND region <> 'us'")
    assert result.version == version + 1 and result.rows_deleted > 0
    con = duckdb.connect()
    con.register("base", base)
    con.execute("create table e as select * from base where not amount > 95")
    con.execute("update e set ts = ts + INTERVAL 1 DAY, region = upper(region), "
                "amount = amount * 2 where user_id < 300 AND region <> 'us'")
    expected = con.execute("select * from e").fetch_arrow_table()
    same_rows(table_rows(uri), expected)
    check_layout(uri, expected, DAY)
    # A value of the wrong type: a typed error naming the column, before any task.
    with pytest.raises(SchemaMismatch, match="'amount'") as err:
        caslake.spark.update(spark, uri, set={"amount": "'lots'"}, where="id = 1")
    assert err.value.column == "amount"
    assert caslake.open_table(uri).version == version + 1


def test_spark_merge_equals_duckdb_and_refuses_two_source_rows_per_target(
        spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=PARTITION_BY)
    base = events(600, seed=17, days=3)
    t.append(base)
    source = events(300, seed=18, days=3, first_id=450)  # ids 450..599 match
    source = source.set_column(4, "amount", pc.multiply(source["amount"], -1.0))
    version = t.version
    (caslake.spark.merge(spark, uri, df_of(spark, source), on="id")
     .when_matched_delete(condition="source.amount > -10")
     .when_matched_update(set={"amount": "target.amount + 1000", "ts": "source.ts"})
     .when_not_matched_insert_all(condition="source.region <> 'apac'")
     .when_not_matched_by_source_delete(condition="target.amount < 5")
     .execute())
    assert caslake.open_table(uri).version == version + 1
    con = duckdb.connect()
    con.register("base", base)
    con.register("source", source)
    con.execute("create table target as select * from base")
    con.execute("merge into target using source on target.id = source.id "
                "when matched and source.amount > -10 then delete "
                "when matched then update set amount = target.amount + 1000, ts = source.ts "
                "when not matched and source.region <> 'apac' then insert * "
                "when not matched by source and target.amount < 5 then delete")
    expected = con.execute("select * from target").fetch_arrow_table()
    same_rows(table_rows(uri), expected)
    assert len(file_partitions(caslake.open_table(uri))) > 0  # one partition per file
    check_layout(uri, expected, DAY)
    # Two source rows matching one target row: DuplicateKey naming the key, no commit.
    twice = pa.concat_tables([source.slice(200, 1), source.slice(200, 1)])
    with pytest.raises(DuplicateKey, match="id=") as err:
        (caslake.spark.merge(spark, uri, df_of(spark, twice), on="id")
         .when_matched_update_all().execute())
    assert "id" in str(err.value)
    assert caslake.open_table(uri).version == version + 1
