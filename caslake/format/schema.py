"""Table schema with stable field ids at every level, and its JSON form.

A field's id never changes once assigned; data files carry it as the Parquet
``field_id`` of every node (struct fields, list elements, map keys and values)
so columns and nested fields stay identifiable across renames, drops and
re-adds.  Primitive types are written as short strings (``int64``, ``string``,
``timestamp[us, tz=UTC]``, ``decimal128(10, 2)``, ``time64[us]``,
``fixed_size_binary[16]``, ``uuid``); a nested field's type is ``struct``,
``list`` or ``map`` and its children are fields of their own (docs/format.md,
"Schema").

Arrow encodings of one logical type are stored as that type
(:func:`canonical_type`): ``string_view``, ``large_string`` and dictionaries of
strings are ``string``; ``large_list``, ``fixed_size_list`` and list views are
``list``.  A type that Parquet, Iceberg or Spark cannot represent (durations,
intervals, unions, the null type, unknown extension types) is refused with
:class:`~caslake.errors.UnsupportedType` naming the field's full path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import pyarrow as pa

from caslake.errors import InvalidArgument, UnsupportedType

FIELD_ID_KEY = b"PARQUET:field_id"
# pyarrow-stubs type the nested constructors narrower than pyarrow accepts.
_pa: Any = pa

STRUCT, LIST, MAP = "struct", "list", "map"
NESTED = frozenset({STRUCT, LIST, MAP})
ELEMENT, KEY, VALUE = "element", "key", "value"

_SIMPLE: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
    "float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64(),
    "string": pa.string(), "large_string": pa.large_string(),
    "binary": pa.binary(), "large_binary": pa.large_binary(),
    "date32": pa.date32(), "date64": pa.date64(),
    "uuid": pa.uuid(),
}
# Format versions 1-3 knew only these; a schema using any other type (or nesting)
# needs format version 4 (docs/format.md, "Format version rule").
_V3_SIMPLE = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                        "uint64", "float32", "float64", "string", "large_string", "binary",
                        "large_binary", "date32"})
_TS_RE = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=([^\]]+))?\]$")
_DEC_RE = re.compile(r"^decimal(32|64|128|256)\((\d+), ?(-?\d+)\)$")
_TIME_RE = re.compile(r"^time(32|64)\[(s|ms|us|ns)\]$")
_FSB_RE = re.compile(r"^fixed_size_binary\[(\d+)\]$")
_DECIMALS = {"32": pa.decimal32, "64": pa.decimal64, "128": pa.decimal128, "256": pa.decimal256}
_CAST_HINT = {
    "duration": "cast it to int64 (a count of its unit)",
    "interval": "store its months, days and nanoseconds as a struct of int32/int32/int64",
    "union": "split it into one nullable column per branch",
    "null": "cast it to the type its values will have (e.g. pa.string())",
}


def _unsupported(path: str, t: pa.DataType, kind: str) -> UnsupportedType:
    hint = _CAST_HINT.get(kind, "cast it to a type Parquet, Iceberg and Spark share")
    return UnsupportedType(f"column {path!r} has type {t}, which Parquet, Iceberg or Spark "
                           f"cannot represent; {hint}", path=path, type=str(t))


def canonical_type(t: pa.DataType, path: str = "") -> pa.DataType:
    """``t`` with every Arrow encoding replaced by the plain type a table stores
    (views, ``large_*``, dictionaries, run-end encoding, fixed-size and view
    lists), at every level.  Raises UnsupportedType naming ``path`` for a type
    no table can hold."""
    if pa.types.is_dictionary(t):
        return canonical_type(t.value_type, path)
    if pa.types.is_run_end_encoded(t):
        return canonical_type(t.value_type, path)
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
        item = t.value_field
        return pa.list_(item.with_type(canonical_type(item.type, f"{path}.{ELEMENT}")))
    if pa.types.is_map(t):
        k, v = t.key_field, t.item_field
        out: pa.DataType = _pa.map_(k.with_type(canonical_type(k.type, f"{path}.{KEY}")),
                                    v.with_type(canonical_type(v.type, f"{path}.{VALUE}")),
                                    keys_sorted=t.keys_sorted)
        return out
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(canonical_type(f.type, f"{path}.{f.name}")) for f in t])
    type_to_str(t, path)  # refuses what no table can hold
    return t


def type_to_str(t: pa.DataType, path: str = "") -> str:
    """The type string of a primitive type.  Raises UnsupportedType (naming
    ``path``) for a type no table can hold, InvalidArgument for a nested one."""
    for name, st in _SIMPLE.items():
        if t == st:
            return name
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}, tz={t.tz}]" if t.tz else f"timestamp[{t.unit}]"
    if pa.types.is_decimal(t):
        if t.scale < 0:
            raise UnsupportedType(
                f"column {path!r} has type {t}, a negative scale, which Parquet cannot "
                f"store; cast it to decimal{t.bit_width}({t.precision - t.scale}, 0)",
                path=path, type=str(t))
        return f"decimal{t.bit_width}({t.precision}, {t.scale})"
    if pa.types.is_time32(t) or pa.types.is_time64(t):
        return f"time{t.bit_width}[{t.unit}]"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed_size_binary[{t.byte_width}]"
    if pa.types.is_duration(t):
        raise _unsupported(path, t, "duration")
    if pa.types.is_interval(t):
        raise _unsupported(path, t, "interval")
    if pa.types.is_union(t):
        raise _unsupported(path, t, "union")
    if pa.types.is_null(t):
        raise _unsupported(path, t, "null")
    if pa.types.is_nested(t):
        raise InvalidArgument(f"column {path!r}: {t} is nested, not a primitive type")
    raise _unsupported(path, t, "other")


def type_from_str(s: str) -> pa.DataType:
    """The Arrow type of a primitive type string.  Raises ValueError on an unknown
    string (callers map it to CorruptMetadata or InvalidArgument)."""
    if s in _SIMPLE:
        return _SIMPLE[s]
    m = _TS_RE.match(s)
    if m:
        unit: Any = m.group(1)
        return pa.timestamp(unit, tz=m.group(2))
    m = _DEC_RE.match(s)
    if m:
        decimal: Any = _DECIMALS[m.group(1)]
        dec: pa.DataType = decimal(int(m.group(2)), int(m.group(3)))
        return dec
    m = _TIME_RE.match(s)
    if m:
        bits, u = m.group(1), m.group(2)
        time: pa.DataType | None = (_pa.time32(u) if bits == "32" and u in ("s", "ms") else
                                    _pa.time64(u) if bits == "64" and u in ("us", "ns") else None)
        if time is not None:
            return time
    m = _FSB_RE.match(s)
    if m and int(m.group(1)) > 0:
        return pa.binary(int(m.group(1)))
    raise ValueError(f"unknown type {s!r}")


def needs_v4_type(s: str) -> bool:
    """Whether a primitive type string is newer than format version 3."""
    return not (s in _V3_SIMPLE or _TS_RE.match(s)
                or (s.startswith("decimal128(") and _DEC_RE.match(s)))


@dataclass(frozen=True)
class Field:
    """A column, or a node inside one.  ``type`` is a primitive type string, or
    ``struct`` / ``list`` / ``map`` with ``children``: a struct's fields, a list's
    one ``element``, a map's ``key`` and ``value``."""

    id: int
    name: str
    type: str
    nullable: bool = True
    children: tuple[Field, ...] = ()

    @property
    def nested(self) -> bool:
        return self.type in NESTED

    @cached_property
    def arrow_type(self) -> pa.DataType:
        """The Arrow type (computed once per field: a scan asks for it per column)."""
        if self.type == STRUCT:
            return pa.struct([c.arrow_field() for c in self.children])
        if self.type == LIST:
            return pa.list_(self.children[0].arrow_field())
        if self.type == MAP:
            key, value = self.children
            mapped: pa.DataType = _pa.map_(key.arrow_field(), value.arrow_field())
            return mapped
        return type_from_str(self.type)

    def arrow_field(self) -> pa.Field[Any]:
        """This field as an Arrow field with its id (and its children's) as
        ``PARQUET:field_id`` metadata."""
        return self._arrow_field

    @cached_property
    def _arrow_field(self) -> pa.Field[Any]:
        return pa.field(self.name, self.arrow_type, nullable=self.nullable,
                        metadata={FIELD_ID_KEY: str(self.id).encode()})

    def child(self, name: str) -> Field | None:
        return next((c for c in self.children if c.name == name), None)

    def walk(self, prefix: str = "") -> Iterator[tuple[str, Field]]:
        """``(path, field)`` of this field and every node below it, depth first;
        paths are dotted (``payload.items.element.price``)."""
        path = f"{prefix}.{self.name}" if prefix else self.name
        yield path, self
        for c in self.children:
            yield from c.walk(path)

    @property
    def needs_v4(self) -> bool:
        return any(f.nested or needs_v4_type(f.type) for _, f in self.walk())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "type": self.type,
                               "nullable": self.nullable}
        if self.nested:
            out["fields"] = [c.to_json() for c in self.children]
        return out


class _Ids:
    """Hands out fresh field ids above ``last``."""

    def __init__(self, last: int) -> None:
        self.last = last

    def next(self) -> int:
        self.last += 1
        return self.last


def _children_of(t: pa.DataType) -> list[pa.Field[Any]]:
    if pa.types.is_struct(t):
        return list(t)
    if pa.types.is_list(t):
        return [t.value_field.with_name(ELEMENT)]
    if pa.types.is_map(t):
        return [t.key_field.with_name(KEY).with_nullable(False), t.item_field.with_name(VALUE)]
    return []


def _check_names(fields: list[pa.Field[Any]], where: str) -> None:
    seen: set[str] = set()
    for f in fields:
        if not f.name:
            raise InvalidArgument(f"{where}: field names must be non-empty")
        if f.name in seen:
            raise InvalidArgument(f"{where}: duplicate field name {f.name!r}")
        seen.add(f.name)


def fields_from_arrow(arrow: list[pa.Field[Any]], ids: _Ids, prefix: str = "") -> list[Field]:
    """Fields for Arrow fields (already canonical), with fresh ids as Iceberg assigns
    them: a struct's own fields first, then each one's children."""
    where = f"struct {prefix!r}" if prefix else "the schema"
    _check_names(arrow, where)
    own = [ids.next() for _ in arrow]
    out = []
    for fid, f in zip(own, arrow, strict=True):
        path = f"{prefix}.{f.name}" if prefix else f.name
        kids = _children_of(f.type)
        if pa.types.is_struct(f.type) and not kids:
            raise UnsupportedType(f"column {path!r} is a struct with no fields; Parquet "
                                  "cannot store it (add a field or drop the column)",
                                  path=path, type=str(f.type))
        if kids:
            kind = STRUCT if pa.types.is_struct(f.type) else LIST if pa.types.is_list(
                f.type) else MAP
            out.append(Field(fid, f.name, kind, f.nullable,
                             tuple(fields_from_arrow(kids, ids, path))))
        else:
            out.append(Field(fid, f.name, type_to_str(f.type, path), f.nullable))
    return out


def field_from_arrow(f: pa.Field[Any], ids: _Ids) -> Field:
    """One new field (a column to add) with fresh ids above ``ids``."""
    t = canonical_type(f.type, f.name)
    return fields_from_arrow([f.with_type(t)], ids)[0]


@dataclass(frozen=True)
class TableSchema:
    fields: tuple[Field, ...]
    schema_id: int = 0
    # The highest field id ever assigned, including those of dropped columns and
    # nested fields: a new field always gets a fresh id, so it can never read a
    # dropped one's data.
    highest_field_id: int = 0

    @staticmethod
    def from_arrow(schema: pa.Schema) -> TableSchema:
        """A new table's schema: ids 1..n for the columns, then their nested
        fields; every Arrow encoding mapped to its plain type."""
        arrow = [f.with_type(canonical_type(f.type, f.name)) for f in schema]
        if not arrow:
            raise InvalidArgument("a table needs at least one column")
        ids = _Ids(0)
        fields = fields_from_arrow(arrow, ids)
        return TableSchema(tuple(fields), highest_field_id=ids.last)

    def to_arrow(self) -> pa.Schema:
        return self._arrow_schema

    @cached_property
    def _arrow_schema(self) -> pa.Schema:
        return pa.schema([f.arrow_field() for f in self.fields])

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def last_field_id(self) -> int:
        return max(self.highest_field_id, *(f.id for _, f in self.walk()))

    @property
    def needs_v4(self) -> bool:
        """Whether this schema uses nesting or a type newer than format version 3."""
        return any(f.needs_v4 for f in self.fields)

    def walk(self) -> Iterator[tuple[str, Field]]:
        """``(path, field)`` of every column and nested field."""
        for f in self.fields:
            yield from f.walk()

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def by_id(self) -> dict[int, Field]:
        """The top-level columns by id."""
        return {f.id: f for f in self.fields}

    def all_by_id(self) -> dict[int, tuple[str, Field]]:
        """Every column and nested field by id, with its path."""
        return {f.id: (p, f) for p, f in self.walk()}

    def find(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    def find_path(self, path: str) -> Field | None:
        """The field at dotted ``path`` (``device.os``, ``items.element.price``), or
        None.  A top-level name containing dots wins over a nested reading."""
        hit = self.find(path)
        if hit is not None:
            return hit
        parts = path.split(".")
        for i in range(len(parts) - 1, 0, -1):
            top = self.find(".".join(parts[:i]))
            if top is None:
                continue
            node: Field | None = top
            for name in parts[i:]:
                node = node.child(name) if node is not None else None
            if node is not None:
                return node
        return None

    def with_fields(self, fields: tuple[Field, ...]) -> TableSchema:
        return replace(self, fields=fields)

    def to_json(self) -> dict[str, Any]:
        return {"schema_id": self.schema_id, "last_field_id": self.last_field_id,
                "fields": [f.to_json() for f in self.fields]}
