"""Type mapping between caslake (Arrow) schemas and Spark schemas, at any depth.

Reads: :func:`spark_schema_for` turns a table's Arrow schema into the Spark
schema the data source reports, and :func:`conform_for_read` converts decoded
batches to exactly the Arrow schema Spark expects for that Spark schema
(``pyspark.sql.pandas.types.to_arrow_schema(..., timezone="UTC")``).

Writes: :func:`arrow_schema_for` gives the Arrow schema of a new table created
from a DataFrame, :func:`check_writable` says whether a DataFrame column may go
into a table column, and :func:`conform_for_write` converts Spark's batches to
the table's column types with checked casts (a value that does not fit is a
:class:`~caslake.errors.SchemaMismatch` naming the field's full path).

caslake type -> Spark type (read)            Spark type -> caslake type (new table)
------------------------------------------   ----------------------------------------
bool, int8/16/32/64 -> Boolean, Byte..Long   Boolean, Byte..Long -> bool, int8..int64
uint8 -> Short, uint16 -> Integer,           Float, Double -> float32, float64
uint32 -> Long, uint64 -> Decimal(20, 0)     String -> string, Binary -> binary
float16, float32 -> Float; float64 -> Double Date -> date32
string -> String; binary -> Binary           Timestamp -> timestamp[us, tz=UTC]
fixed_size_binary[n] -> Binary               TimestampNTZ -> timestamp[us]
uuid -> String (``8-4-4-4-12`` lowercase     Time(p) -> time64[us]
  hex, as Spark's ``uuid()`` and Iceberg's   Decimal(p, s) -> decimal128(p, s)
  Spark integration show it)                 Array(t, containsNull) -> list (element
date32, date64 -> Date                         nullable = containsNull)
timestamp (tz) -> Timestamp; (naive) ->      Struct -> struct
  TimestampNTZ (ns truncated to us)          Map(k, v, valueContainsNull) -> map
time32[s] -> Time(0), time32[ms] -> Time(3),   (value nullable = valueContainsNull)
  time64[us|ns] -> Time(6) (ns truncated)
decimal32/64/128/256(p <= 38, s >= 0) ->     Variant, intervals, Null, Char/Varchar,
  Decimal(p, s); a negative scale s ->         user-defined, geo types: SchemaMismatch
  Decimal(p - s, 0) (the same values)          naming the field's path
decimal256 with p > 38 (or p - s > 38):
  UnsupportedType naming the path (Spark's
  decimals hold at most 38 digits; leave the
  column out with the read option columns)
list -> Array(containsNull = element
  nullable); struct -> Struct;
map -> Map(valueContainsNull = value nullable)

Writing into an existing table column, a DataFrame value must be of the same
kind; narrowing conversions are checked value by value (int64 into int8, Spark's
microseconds into a ``timestamp[ms]`` or ``time32[s]`` column, Float into
``float16``, Decimal into a narrower decimal or, with scale 0, an integer): a
value that does not fit is a SchemaMismatch.  Spark strings go into ``uuid``
columns (canonical or 32-digit hex text, any case; anything else is refused),
Binary into ``fixed_size_binary[n]`` (every value exactly n bytes), Date into
``date64``.  So a table read through Spark can always be written back.
Structs match by field name (the DataFrame's struct must have exactly the
table struct's fields, in any order), lists and maps element by element.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    TimeType,
)

from caslake.errors import SchemaMismatch, UnsupportedType
from caslake.spark.arrays import ELEMENT, KEY, VALUE, child_path, to_spark, to_table

_pa: Any = pa  # pyarrow-stubs type map_ narrower than pyarrow accepts

_INT_TO_SPARK: dict[pa.DataType, DataType] = {
    pa.int8(): ByteType(), pa.int16(): ShortType(), pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    # Spark has no unsigned types: widen to the next signed type that holds every value.
    pa.uint8(): ShortType(), pa.uint16(): IntegerType(), pa.uint32(): LongType(),
    pa.uint64(): DecimalType(20, 0),
}
_SIMPLE_TO_SPARK: dict[pa.DataType, DataType] = {
    pa.bool_(): BooleanType(), pa.float16(): FloatType(), pa.float32(): FloatType(),
    pa.float64(): DoubleType(), pa.string(): StringType(), pa.large_string(): StringType(),
    pa.binary(): BinaryType(), pa.large_binary(): BinaryType(), pa.date32(): DateType(),
    pa.date64(): DateType(), pa.uuid(): StringType(),
}
_TIME_PRECISION = {"s": 0, "ms": 3, "us": 6, "ns": 6}
MAX_SPARK_DIGITS = 38


def spark_type_for(t: pa.DataType, path: str = "") -> DataType:
    """The Spark type that represents every value of the caslake type ``t`` (any
    nesting).  UnsupportedType naming ``path`` (the field's dotted path) if none does."""
    if pa.types.is_struct(t):
        return StructType([StructField(f.name, spark_type_for(f.type, child_path(path, f.name)),
                                       f.nullable) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = t.value_field
        return ArrayType(spark_type_for(item.type, child_path(path, ELEMENT)), item.nullable)
    if pa.types.is_map(t):
        return MapType(spark_type_for(t.key_type, child_path(path, KEY)),
                       spark_type_for(t.item_type, child_path(path, VALUE)),
                       t.item_field.nullable)
    if t in _INT_TO_SPARK:
        return _INT_TO_SPARK[t]
    if t in _SIMPLE_TO_SPARK:
        return _SIMPLE_TO_SPARK[t]
    if pa.types.is_fixed_size_binary(t):
        return BinaryType()
    if pa.types.is_timestamp(t):
        # Instants (with a time zone) are Spark TIMESTAMPs; wall-clock times are TIMESTAMP_NTZ.
        return TimestampType() if t.tz else TimestampNTZType()
    if pa.types.is_time(t):
        return TimeType(_TIME_PRECISION[t.unit])
    if pa.types.is_decimal(t):
        return _spark_decimal(t, path)
    raise UnsupportedType(f"column {path!r} has type {t}, which Spark cannot represent",
                          path=path, type=str(t))


def _spark_decimal(t: Any, path: str) -> DecimalType:
    """Decimal(p, s); a negative scale as Decimal(p - s, 0), which holds the same values."""
    precision, scale = (t.precision, t.scale) if t.scale >= 0 else (t.precision - t.scale, 0)
    if precision > MAX_SPARK_DIGITS:
        raise UnsupportedType(
            f"column {path!r} has type {t}: Spark decimals hold at most {MAX_SPARK_DIGITS} "
            "digits; leave it out of the Spark read (read option columns) or read it with "
            "caslake's own scan", path=path, type=str(t))
    return DecimalType(precision, scale)


def spark_schema_for(schema: pa.Schema, columns: list[str] | None = None) -> StructType:
    """The Spark schema of ``schema`` (optionally narrowed to ``columns``, in that order)."""
    names = columns if columns is not None else schema.names
    fields = []
    for n in names:
        f = schema.field(n)
        fields.append(StructField(f.name, spark_type_for(f.type, f.name), f.nullable))
    return StructType(fields)


_SPARK_TO_ARROW: list[tuple[type[DataType], pa.DataType]] = [
    (BooleanType, pa.bool_()), (ByteType, pa.int8()), (ShortType, pa.int16()),
    (IntegerType, pa.int32()), (LongType, pa.int64()), (FloatType, pa.float32()),
    (DoubleType, pa.float64()), (StringType, pa.string()), (BinaryType, pa.binary()),
    (DateType, pa.date32()), (TimestampNTZType, pa.timestamp("us")),
    (TimestampType, pa.timestamp("us", tz="UTC")), (TimeType, pa.time64("us")),
]


def arrow_type_for(dt: DataType, path: str) -> pa.DataType:
    """The caslake type for a Spark type (tables created from a DataFrame), any
    nesting.  SchemaMismatch naming ``path`` for a type caslake cannot store."""
    if isinstance(dt, StructType):
        return pa.struct([pa.field(f.name, arrow_type_for(f.dataType, child_path(path, f.name)),
                                   f.nullable) for f in dt.fields])
    if isinstance(dt, ArrayType):
        element = arrow_type_for(dt.elementType, child_path(path, ELEMENT))
        return pa.list_(pa.field(ELEMENT, element, dt.containsNull))
    if isinstance(dt, MapType):
        key = arrow_type_for(dt.keyType, child_path(path, KEY))
        value = arrow_type_for(dt.valueType, child_path(path, VALUE))
        mapped: pa.DataType = _pa.map_(pa.field(KEY, key, False),
                                       pa.field(VALUE, value, dt.valueContainsNull))
        return mapped
    for cls, at in _SPARK_TO_ARROW:
        if type(dt) is cls:
            return at
    if isinstance(dt, DecimalType):
        return pa.decimal128(dt.precision, dt.scale)
    raise SchemaMismatch(f"column {path!r} has Spark type {dt.simpleString()}, which caslake "
                         "tables cannot store", column=path, actual=dt.simpleString())


def arrow_schema_for(schema: StructType) -> pa.Schema:
    """The Arrow schema of a new table holding DataFrames of Spark schema ``schema``."""
    return pa.schema([pa.field(f.name, arrow_type_for(f.dataType, f.name), f.nullable)
                      for f in schema.fields])


# --- which DataFrame types may go into which table types -----------------------------


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or t == pa.uuid():
        return "string"
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t)):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp_tz" if t.tz else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_time(t):
        return "time"
    return str(t)


def _leaf_writable(src: Any, dst: Any) -> bool:
    if src == dst:
        return True
    if pa.types.is_decimal(src) and pa.types.is_integer(dst):
        return bool(src.scale == 0)  # e.g. a uint64 column read as Decimal(20, 0)
    if _kind(src) != _kind(dst):
        return False
    if pa.types.is_floating(src):
        return bool(src.bit_width <= dst.bit_width or dst == pa.float16())
    return True


def write_problem(src: pa.DataType, dst: pa.DataType, path: str) -> tuple[str, str] | None:
    """Why Spark values of Arrow type ``src`` cannot go into a caslake field of type
    ``dst`` at ``path``: ``(the path of the offending node, the reason)``, or None."""
    if pa.types.is_struct(dst) or pa.types.is_struct(src):
        if not (pa.types.is_struct(dst) and pa.types.is_struct(src)):
            return path, f"it is {src} in the DataFrame but {dst} in the table"
        have, want = [f.name for f in src], [f.name for f in dst]
        if sorted(have) != sorted(want):
            return path, f"its fields are {have} in the DataFrame but {want} in the table"
        for f in dst:
            problem = write_problem(src.field(f.name).type, f.type, child_path(path, f.name))
            if problem is not None:
                return problem
        return None
    if pa.types.is_list(dst) or pa.types.is_map(dst) or pa.types.is_list(src) \
            or pa.types.is_map(src):
        if pa.types.is_list(dst) and pa.types.is_list(src):
            return write_problem(src.value_type, dst.value_type, child_path(path, ELEMENT))
        if pa.types.is_map(dst) and pa.types.is_map(src):
            return (write_problem(src.key_type, dst.key_type, child_path(path, KEY))
                    or write_problem(src.item_type, dst.item_type, child_path(path, VALUE)))
        return path, f"it is {src} in the DataFrame but {dst} in the table"
    if not _leaf_writable(src, dst):
        return path, f"it is {src} in the DataFrame but {dst} in the table"
    return None


def check_writable(src: pa.DataType, dst: pa.DataType, path: str, spark_type: str) -> None:
    """SchemaMismatch naming the offending field's path unless Spark values of Arrow
    type ``src`` (Spark type ``spark_type``) may go into a table field of type ``dst``."""
    problem = write_problem(src, dst, path)
    if problem is not None:
        where, why = problem
        raise SchemaMismatch(f"column {where!r} cannot take the DataFrame's values: {why} "
                             f"(DataFrame column {path!r} is {spark_type})", column=where,
                             expected=str(dst), actual=str(src))


def writable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Can Spark values of Arrow type ``src`` go into a caslake field of type ``dst``?"""
    return write_problem(src, dst, "") is None


# --- batches ---------------------------------------------------------------------------


def conform_for_write(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Convert a Spark batch's columns to the table's types (checked), by name."""
    arrays: list[Any] = []
    fields = []
    for name in batch.schema.names:
        if name not in target.names:
            raise SchemaMismatch(f"column {name!r} is not in the table schema "
                                 f"(columns: {', '.join(target.names)})", column=name)
        tf = target.field(name)
        arr = batch.column(name)
        if arr.type != tf.type:
            check_writable(arr.type, tf.type, name, str(arr.type))
        arrays.append(to_table(arr, tf.type, name))
        fields.append(pa.field(name, tf.type, nullable=True))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def conform_for_read(batch: pa.RecordBatch, expected: pa.Schema) -> pa.RecordBatch:
    """Convert a decoded batch to exactly the Arrow schema Spark expects (types,
    nullability, at every level; struct fields by name, so ``expected`` may leave
    some out).  Timestamps and times finer than microseconds are truncated to
    microseconds, Spark's precision."""
    arrays = [to_spark(batch.column(f.name), f.type, f.name) for f in expected]
    return pa.RecordBatch.from_arrays(arrays, schema=expected)
