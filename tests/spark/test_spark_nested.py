"""Nested columns (arrays of structs, maps, structs, to depth 3) and the newer
primitive types through the ``caslake`` Spark data source (issue 29).

Every step is compared with what Spark itself computes on the source DataFrame
(or pyarrow on the original Arrow data), never with caslake's own output only.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimeType,
)

import caslake
import caslake.spark
from caslake.errors import SchemaMismatch, UnsupportedType
from tests.spark.helpers import read

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

DEV = StructType([StructField("os", StringType()), StructField("ver", IntegerType())])
ITEM = StructType([StructField("sku", StringType(), False),
                   StructField("price", DecimalType(10, 2)),
                   StructField("qty", IntegerType())])
SCHEMA = StructType([
    StructField("id", LongType(), False),
    StructField("dev", DEV),
    StructField("items", ArrayType(ITEM)),
    StructField("attrs", MapType(StringType(), StringType())),
    StructField("tags", ArrayType(StringType(), containsNull=False)),
    StructField("scores", MapType(StringType(), ArrayType(DoubleType()), valueContainsNull=False)),
])
OS = ["ios", "android", "linux"]


def row(i: int) -> tuple[Any, ...]:
    """Row ``i``: NULLs and empties at every level, varying with ``i``."""
    dev = None if i % 7 == 0 else (None if i % 5 == 0 else OS[i % 3], i % 4 or None)
    items: list[Any] | None = None if i % 6 == 0 else [] if i % 6 == 1 else [
        (f"s{i}-{k}", decimal.Decimal(i * 100 + k) / 100 if k != 1 else None,
         k if k % 2 == 0 else None) for k in range(i % 4 + 1)]
    if items is not None and i % 8 == 3:
        items.append(None)
    attrs = None if i % 9 == 0 else {f"k{k}": None if (i + k) % 4 == 0 else f"v{i}"
                                     for k in range(i % 3)}
    tags = None if i % 10 == 0 else [f"t{k}" for k in range(i % 3)]
    scores = None if i % 11 == 0 else ({"a": [float(i), None], "b": []} if i % 2 else {})
    return (i, dev, items, attrs, tags, scores)


def frame(spark: SparkSession, lo: int, hi: int) -> DataFrame:
    return spark.createDataFrame([row(i) for i in range(lo, hi)], SCHEMA)


def rows(df: DataFrame) -> list[dict[str, Any]]:
    """Every row as plain Python values, by id (Spark cannot exceptAll map columns)."""
    return [r.asDict(recursive=True) for r in df.orderBy("id").collect()]


def assert_same(got: DataFrame, want: DataFrame) -> None:
    assert got.schema == want.schema
    got_rows, want_rows = rows(got), rows(want)
    assert len(got_rows) == len(want_rows)
    assert got_rows == want_rows


def file_rows(uri: str) -> list[dict[str, Any]]:
    """The live rows as pyarrow reads the table's data files (no deletes yet)."""
    table = caslake.open_table(uri)
    files = [pq.read_table(Path(uri) / f.path) for f in table.io.live_files(table.snapshot)]
    return pa.concat_tables(files).sort_by("id").to_pylist(maps_as_pydicts="strict")


def test_nested_write_read_filter_delete_stream(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    first = frame(spark, 0, 60)
    first.write.format("caslake").mode("append").save(uri)  # creates the table

    # The table's schema is Spark's own Arrow view of the DataFrame schema, and
    # the data files (read by pyarrow) hold exactly the DataFrame's rows.
    table = caslake.open_table(uri)
    assert table.schema.equals(to_arrow_schema(SCHEMA, timezone="UTC"))
    assert file_rows(uri) == rows(first)
    assert read(spark, uri).schema == SCHEMA

    # An append whose struct lists its fields in another order (matched by name).
    second = frame(spark, 60, 90)
    swapped = second.withColumn("dev", F.when(F.col("dev").isNull(), None)
                                .otherwise(F.struct("dev.ver", "dev.os")))
    caslake.spark.save(swapped, uri, mode="append")
    expected = first.union(second)
    df = read(spark, uri)
    assert_same(df, expected)

    # Queries on nested fields: Spark's answer on the source DataFrame.
    queries = [
        lambda d: d.filter("dev.os = 'ios'"),
        lambda d: d.filter(F.exists("items", lambda x: x.qty > 1)),
        lambda d: d.filter(F.col("attrs")["k1"].isNotNull()),
        lambda d: d.filter(F.size("scores") > 0).select("id", F.col("scores")["a"][0].alias("a0")),
        lambda d: d.select("id", "dev.os", F.col("items.price").alias("prices")),
        lambda d: d.select("id", F.explode_outer("tags").alias("tag")).filter("tag = 't1'"),
    ]
    for q in queries:
        assert rows(q(df)) == rows(q(expected))
    # The read option ``where`` (a caslake predicate) on a nested field prunes the
    # read itself; it must give what Spark's filter gives.
    assert_same(read(spark, uri, where="dev.os = 'ios'"), expected.filter("dev.os = 'ios'"))

    # Spark's nested column pruning does not reach a Python data source; the read
    # option columns prunes to nested fields, keeping the struct shape, as Spark's
    # own projection of them does.
    paths = ["id", "dev.os", "items.element.price"]
    pruned = expected.select(
        "id", F.when(F.col("dev").isNull(), None)
        .otherwise(F.struct(F.col("dev.os").alias("os"))).alias("dev"),
        F.transform("items", lambda x: F.when(x.isNull(), None)
                    .otherwise(F.struct(x["price"].alias("price")))).alias("items"))
    assert_same(read(spark, uri, columns=",".join(paths)), pruned)
    assert_same(caslake.spark.read_native(spark, uri, columns=paths), pruned)

    # Delete by a nested predicate: SQL semantics (NULL dev or os is not deleted).
    result = caslake.spark.delete(spark, uri, "dev.os = 'ios'")
    assert result.version == 3
    kept = expected.filter("NOT coalesce(dev.os = 'ios', false)")
    assert_same(read(spark, uri), kept)
    # Spark's own Parquet reader (the deleted rows anti-joined away) agrees, with
    # the same types and nullability at every level.
    assert_same(caslake.spark.read_native(spark, uri), kept)

    # Streaming append of nested rows: the file source's schema is nullable at
    # every level, the table's NOT NULL nested fields are checked row by row.
    src = tmp_path / "src"
    third = frame(spark, 90, 120)
    third.write.parquet(str(src))
    stream = spark.readStream.schema(SCHEMA).parquet(str(src))
    query = (stream.writeStream.format("caslake")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start(uri))
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    assert query.exception() is None
    assert_same(read(spark, uri), kept.union(third))


def test_nested_upsert_and_what_the_table_refuses(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    frame(spark, 0, 5).write.format("caslake").mode("append").save(uri)
    # Upsert rows with nested columns: ids 3..7 take the values of rows 53..57.
    changed = spark.createDataFrame([(i, *row(i + 50)[1:]) for i in range(3, 8)], SCHEMA)
    caslake.spark.upsert(spark, uri, changed, key="id")
    assert_same(read(spark, uri), frame(spark, 0, 3).union(changed))
    before = caslake.open_table(uri).version

    # A NULL in a NOT NULL nested field where its parents are valid, named by path.
    loose = StructType([f if f.name != "tags" else StructField("tags", ArrayType(StringType()))
                        for f in SCHEMA.fields])
    bad = spark.createDataFrame([(99, None, None, None, ["x", None], None)], loose)
    with pytest.raises(SchemaMismatch) as err:
        caslake.spark.save(bad, uri, mode="append")
    assert err.value.column == "tags.element"
    loose_item = StructType([StructField(f.name, f.dataType) for f in ITEM.fields])
    loose = StructType([f if f.name != "items" else StructField("items", ArrayType(loose_item))
                        for f in SCHEMA.fields])
    bad = spark.createDataFrame([(99, None, [None, ("a", None, 1), (None, None, 2)], None,
                                  None, None)], loose)
    with pytest.raises(SchemaMismatch) as err:
        caslake.spark.save(bad, uri, mode="append")
    assert err.value.column == "items.element.sku"
    # A struct field the table does not have, named by its full path.
    extra = StructType([f if f.name != "items" else StructField(
        "items", ArrayType(StructType([*ITEM.fields, StructField("note", StringType())])))
        for f in SCHEMA.fields])
    with pytest.raises(SchemaMismatch) as err:
        caslake.spark.save(spark.createDataFrame([], extra), uri, mode="append")
    assert err.value.column == "items.element"
    assert caslake.open_table(uri).version == before


UUIDS = [uuid.UUID(int=(i + 1) * 0x0123456789ABCDEF0123456789ABCDEF % 2**128) for i in range(4)]
T0 = dt.time(12, 34, 56, 789012)
PART = pa.struct([("u", pa.uuid()), ("h", pa.float16()), ("fb", pa.binary(4)),
                  ("d64", pa.date64()), ("d32", pa.decimal32(7, 2))])
PARTS = pa.list_(pa.field("element", PART))
PART_STORED = pa.struct([("u", pa.binary(16)), *list(PART)[1:]])


def typed_table() -> pa.Table:
    """The newer primitive types, at the top level and inside a list of structs."""
    schema = pa.schema([pa.field("id", pa.int64(), False), ("u", pa.uuid()),
                        ("tm", pa.time32("ms")), ("tn", pa.time64("ns")),
                        ("n", pa.uint64()), ("parts", PARTS)])
    uuids = pa.ExtensionArray.from_storage(
        pa.uuid(), pa.array([u.bytes for u in UUIDS[:3]] + [None], pa.binary(16)))
    parts = [[{"u": UUIDS[i].bytes, "h": 0.5 * i, "fb": b"ab%02d" % i,
               "d64": dt.date(2024, 1, 1 + i), "d32": decimal.Decimal(f"{i}.25")}, None]
             if i != 2 else None for i in range(4)]
    return pa.table({
        "id": list(range(4)), "u": uuids,
        "tm": [dt.time(1, 2, 3, 4000), None, dt.time(23, 59, 59, 999000), dt.time(0)],
        "tn": pa.array([(T0.hour * 3600 + T0.minute * 60 + T0.second) * 10**9
                        + T0.microsecond * 1000 + 7, None, 0, 1], pa.time64("ns")),
        "n": [2**64 - 1, 0, None, 7],
        "parts": with_uuids(pa.array(parts, pa.list_(PART_STORED)))}, schema=schema)


def with_uuids(parts: pa.ListArray) -> pa.ListArray:
    """``parts`` (its ``u`` as 16 bytes) with ``u`` as uuid (pyarrow cannot build
    uuid values from Python objects)."""
    structs = parts.values
    children = [pa.ExtensionArray.from_storage(pa.uuid(), structs.field(i)) if f.name == "u"
                else structs.field(i) for i, f in enumerate(PART_STORED)]
    elements = pa.StructArray.from_arrays(children, fields=list(PART), mask=structs.is_null())
    return pa.ListArray.from_arrays(parts.offsets, elements, type=PARTS, mask=parts.is_null())


def test_new_primitive_types_through_spark(spark: SparkSession, tmp_path: Path) -> None:
    uri, copy = str(tmp_path / "t"), str(tmp_path / "copy")
    data = typed_table()
    wide = data.append_column("big", pa.array([{"v": 10**39 + i} for i in range(4)],
                                               pa.struct([("v", pa.decimal256(40, 0))])))
    caslake.create_table(uri, wide.schema).append(wide)
    # decimal256(40, 0) has no Spark type: the load names the nested field's path
    # (raised inside Spark, which wraps it); read_native raises it as itself.
    with pytest.raises(AnalysisException, match=r"UnsupportedType: column 'big.v' has type "
                       r"decimal256\(40, 0\): Spark decimals hold at most 38 digits"):
        read(spark, uri)
    with pytest.raises(UnsupportedType) as err:
        caslake.spark.read_native(spark, uri)
    assert err.value.path == "big.v"

    # Every other column reads as the nearest exact Spark type, compared with
    # Python's own rendering of the values.
    df = read(spark, uri, columns=",".join(data.column_names))
    assert df.schema == StructType([
        StructField("id", LongType(), False), StructField("u", StringType()),
        StructField("tm", TimeType(3)), StructField("tn", TimeType(6)),
        StructField("n", DecimalType(20, 0)),
        StructField("parts", ArrayType(StructType([
            StructField("u", StringType()), StructField("h", FloatType()),
            StructField("fb", BinaryType()), StructField("d64", DateType()),
            StructField("d32", DecimalType(7, 2))])))])
    got = rows(df)
    assert [r["u"] for r in got] == [str(u) for u in UUIDS[:3]] + [None]
    assert [r["tm"] for r in got] == data["tm"].to_pylist()
    assert got[0]["tn"] == T0  # nanoseconds truncated to Spark's microseconds
    assert [r["n"] for r in got] == [None if v is None else decimal.Decimal(v)
                                     for v in data["n"].to_pylist()]
    want_parts = [None if p is None else [
        None if e is None else {**e, "u": str(e["u"]), "fb": bytearray(e["fb"])}
        for e in p] for p in data["parts"].to_pylist()]
    assert [r["parts"] for r in got] == want_parts
    # Spark's Parquet reader cannot read uuid (nor float16, time): read_native says
    # which nested field, up front.
    with pytest.raises(SchemaMismatch) as err:
        caslake.spark.read_native(spark, uri, columns=["id", "parts"])
    assert err.value.column == "parts.element.u"

    # Written back through Spark into a table of the original types: the values
    # come back as they were (but the nanoseconds Spark cannot hold).
    caslake.create_table(copy, data.schema)
    caslake.spark.save(df, copy, mode="append")
    tn = data["tn"].cast(pa.time64("us"), safe=False).cast(pa.time64("ns"))
    want = data.set_column(data.schema.get_field_index("tn"), "tn", tn)
    assert caslake.open_table(copy).scan().to_arrow().sort_by("id").equals(want)
    bad = spark.createDataFrame([(9, "not-a-uuid", None, None, None, None)], df.schema)
    with pytest.raises(SchemaMismatch) as err:
        caslake.spark.save(bad, copy, mode="append")
    assert err.value.column == "u" and "not-a-uuid" in str(err.value)


def test_type_mapping_matches_pyspark() -> None:
    """Where PySpark itself maps an Arrow type, caslake maps it the same way, and a
    Spark schema survives the trip to a table schema and back."""
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type

    from caslake.format.schema import TableSchema
    from caslake.spark.types import (
        arrow_schema_for,
        arrow_type_for,
        conform_for_write,
        spark_schema_for,
        spark_type_for,
    )

    for t in [pa.list_(pa.struct([("a", pa.int32()), pa.field("b", pa.string(), False)])),
              pa.map_(pa.string(), pa.list_(pa.float64())), pa.decimal64(10, 2),
              pa.decimal256(38, 5), pa.binary(16), pa.time64("us"), pa.date32(),
              pa.struct([("m", pa.map_(pa.int64(), pa.struct([("x", pa.bool_())])))])]:
        assert spark_type_for(t, "c") == from_arrow_type(t), t
    stored = TableSchema.from_arrow(arrow_schema_for(SCHEMA)).to_arrow()
    assert spark_schema_for(stored) == SCHEMA
    for spark_type, arrow_type in [(FloatType(), pa.float16()), (DateType(), pa.date64()),
                                   (BinaryType(), pa.binary(3)), (StringType(), pa.uuid()),
                                   (TimeType(0), pa.time32("s")),
                                   (DecimalType(7, 0), pa.decimal128(5, -2))]:
        assert spark_type_for(arrow_type, "c") == spark_type
    assert arrow_type_for(TimeType(6), "t") == pa.time64("us")

    # What caslake cannot store or convert is refused naming the nested field's path.
    odd = ArrayType(StructType([StructField("d", DayTimeIntervalType())]))
    with pytest.raises(SchemaMismatch) as err:
        arrow_type_for(odd, "x")
    assert err.value.column == "x.element.d"
    table_type = pa.struct([("fb", pa.binary(4)), ("h", pa.float16())])
    spark_type = to_arrow_type(StructType([StructField("fb", BinaryType()),
                                           StructField("h", FloatType())]))
    batch = pa.record_batch({"p": pa.array([{"fb": b"abcd", "h": 0.5}, {"fb": b"abc", "h": 1.0}],
                                           spark_type)})
    with pytest.raises(SchemaMismatch) as err:
        conform_for_write(batch, pa.schema([("p", table_type)]))
    assert err.value.column == "p.fb"
    batch = pa.record_batch({"p": pa.array([{"fb": b"abcd", "h": 0.1}], spark_type)})
    with pytest.raises(SchemaMismatch, match=r"value 0\.1\d* \(not exact as float16\)") as err:
        conform_for_write(batch, pa.schema([("p", table_type)]))
    assert err.value.column == "p.h"


def test_nested_schema_evolution_through_spark(spark: SparkSession, tmp_path: Path) -> None:
    """After renaming, adding, dropping and widening nested fields, both Spark read
    paths show the table's schema over the old files (matched by field id at every
    level), and Spark appends in the new shape."""
    uri = str(tmp_path / "t")
    src = frame(spark, 0, 40)
    src.write.format("caslake").mode("append").save(uri)
    caslake.spark.delete(spark, uri, "id = 7")  # read_native's anti-join path too
    (caslake.open_table(uri).update_schema().rename_column("dev.os", "platform")
     .add_column("dev.build", "int64").drop_column("items.element.qty")
     .widen_column("items.element.price", "decimal128(12, 2)").commit())
    evolved = StructType([
        SCHEMA["id"],
        StructField("dev", StructType([StructField("platform", StringType()), DEV["ver"],
                                       StructField("build", LongType())])),
        StructField("items", ArrayType(StructType([ITEM["sku"],
                                                   StructField("price", DecimalType(12, 2))]))),
        SCHEMA["attrs"], SCHEMA["tags"], SCHEMA["scores"]])
    expected = src.filter("id != 7").select(
        "id", F.when(F.col("dev").isNull(), None).otherwise(F.struct(
            F.col("dev.os").alias("platform"), F.col("dev.ver").alias("ver"),
            F.lit(None).cast(LongType()).alias("build"))).alias("dev"),
        F.transform("items", lambda x: F.when(x.isNull(), None).otherwise(
            F.struct(x["sku"].alias("sku"), x["price"].cast(DecimalType(12, 2)).alias("price")))
        ).alias("items"), "attrs", "tags", "scores")
    got = read(spark, uri)
    assert got.schema == evolved
    assert rows(got) == rows(expected)
    assert_same(caslake.spark.read_native(spark, uri), got)

    more = spark.createDataFrame([{**r, "id": r["id"] + 1000} for r in rows(got)[:5]], evolved)
    more.write.format("caslake").mode("append").save(uri)
    assert_same(read(spark, uri).filter("id >= 1000"), more)
    assert_same(read(spark, uri, where="dev.platform = 'ios'"),
                got.union(more).filter("dev.platform = 'ios'"))


def test_spark_reads_a_purged_nested_table(spark: SparkSession, tmp_path: Path) -> None:
    """Purge splices row groups out of files holding nested columns; Spark (the
    data source and its own Parquet reader), pyarrow and DuckDB then read the
    spliced files as the source DataFrame minus the erased rows."""
    import duckdb

    uri = str(tmp_path / "t")
    # Several row groups per file, so the splice keeps some groups and rewrites one.
    arrow_schema = to_arrow_schema(SCHEMA, timezone="UTC")
    table = caslake.create_table(uri, arrow_schema,
                                 write_options=caslake.WriteOptions(row_group_size=600))
    source = frame(spark, 0, 96)
    names = arrow_schema.names
    table.append(pa.Table.from_pylist([dict(zip(names, row(i), strict=True)) for i in range(96)],
                                      schema=arrow_schema))
    assert pq.ParquetFile(str(Path(uri) / table.io.live_files(table.snapshot)[0].path)
                          ).metadata.num_row_groups > 2
    report = table.purge("dev.os = 'linux'")
    assert report.rows_erased == source.filter("dev.os = 'linux'").count() > 0
    kept = source.filter("NOT coalesce(dev.os = 'linux', false)")
    assert_same(read(spark, uri), kept)
    assert_same(caslake.spark.read_native(spark, uri), kept)
    # Every live file as other engines read it: no erased row, nothing else lost.
    assert file_rows(uri) == rows(kept)
    files = [str(Path(uri) / f.path) for f in caslake.open_table(uri).io.live_files(
        caslake.open_table(uri).snapshot)]
    got = duckdb.sql(f"select id, dev.os as os from read_parquet({files!r}) order by id"
                     ).fetchall()
    assert got == [(r["id"], r["dev"]["os"] if r["dev"] else None) for r in rows(kept)]
