"""Table schema with stable field ids, and its JSON form.

A field's id never changes once assigned; data files carry it as the Parquet
``field_id`` so columns stay identifiable across future renames.  Types are
written as short strings (``int64``, ``string``, ``timestamp[us, tz=UTC]``,
``decimal128(10, 2)``); only flat primitive types are supported in format
version 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from caslake.errors import InvalidArgument

FIELD_ID_KEY = b"PARQUET:field_id"

_SIMPLE: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
    "float32": pa.float32(), "float64": pa.float64(),
    "string": pa.string(), "large_string": pa.large_string(),
    "binary": pa.binary(), "large_binary": pa.large_binary(),
    "date32": pa.date32(),
}
_TS_RE = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=([^\]]+))?\]$")
_DEC_RE = re.compile(r"^decimal128\((\d+), ?(-?\d+)\)$")


def type_to_str(t: pa.DataType) -> str:
    for name, st in _SIMPLE.items():
        if t == st:
            return name
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}, tz={t.tz}]" if t.tz else f"timestamp[{t.unit}]"
    if pa.types.is_decimal128(t):
        return f"decimal128({t.precision}, {t.scale})"
    raise InvalidArgument(f"unsupported column type {t} (format v1 supports flat primitive types)")


def type_from_str(s: str) -> pa.DataType:
    """Raises ValueError on an unknown type string (callers map it to CorruptMetadata)."""
    if s in _SIMPLE:
        return _SIMPLE[s]
    m = _TS_RE.match(s)
    if m:
        unit: Any = m.group(1)
        return pa.timestamp(unit, tz=m.group(2))
    m = _DEC_RE.match(s)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    raise ValueError(f"unknown type {s!r}")


@dataclass(frozen=True)
class Field:
    id: int
    name: str
    type: str
    nullable: bool = True

    @property
    def arrow_type(self) -> pa.DataType:
        return type_from_str(self.type)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "type": self.type, "nullable": self.nullable}


@dataclass(frozen=True)
class TableSchema:
    fields: tuple[Field, ...]
    schema_id: int = 0
    # The highest field id ever assigned, including those of dropped columns: a
    # new column always gets a fresh id, so it can never read a dropped one's data.
    highest_field_id: int = 0

    @staticmethod
    def from_arrow(schema: pa.Schema) -> TableSchema:
        seen: set[str] = set()
        fields = []
        for i, f in enumerate(schema, start=1):
            if f.name in seen:
                raise InvalidArgument(f"duplicate column name {f.name!r}")
            if not f.name:
                raise InvalidArgument("column names must be non-empty")
            seen.add(f.name)
            fields.append(Field(i, f.name, type_to_str(f.type), f.nullable))
        if not fields:
            raise InvalidArgument("a table needs at least one column")
        return TableSchema(tuple(fields), highest_field_id=len(fields))

    def to_arrow(self) -> pa.Schema:
        return pa.schema([
            pa.field(f.name, f.arrow_type, nullable=f.nullable,
                     metadata={FIELD_ID_KEY: str(f.id).encode()})
            for f in self.fields
        ])

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def last_field_id(self) -> int:
        return max(self.highest_field_id, *(f.id for f in self.fields))

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def by_id(self) -> dict[int, Field]:
        return {f.id: f for f in self.fields}

    def find(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"schema_id": self.schema_id, "last_field_id": self.last_field_id,
                "fields": [f.to_json() for f in self.fields]}
