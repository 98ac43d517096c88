"""Type mapping between caslake (Arrow) schemas and Spark schemas.

Reads: :func:`spark_schema_for` turns a table's Arrow schema into the Spark
schema the data source reports, and :func:`conform_for_read` casts decoded
batches to exactly the Arrow schema Spark expects for that Spark schema
(``pyspark.sql.pandas.types.to_arrow_schema(..., timezone="UTC")``).

Writes: :func:`arrow_schema_for` gives the Arrow schema of a new table created
from a DataFrame, and :func:`conform_for_write` casts Spark's batches to the
table's column types with checked (overflow-raising) casts.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
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
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from caslake.errors import InvalidArgument, SchemaMismatch

_INT_TO_SPARK: dict[pa.DataType, DataType] = {
    pa.int8(): ByteType(), pa.int16(): ShortType(), pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    # Spark has no unsigned types: widen to the next signed type that holds every value.
    pa.uint8(): ShortType(), pa.uint16(): IntegerType(), pa.uint32(): LongType(),
    pa.uint64(): DecimalType(20, 0),
}


def spark_type_for(t: pa.DataType) -> DataType:
    """The Spark type that represents every value of the caslake column type ``t``."""
    if t in _INT_TO_SPARK:
        return _INT_TO_SPARK[t]
    if pa.types.is_boolean(t):
        return BooleanType()
    if t == pa.float32():
        return FloatType()
    if t == pa.float64():
        return DoubleType()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BinaryType()
    if pa.types.is_date32(t):
        return DateType()
    if pa.types.is_timestamp(t):
        # Instants (with a time zone) are Spark TIMESTAMPs; wall-clock times are TIMESTAMP_NTZ.
        return TimestampType() if t.tz else TimestampNTZType()
    if pa.types.is_decimal128(t) and t.precision <= 38:
        return DecimalType(t.precision, t.scale)
    raise InvalidArgument(f"column type {t} has no Spark equivalent")


def spark_schema_for(schema: pa.Schema, columns: list[str] | None = None) -> StructType:
    """The Spark schema of ``schema`` (optionally narrowed to ``columns``, in that order)."""
    names = columns if columns is not None else schema.names
    fields = []
    for n in names:
        f = schema.field(n)
        fields.append(StructField(f.name, spark_type_for(f.type), f.nullable))
    return StructType(fields)


def arrow_type_for(dt: DataType, column: str) -> pa.DataType:
    """The caslake column type for a Spark type (tables created from a DataFrame)."""
    simple: list[tuple[type[DataType], pa.DataType]] = [
        (BooleanType, pa.bool_()), (ByteType, pa.int8()), (ShortType, pa.int16()),
        (IntegerType, pa.int32()), (LongType, pa.int64()), (FloatType, pa.float32()),
        (DoubleType, pa.float64()), (StringType, pa.string()), (BinaryType, pa.binary()),
        (DateType, pa.date32()), (TimestampNTZType, pa.timestamp("us")),
        (TimestampType, pa.timestamp("us", tz="UTC")),
    ]
    for cls, at in simple:
        if type(dt) is cls:
            return at
    if isinstance(dt, DecimalType):
        return pa.decimal128(dt.precision, dt.scale)
    raise SchemaMismatch(f"column {column!r} has Spark type {dt.simpleString()}, which caslake "
                         "tables cannot store (flat primitive types only)", column=column,
                         actual=dt.simpleString())


def arrow_schema_for(schema: StructType) -> pa.Schema:
    """The Arrow schema of a new table holding DataFrames of Spark schema ``schema``."""
    return pa.schema([pa.field(f.name, arrow_type_for(f.dataType, f.name), f.nullable)
                      for f in schema.fields])


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp_tz" if t.tz else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return "decimal"
    return str(t)


def writable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Can Spark values of Arrow type ``src`` go into a caslake column of type ``dst``?

    Same-kind conversions only; narrowing ones (int64 into int8, ...) are
    checked row by row at write time and fail on any value that does not fit."""
    if src == dst:
        return True
    if _kind(src) != _kind(dst):
        return False
    if pa.types.is_floating(src):
        return bool(src.bit_width <= dst.bit_width)
    return True


def conform_for_write(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Cast a Spark batch's columns to the table's types (checked casts), by name."""
    arrays: list[Any] = []
    fields = []
    for name in batch.schema.names:
        if name not in target.names:
            raise SchemaMismatch(f"column {name!r} is not in the table schema "
                                 f"(columns: {', '.join(target.names)})", column=name)
        tf = target.field(name)
        arr = batch.column(name)
        if arr.type != tf.type:
            if not writable(arr.type, tf.type):
                raise SchemaMismatch(f"column {name!r} has type {arr.type} in the DataFrame but "
                                     f"{tf.type} in the table", column=name,
                                     expected=str(tf.type), actual=str(arr.type))
            try:
                arr = arr.cast(tf.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatch(f"column {name!r}: a value does not fit the table type "
                                     f"{tf.type} ({e})", column=name, expected=str(tf.type),
                                     actual=str(arr.type)) from None
        arrays.append(arr)
        fields.append(pa.field(name, tf.type, nullable=True))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def conform_for_read(batch: pa.RecordBatch, expected: pa.Schema) -> pa.RecordBatch:
    """Cast a decoded batch to exactly the Arrow schema Spark expects (types, nullability).

    Timestamps finer than microseconds are truncated to microseconds, Spark's precision."""
    arrays: list[Any] = []
    for f in expected:
        arr = batch.column(f.name)
        if arr.type != f.type:
            lossy = pa.types.is_timestamp(arr.type) and pa.types.is_timestamp(f.type)
            arr = arr.cast(f.type, safe=not lossy)
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=expected)
