"""``caslake.spark.read_native``: Spark's own Parquet reader over a pinned snapshot,
deleted rows removed by (file path, row index), compared with the ``caslake`` data
source and with caslake's own scan."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.testing import assertDataFrameEqual

import caslake
import caslake.spark
from caslake.core import WriteOptions
from caslake.errors import InvalidArgument, SchemaMismatch, UnknownColumn
from caslake.format.tombstone import parse_tombstone
from caslake.spark.types import conform_for_read

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("user", pa.string()),
                    ("amount", pa.float64())])


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "user": [f"u{i % 5}" for i in ids],
                     "amount": [i / 4 for i in ids]}, schema=SCHEMA)


def source(spark: SparkSession, uri: str, **options: str) -> DataFrame:
    return spark.read.format("caslake").options(**options).load(uri)


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by([(n, "ascending") for n in table.column_names])


def tombstone_kinds(t: caslake.Table) -> set[str]:
    kinds = set()
    for ref in t.snapshot.manifest.tombstones:
        for fd in parse_tombstone(t.store.get(ref.path).data, ref.path).files:
            kinds |= ({"row_groups"} if fd.row_groups else set()) | (
                {"key_ranges"} if fd.key_ranges else set()) | (
                {"positions"} if fd.positions else set())
    return kinds


def build(uri: str) -> caslake.Table:
    """Five files: one clean, one with a few deleted positions, one (shuffled ids)
    with a key-range tombstone, one with wholly deleted row groups; then a fifth
    clean file appended after the deletes."""
    t = caslake.create_table(uri, SCHEMA, write_options=WriteOptions(row_group_size=1024))
    t.append(rows(list(range(0, 300))))
    t.append(rows(list(range(1000, 1300))))
    shuffled = list(range(10_000, 16_000))
    random.Random(7).shuffle(shuffled)
    t.append(rows(shuffled))
    t.append(rows(list(range(20_000, 21_000))))
    t.delete("id IN (1001, 1150, 1299) OR (id >= 1200 AND id < 1210)")  # positions
    t.delete("id BETWEEN 11000 AND 13999")  # scattered: recorded as a key range
    t.delete("id BETWEEN 20100 AND 20800")  # spans whole row groups
    t.delete("id = 20000")
    t.append(rows(list(range(30_000, 30_100))))
    return t


def assert_native_equals(spark: SparkSession, t: caslake.Table, **kwargs: object) -> None:
    options = {k: str(v) if k != "columns" else ",".join(v)  # type: ignore[arg-type]
               for k, v in kwargs.items() if v is not None}
    expected_source = source(spark, t.uri, **options)
    native = caslake.spark.read_native(spark, t.uri, **kwargs)  # type: ignore[arg-type]
    assert native.schema == expected_source.schema  # names, types and nullability
    scan = t.scan(columns=kwargs.get("columns"), version=kwargs.get("version"),  # type: ignore[arg-type]
                  as_of=kwargs.get("timestamp"))  # type: ignore[arg-type]
    assertDataFrameEqual(native, expected_source)
    # caslake's own scan, in the Arrow types Spark hands out for the same schema
    spark_arrow = to_arrow_schema(native.schema, timezone="UTC")
    expected = pa.Table.from_batches([conform_for_read(b, spark_arrow)
                                      for b in scan.to_arrow().to_batches()], spark_arrow)
    got = native.toArrow()
    assert got.num_rows == expected.num_rows
    assert sorted_rows(got).equals(sorted_rows(expected.cast(got.schema)))


def test_read_native_equals_source_and_scan(spark: SparkSession, tmp_path: Path) -> None:
    t = build(str(tmp_path / "t"))
    assert tombstone_kinds(t) == {"row_groups", "key_ranges", "positions"}
    assert_native_equals(spark, t)
    # version 5: only the first delete (positions) applied; columns narrowed, reordered
    assert_native_equals(spark, t, version=5, columns=["amount", "id"])
    at = t.history()[1].created_at  # the last delete, before the final append
    assert_native_equals(spark, t, timestamp=at.isoformat(), columns=["user"])


def test_read_native_under_an_odd_directory(spark: SparkSession, tmp_path: Path) -> None:
    # Spark reports file paths URL-encoded ('file:/.../a%20b=1%20%2525%20%5Bx%5D/...');
    # deletions must still be matched to the rows they delete.
    odd = tmp_path / "a b=1 %25 [x]{y} é" / "t=2"
    t = caslake.create_table(str(odd), SCHEMA)
    t.append(rows(list(range(100))))
    t.append(rows(list(range(100, 200))))
    t.delete("id IN (3, 50, 150) OR user = 'u4'")
    native = caslake.spark.read_native(spark, t.uri)
    assert native.count() == 200 - 40 - 3
    assertDataFrameEqual(native, source(spark, t.uri))


def plan_of(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_clean_files_are_read_without_a_join(spark: SparkSession, tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(list(range(100))))
    t.append(rows(list(range(100, 200))))
    plain = plan_of(caslake.spark.read_native(spark, t.uri))
    assert "Join" not in plain and "Union" not in plain
    t.delete("id = 150")
    mixed = caslake.spark.read_native(spark, t.uri)
    plan = plan_of(mixed)
    # One scan of the clean file, unioned with an anti-joined scan of the other.
    assert plan.count("BroadcastHashJoin") == 1 and "LeftAnti" in plan and "Union" in plan
    assert mixed.count() == 199


def test_types_and_nullability_equal_the_source(spark: SparkSession, tmp_path: Path) -> None:
    schema = pa.schema([
        pa.field("k", pa.int32(), nullable=False), ("u8", pa.uint8()), ("u32", pa.uint32()),
        ("big", pa.uint64()), ("s", pa.large_string()), ("b", pa.binary()),
        ("flag", pa.bool_()), ("f", pa.float32()), ("dec", pa.decimal128(12, 3)),
        ("day", pa.date32()), pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        ("wall", pa.timestamp("ms")), ("tsn", pa.timestamp("ns"))])
    t0 = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    n = 6
    data = pa.table({
        "k": list(range(n)), "u8": [None, *range(1, n)], "u32": [2**32 - 1 - i for i in range(n)],
        "big": [2**64 - 1 - i for i in range(n)], "s": ["é", None, "x", "y", "z", "w"],
        "b": [b"\x00", b"a", None, b"c", b"d", b"e"],
        "flag": [True, False, None, True, True, False],
        "f": [0.5, None, 1.5, 2.5, 3.5, 4.5],
        "dec": [decimal.Decimal(f"{i}.125") for i in range(n)],
        "day": [dt.date(2024, 1, 1 + i) for i in range(n)],
        "ts": [t0 + dt.timedelta(seconds=i) for i in range(n)],
        "wall": [dt.datetime(2024, 1, 1, 0, 0, i) for i in range(n)],
        "tsn": [dt.datetime(2024, 1, 1)] * n}, schema=schema)
    t = caslake.create_table(str(tmp_path / "t"), schema)
    t.append(data)
    t.delete("k = 2")
    columns = [c for c in schema.names if c != "tsn"]
    assert_native_equals(spark, t, columns=columns)
    # Spark's Parquet reader cannot read nanosecond timestamps: a clear error, naming
    # the column, instead of a failure deep in a Spark task.
    with pytest.raises(SchemaMismatch, match="'tsn'"):
        caslake.spark.read_native(spark, t.uri)


def test_empty_tables_and_unreadable_locations(spark: SparkSession, tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    empty = caslake.spark.read_native(spark, t.uri)
    assert empty.schema == source(spark, t.uri).schema and empty.count() == 0
    t.append(rows([1, 2]))
    t.delete("id IN (1, 2)")  # the only file is dropped: no file left to read
    assert caslake.spark.read_native(spark, t.uri).count() == 0
    with pytest.raises(UnknownColumn, match="nope"):
        caslake.spark.read_native(spark, t.uri, columns=["nope"])
    mem = caslake.create_table("memory://native-test", SCHEMA)
    mem.append(rows([1]))
    with pytest.raises(InvalidArgument, match="memory://native-test"):
        caslake.spark.read_native(spark, "memory://native-test")
