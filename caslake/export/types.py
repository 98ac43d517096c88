"""Type mapping from caslake's schema to Iceberg and Delta, and statistics encodings.

Owns: the one-to-one type tables, at every nesting level (anything without an
exact counterpart is refused with :class:`~caslake.errors.ExportUnsupportedType`
naming the field's full dotted path, before anything is written), Iceberg's
single-value binary serialization of lower/upper bounds, and Delta's JSON
statistics values.  Never reads or writes storage.

Nested types are written as each spec writes them, with caslake's field ids
(the ids the Parquet files carry as ``field_id`` at every level): Iceberg
``struct`` (fields), ``list`` (``element-id``, ``element-required``) and
``map`` (``key-id``, ``value-id``, ``value-required``); Delta ``struct``,
``array`` (``elementType``, ``containsNull``) and ``map`` (``keyType``,
``valueType``, ``valueContainsNull``), every struct field carrying its column
mapping (``delta.columnMapping.id`` and ``physicalName``).  Delta has no id for
a list element or a map key or value (only IcebergCompatV2 tables carry
``parquet.field.nested.ids``); its readers match those by position.

Exactness rules (docs/interop.md, "Type mapping"):

* unsigned integers have no signed counterpart of the same width: refused;
* timestamps must be microseconds (Iceberg v2 and Delta store micros; a
  ``s``/``ms``/``ns`` column would be read with the wrong unit or refused);
* ``int8``/``int16`` become Iceberg ``int`` (Iceberg has no narrower integer;
  the Parquet INT(8)/INT(16) annotation is read as ``int``) and Delta
  ``byte``/``short``;
* decimals of any width (``decimal32``...``decimal256``) with ``0 <= scale``
  and ``precision <= 38`` are ``decimal(p, s)``; a wider precision is refused;
* ``date64`` is a date (its files store Parquet DATE, whole days);
* ``time64[us]`` is Iceberg ``time``; ``time32[s]``/``time32[ms]`` and
  ``time64[ns]`` are refused: Iceberg's time is microseconds stored as Parquet
  TIME(MICROS), and these files store TIME(MILLIS) or TIME(NANOS) (pyiceberg
  refuses a ``time32`` file); Delta has no time type: refused;
* ``uuid`` is Iceberg ``uuid``, ``fixed_size_binary[n]`` Iceberg ``fixed[n]``;
  Delta has neither: refused (a Delta reader would meet a fixed-length
  column where its schema says variable-length binary);
* ``float16`` has no counterpart in either format (its files store Parquet
  FLOAT16): refused.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa

from caslake.errors import ExportUnsupportedType
from caslake.format.schema import LIST, MAP, STRUCT, Field, TableSchema
from caslake.format.stats import value_from_json

ICEBERG = "Iceberg"
DELTA = "Delta"

_ICEBERG_SIMPLE = {
    "bool": "boolean", "int8": "int", "int16": "int", "int32": "int", "int64": "long",
    "float32": "float", "float64": "double", "string": "string", "large_string": "string",
    "binary": "binary", "large_binary": "binary", "date32": "date", "date64": "date",
    "uuid": "uuid",
}
_DELTA_SIMPLE = {
    "bool": "boolean", "int8": "byte", "int16": "short", "int32": "integer", "int64": "long",
    "float32": "float", "float64": "double", "string": "string", "large_string": "string",
    "binary": "binary", "large_binary": "binary", "date32": "date", "date64": "date",
}
# caslake types whose statistics (min/max) have a JSON encoding value_from_json decodes
_STAT_TYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "float32", "float64",
                         "string", "large_string", "date32"})


def _refuse(f: Field, path: str, target: str, why: str) -> ExportUnsupportedType:
    return ExportUnsupportedType(
        f"column {path!r} of type {f.type} cannot be exported to {target}: {why}",
        column=path, type=f.type, target=target)


def _mapped(f: Field, path: str, target: str, simple: dict[str, str], *, tz: str,
            ntz: str) -> str:
    if f.type in simple:
        return simple[f.type]
    t = f.arrow_type
    if pa.types.is_unsigned_integer(t):
        raise _refuse(f, path, target, "it has no unsigned integer types")
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            raise _refuse(f, path, target, "timestamps must have microsecond precision")
        return tz if t.tz is not None else ntz
    if pa.types.is_decimal(t):
        if t.scale < 0 or t.precision > 38:
            raise _refuse(f, path, target, "decimals need 0 <= scale and precision <= 38")
        return f"decimal({t.precision}, {t.scale})" if target == ICEBERG else \
            f"decimal({t.precision},{t.scale})"
    if pa.types.is_float16(t):
        raise _refuse(f, path, target, "it has no half-precision float (cast to float32)")
    if target == ICEBERG:
        if pa.types.is_time(t):
            if t.unit != "us":
                raise _refuse(f, path, target, "its time type is microseconds, stored as "
                              "Parquet TIME(MICROS) (cast to time64[us])")
            return "time"
        if pa.types.is_fixed_size_binary(t):
            return f"fixed[{t.byte_width}]"
    elif pa.types.is_time(t):
        raise _refuse(f, path, target, "it has no time-of-day type")
    elif pa.types.is_fixed_size_binary(t) or f.type == "uuid":
        raise _refuse(f, path, target, "it has no fixed-length binary or uuid type "
                      "(cast to binary)")
    raise _refuse(f, path, target, "no equivalent type")


def iceberg_type(f: Field, path: str | None = None) -> Any:
    """``f``'s Iceberg type: a primitive type string, or a struct/list/map object with
    caslake's ids.  ``path`` (default: the name) names the field in errors."""
    path = path or f.name
    if f.type == STRUCT:
        return {"type": "struct", "fields": [iceberg_field(c, f"{path}.{c.name}")
                                             for c in f.children]}
    if f.type == LIST:
        (element,) = f.children
        return {"type": "list", "element-id": element.id,
                "element-required": not element.nullable,
                "element": iceberg_type(element, f"{path}.{element.name}")}
    if f.type == MAP:
        key, value = f.children
        return {"type": "map", "key-id": key.id, "key": iceberg_type(key, f"{path}.{key.name}"),
                "value-id": value.id, "value-required": not value.nullable,
                "value": iceberg_type(value, f"{path}.{value.name}")}
    return _mapped(f, path, ICEBERG, _ICEBERG_SIMPLE, tz="timestamptz", ntz="timestamp")


def iceberg_field(f: Field, path: str) -> dict[str, Any]:
    return {"id": f.id, "name": f.name, "required": not f.nullable,
            "type": iceberg_type(f, path)}


def delta_type(f: Field, path: str | None = None,
               physical: Mapping[int, str] | None = None) -> Any:
    """``f``'s Delta type: a primitive type string, or a struct/array/map object
    (struct fields with column mapping when ``physical`` is given)."""
    path = path or f.name
    if f.type == STRUCT:
        return {"type": "struct", "fields": [delta_field(c, f"{path}.{c.name}", physical)
                                             for c in f.children]}
    if f.type == LIST:
        (element,) = f.children
        return {"type": "array",
                "elementType": delta_type(element, f"{path}.{element.name}", physical),
                "containsNull": element.nullable}
    if f.type == MAP:
        key, value = f.children
        return {"type": "map", "keyType": delta_type(key, f"{path}.{key.name}", physical),
                "valueType": delta_type(value, f"{path}.{value.name}", physical),
                "valueContainsNull": value.nullable}
    return _mapped(f, path, DELTA, _DELTA_SIMPLE, tz="timestamp", ntz="timestamp_ntz")


def delta_field(f: Field, path: str, physical: Mapping[int, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if physical is not None:
        meta = {"delta.columnMapping.id": f.id,
                "delta.columnMapping.physicalName": physical[f.id]}
    return {"name": f.name, "type": delta_type(f, path, physical), "nullable": f.nullable,
            "metadata": meta}


def iceberg_schema(schema: TableSchema) -> dict[str, Any]:
    """The Iceberg schema JSON (field ids are caslake's).  Raises ExportUnsupportedType."""
    return {"type": "struct", "schema-id": schema.schema_id, "identifier-field-ids": [],
            "fields": [iceberg_field(f, f.name) for f in schema.fields]}


def delta_schema(schema: TableSchema, physical: Mapping[int, str] | None = None
                 ) -> dict[str, Any]:
    """The Delta schemaString object.  Raises ExportUnsupportedType.  With
    ``physical`` (field id -> the Parquet name the data files use, for every struct
    field at any depth), each struct field carries column mapping's
    ``delta.columnMapping.id`` (caslake's field id) and
    ``delta.columnMapping.physicalName``."""
    return {"type": "struct",
            "fields": [delta_field(f, f.name, physical) for f in schema.fields]}


def uses_timestamp_ntz(schema: TableSchema) -> bool:
    """Whether any field, at any depth, is a Delta ``timestamp_ntz``."""
    return any(not f.nested and f.type.startswith("timestamp[") and "tz=" not in f.type
               for _, f in schema.walk())


def stat_leaves(schema: TableSchema) -> dict[int, tuple[str, Field, tuple[int, ...]]]:
    """The fields whose file statistics the exports may give, by id, each with its
    path and the ids along it (the column's first): primitive fields at the top level
    or inside structs only (a leaf under a list or map has one value per element,
    so a file's row-level null count or bounds would not mean what Iceberg or Delta
    expect)."""
    out: dict[int, tuple[str, Field, tuple[int, ...]]] = {}

    def visit(f: Field, path: str, ids: tuple[int, ...]) -> None:
        if f.type == STRUCT:
            for c in f.children:
                visit(c, f"{path}.{c.name}", (*ids, c.id))
        elif not f.nested:
            out[f.id] = (path, f, ids)

    for f in schema.fields:
        visit(f, f.name, (f.id,))
    return out


# --- Iceberg bounds -------------------------------------------------------------

_EPOCH_DATE = dt.date(1970, 1, 1)


def _decimal_bytes(value: Decimal, scale: int) -> bytes:
    unscaled = int(value.scaleb(scale))
    width = max(1, (unscaled.bit_length() + 8) // 8)  # + sign bit
    return unscaled.to_bytes(width, "big", signed=True)


def iceberg_bound(value: Any, f: Field) -> bytes | None:
    """A caslake statistics value (JSON form) in Iceberg's single-value binary
    serialization for ``f``'s Iceberg type; None when no bound can be given."""
    if value is None or not (f.type in _STAT_TYPES or f.type.startswith(("timestamp[",
                                                                          "decimal"))):
        return None
    kind = iceberg_type(f)
    if kind == "binary":
        return None
    if kind in ("timestamp", "timestamptz"):
        return struct.pack("<q", int(value))  # caslake stores the micros count itself
    decoded = value_from_json(value, f.arrow_type)
    if kind == "boolean":
        return b"\x01" if decoded else b"\x00"
    if kind == "int":
        return struct.pack("<i", decoded)
    if kind == "long":
        return struct.pack("<q", decoded)
    if kind == "float":
        return struct.pack("<f", decoded)
    if kind == "double":
        return struct.pack("<d", decoded)
    if kind == "date":
        return struct.pack("<i", (decoded - _EPOCH_DATE).days)
    if kind == "string":
        return str(decoded).encode()
    if kind.startswith("decimal"):
        scale: int = getattr(f.arrow_type, "scale")  # noqa: B009 (typed as DataType)
        return _decimal_bytes(decoded, scale)
    return None


# --- Delta statistics -----------------------------------------------------------


def delta_stat(value: Any, f: Field) -> Any:
    """A caslake statistics value as a Delta ``minValues``/``maxValues`` JSON value,
    or None to leave it out.  Only types whose Delta encoding is exact are given:
    integers, floats, strings and dates (Delta truncates timestamp statistics to
    milliseconds, which would make a tight maximum wrong)."""
    if value is None or f.type not in _STAT_TYPES:
        return None
    kind = delta_type(f)
    if kind in ("byte", "short", "integer", "long", "float", "double", "string", "date"):
        return value
    return None


# --- Iceberg partition values ------------------------------------------------------

_AVRO_PRIMITIVE = {"int": "int", "long": "long", "string": "string", "boolean": "boolean",
                   "binary": "bytes", "date": {"type": "int", "logicalType": "date"}}


def iceberg_partition_type(kind: str, source: Field) -> str:
    """The Iceberg result type of partition transform ``kind`` of ``source``: the
    source's type for identity and truncate, ``date`` for day (as pyiceberg and
    Java type it), ``int`` for year, month, hour and bucket."""
    if kind in ("identity", "truncate"):
        t = iceberg_type(source)
        assert isinstance(t, str)  # partition sources are primitive columns
        return t
    return "date" if kind == "day" else "int"


def avro_partition_type(iceberg: str, field_id: int) -> Any:
    """The Avro type Iceberg writes a partition value of type ``iceberg`` as."""
    if iceberg in _AVRO_PRIMITIVE:
        return _AVRO_PRIMITIVE[iceberg]
    if iceberg in ("timestamp", "timestamptz"):
        return {"type": "long", "logicalType": "timestamp-micros",
                "adjust-to-utc": iceberg == "timestamptz"}
    if iceberg.startswith("decimal("):
        p, s = (int(x) for x in iceberg[len("decimal("):-1].split(","))
        return {"type": "fixed", "name": f"fixed_{field_id}", "size": _decimal_width(p),
                "logicalType": "decimal", "precision": p, "scale": s}
    raise AssertionError(f"no partition type {iceberg}")  # refused by iceberg_type


def _decimal_width(precision: int) -> int:
    """Iceberg's fixed width for a decimal: the fewest bytes holding 10^p - 1 signed."""
    return next(n for n in range(1, 17) if 2 ** (8 * n - 1) > 10 ** precision - 1)


def iceberg_partition_value(kind: str, value: Any, source: Field) -> Any:
    """A caslake partition value (manifest JSON form) as the Python value fastavro
    writes for its Iceberg result type: days since the epoch for day and for dates,
    microseconds for timestamps, Decimal for decimals, bytes for binary."""
    if value is None or kind not in ("identity", "truncate"):
        return value
    t = source.arrow_type
    if pa.types.is_date32(t):
        return (dt.date.fromisoformat(value) - _EPOCH_DATE).days
    if pa.types.is_decimal(t):
        return Decimal(value)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return bytes.fromhex(value)
    return value


def iceberg_value_bound(iceberg: str, value: Any) -> bytes:
    """``value`` (as :func:`iceberg_partition_value` gives it) in Iceberg's single-value
    binary serialization for type ``iceberg`` (manifest list partition summaries)."""
    if iceberg in ("int", "date"):
        return struct.pack("<i", value)
    if iceberg in ("long", "timestamp", "timestamptz"):
        return struct.pack("<q", value)
    if iceberg == "boolean":
        return b"\x01" if value else b"\x00"
    if iceberg == "string":
        return str(value).encode()
    if iceberg == "binary":
        return bytes(value)
    scale = int(iceberg[len("decimal("):-1].split(",")[1])
    return _decimal_bytes(value, scale)
