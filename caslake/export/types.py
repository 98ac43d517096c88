"""Type mapping from caslake's schema to Iceberg and Delta, and statistics encodings.

Owns: the one-to-one type tables (anything without an exact counterpart is
refused with :class:`~caslake.errors.ExportUnsupportedType` before anything
is written), Iceberg's single-value binary serialization of lower/upper
bounds, and Delta's JSON statistics values.  Never reads or writes storage.

Exactness rules (docs/interop.md, "Type mapping"):

* unsigned integers have no signed counterpart of the same width: refused;
* timestamps must be microseconds (Iceberg v2 and Delta store micros; a
  ``s``/``ms``/``ns`` column would be read with the wrong unit or refused);
* ``int8``/``int16`` become Iceberg ``int`` (Iceberg has no narrower integer;
  the Parquet INT(8)/INT(16) annotation is read as ``int``) and Delta
  ``byte``/``short``.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa

from caslake.errors import ExportUnsupportedType
from caslake.format.schema import Field, TableSchema
from caslake.format.stats import value_from_json

ICEBERG = "Iceberg"
DELTA = "Delta"

_ICEBERG_SIMPLE = {
    "bool": "boolean", "int8": "int", "int16": "int", "int32": "int", "int64": "long",
    "float32": "float", "float64": "double", "string": "string", "large_string": "string",
    "binary": "binary", "large_binary": "binary", "date32": "date",
}
_DELTA_SIMPLE = {
    "bool": "boolean", "int8": "byte", "int16": "short", "int32": "integer", "int64": "long",
    "float32": "float", "float64": "double", "string": "string", "large_string": "string",
    "binary": "binary", "large_binary": "binary", "date32": "date",
}


def _refuse(f: Field, target: str, why: str) -> ExportUnsupportedType:
    return ExportUnsupportedType(
        f"column {f.name!r} of type {f.type} cannot be exported to {target}: {why}",
        column=f.name, type=f.type, target=target)


def _mapped(f: Field, target: str, simple: dict[str, str], *, tz: str, ntz: str) -> str:
    if f.type in simple:
        return simple[f.type]
    t = f.arrow_type
    if pa.types.is_unsigned_integer(t):
        raise _refuse(f, target, "it has no unsigned integer types")
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            raise _refuse(f, target, "timestamps must have microsecond precision")
        return tz if t.tz is not None else ntz
    if pa.types.is_decimal128(t):
        if t.scale < 0 or t.precision > 38:
            raise _refuse(f, target, "decimals need 0 <= scale and precision <= 38")
        return f"decimal({t.precision}, {t.scale})" if target == ICEBERG else \
            f"decimal({t.precision},{t.scale})"
    raise _refuse(f, target, "no equivalent type")


def iceberg_type(f: Field) -> str:
    return _mapped(f, ICEBERG, _ICEBERG_SIMPLE, tz="timestamptz", ntz="timestamp")


def delta_type(f: Field) -> str:
    return _mapped(f, DELTA, _DELTA_SIMPLE, tz="timestamp", ntz="timestamp_ntz")


def iceberg_schema(schema: TableSchema) -> dict[str, Any]:
    """The Iceberg schema JSON (field ids are caslake's).  Raises ExportUnsupportedType."""
    return {"type": "struct", "schema-id": schema.schema_id, "identifier-field-ids": [],
            "fields": [{"id": f.id, "name": f.name, "required": not f.nullable,
                        "type": iceberg_type(f)} for f in schema.fields]}


def delta_schema(schema: TableSchema, physical: Mapping[int, str] | None = None
                 ) -> dict[str, Any]:
    """The Delta schemaString object.  Raises ExportUnsupportedType.  With
    ``physical`` (field id -> the Parquet column name the data files use), each
    field carries column mapping's ``delta.columnMapping.id`` (caslake's field id)
    and ``delta.columnMapping.physicalName``."""
    def meta(f: Field) -> dict[str, Any]:
        if physical is None:
            return {}
        return {"delta.columnMapping.id": f.id,
                "delta.columnMapping.physicalName": physical[f.id]}

    return {"type": "struct", "fields": [
        {"name": f.name, "type": delta_type(f), "nullable": f.nullable, "metadata": meta(f)}
        for f in schema.fields]}


# --- Iceberg bounds -------------------------------------------------------------

_EPOCH_DATE = dt.date(1970, 1, 1)


def _decimal_bytes(value: Decimal, scale: int) -> bytes:
    unscaled = int(value.scaleb(scale))
    width = max(1, (unscaled.bit_length() + 8) // 8)  # + sign bit
    return unscaled.to_bytes(width, "big", signed=True)


def iceberg_bound(value: Any, f: Field) -> bytes | None:
    """A caslake statistics value (JSON form) in Iceberg's single-value binary
    serialization for ``f``'s Iceberg type; None when no bound can be given."""
    if value is None:
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
    if value is None:
        return None
    kind = delta_type(f)
    if kind in ("byte", "short", "integer", "long", "float", "double", "string", "date"):
        return value
    return None
