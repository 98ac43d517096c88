"""Schema evolution by field id: the allowed changes, and reading old files under a new schema.

Owns: the evolution operations (add a nullable column, rename, drop, widen a
type, make nullable) as small typed values, :func:`evolve` (pure: a schema and
operations in, the next schema with a new ``schema_id`` out, or a typed
:class:`InvalidSchemaChange`), and :func:`conform_to_schema`, which presents a
data file's columns under a table schema by **field id, never by name**.
Pure: no I/O.  Must never match a file's column to a field by its name: a
renamed column keeps its id, and a dropped-then-re-added name gets a new id,
so matching by name would show another column's data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import InvalidArgument, InvalidSchemaChange
from caslake.format.schema import (
    FIELD_ID_KEY,
    LIST,
    STRUCT,
    Field,
    TableSchema,
    type_from_str,
    type_to_str,
)

# pyarrow-stubs type the nested constructors narrower than pyarrow accepts.
_pa: Any = pa

_INT_WIDTH = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_FLOAT_WIDTH = {"float32": 32, "float64": 64}


@dataclass(frozen=True)
class AddColumn:
    """A new nullable column; rows written before it read as NULL."""

    name: str
    type: str  # a type string of docs/format.md, e.g. "int64"

    def describe(self) -> str:
        return f"add {self.name} {self.type}"


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str

    def describe(self) -> str:
        return f"rename {self.old} -> {self.new}"


@dataclass(frozen=True)
class DropColumn:
    name: str

    def describe(self) -> str:
        return f"drop {self.name}"


@dataclass(frozen=True)
class WidenColumn:
    """int8/16/32 -> a wider int up to int64, float32 -> float64, decimal128(p, s)
    -> decimal128(p', s) with p' > p.  Every old value is representable."""

    name: str
    type: str

    def describe(self) -> str:
        return f"widen {self.name} to {self.type}"


@dataclass(frozen=True)
class MakeNullable:
    name: str

    def describe(self) -> str:
        return f"make {self.name} nullable"


SchemaChange = AddColumn | RenameColumn | DropColumn | WidenColumn | MakeNullable


def is_widening(old: str, new: str) -> bool:
    """True if every value of type ``old`` is a value of type ``new`` and ``new`` differs."""
    if old in _INT_WIDTH and new in _INT_WIDTH:
        return _INT_WIDTH[old] < _INT_WIDTH[new]
    if old in _FLOAT_WIDTH and new in _FLOAT_WIDTH:
        return _FLOAT_WIDTH[old] < _FLOAT_WIDTH[new]
    try:
        a, b = type_from_str(old), type_from_str(new)
    except ValueError:
        return False
    if pa.types.is_decimal128(a) and pa.types.is_decimal128(b):
        return bool(a.scale == b.scale and a.precision < b.precision)
    return False


def _canonical_type(name: str, type_: object) -> str:
    """A type string or a pyarrow type, as the canonical type string."""
    try:
        if isinstance(type_, pa.DataType):
            return type_to_str(type_)
        if isinstance(type_, str):
            return type_to_str(type_from_str(type_))
    except ValueError:
        pass
    except InvalidArgument as e:  # a pyarrow type format v1/v2 cannot store
        raise InvalidSchemaChange(f"column {name!r}: {e}", column=name) from None
    raise InvalidSchemaChange(f"column {name!r}: unknown type {type_!r}", column=name)


def _existing(fields: Sequence[Field], name: str) -> int:
    for i, f in enumerate(fields):
        if f.name == name:
            return i
    raise InvalidSchemaChange(
        f"no column named {name!r} (columns: {', '.join(f.name for f in fields)})",
        column=name)


def _check_new_name(fields: Sequence[Field], name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidSchemaChange(f"a column name must be a non-empty string, not {name!r}",
                                  column=str(name))
    if any(f.name == name for f in fields):
        raise InvalidSchemaChange(f"a column named {name!r} already exists", column=name)
    return name


def evolve(schema: TableSchema, changes: Iterable[SchemaChange]) -> TableSchema:
    """Apply ``changes`` in order and return the next schema (``schema_id + 1``).

    New columns get ids above every id ever used (``last_field_id``), so a
    dropped column's data never shows under a new column of the same name.
    Raises :class:`InvalidSchemaChange` naming the column for any change that
    is not allowed; the input schema is never modified."""
    fields = list(schema.fields)
    highest = schema.last_field_id
    changes = list(changes)
    if not changes:
        raise InvalidSchemaChange("a schema update needs at least one change")
    for ch in changes:
        if isinstance(ch, AddColumn):
            name = _check_new_name(fields, ch.name)
            highest += 1
            fields.append(Field(highest, name, _canonical_type(name, ch.type), True))
        elif isinstance(ch, RenameColumn):
            i = _existing(fields, ch.old)
            fields[i] = replace(fields[i], name=_check_new_name(fields, ch.new))
        elif isinstance(ch, DropColumn):
            i = _existing(fields, ch.name)
            if len(fields) == 1:
                raise InvalidSchemaChange(f"cannot drop {ch.name!r}: it is the last column",
                                          column=ch.name)
            del fields[i]
        elif isinstance(ch, WidenColumn):
            i = _existing(fields, ch.name)
            new = _canonical_type(ch.name, ch.type)
            if not is_widening(fields[i].type, new):
                raise InvalidSchemaChange(
                    f"cannot change column {ch.name!r} from {fields[i].type} to {new}: only "
                    "int8/16/32 -> wider int, float32 -> float64 and decimal precision "
                    "widening at the same scale keep every value", column=ch.name)
            fields[i] = replace(fields[i], type=new)
        elif isinstance(ch, MakeNullable):
            i = _existing(fields, ch.name)
            fields[i] = replace(fields[i], nullable=True)
        else:
            raise InvalidSchemaChange(f"not a schema change: {ch!r}")
    return TableSchema(tuple(fields), schema_id=schema.schema_id + 1, highest_field_id=highest)


def field_ids_of(schema: pa.Schema) -> list[int | None]:
    """The ``PARQUET:field_id`` of each column of an Arrow schema (None where absent)."""
    out: list[int | None] = []
    for f in schema:
        raw = (f.metadata or {}).get(FIELD_ID_KEY)
        try:
            out.append(int(raw) if raw is not None else None)
        except ValueError:
            out.append(None)
    return out


def conform_to_schema(data: pa.Table, schema: TableSchema,
                      columns: Sequence[str] | None = None) -> pa.Table:
    """Present ``data`` (a data file's columns, carrying their field ids) as the
    columns ``columns`` (default: all) of ``schema``, matched by field id.

    A field the file lacks (added later) reads as NULL; a column of the file no
    field has (dropped) is left out; a widened field is cast (every old value
    fits); a renamed field takes its current name.  The file's column *names*
    are never used.  Raises ``ValueError`` for a file column without a field id
    (the caller names the file in a CorruptMetadata)."""
    ids = field_ids_of(data.schema)
    by_id: dict[int, int] = {}
    for i, fid in enumerate(ids):
        if fid is None:
            raise ValueError(f"column {data.schema.field(i).name!r} carries no field id")
        by_id[fid] = i
    wanted = schema.fields if columns is None else [schema.field(c) for c in columns]
    arrays: list[Any] = []
    for f in wanted:
        t = f.arrow_type
        if f.id in by_id:
            col = data.column(by_id[f.id])
            arrays.append(col if col.type == t else col.cast(t))
        else:
            arrays.append(_pa.nulls(data.num_rows).cast(t))
    target = pa.schema([
        pa.field(f.name, f.arrow_type, nullable=f.nullable,
                 metadata={FIELD_ID_KEY: str(f.id).encode()}) for f in wanted])
    return pa.Table.from_arrays(arrays, schema=target)


def map_input_columns(input_schema: pa.Schema, schema: TableSchema) -> dict[str, Field]:
    """Match the columns of data to append to the table's fields: by name, and for
    a name the table no longer has, by the field id the column carries (data read
    from this table before a rename).  Returns input column name -> field; columns
    that match no field are left out (the caller reports them, or adds them with
    ``schema_mode="merge"``).  A name always wins over an id, because ids in Arrow
    metadata are not scoped to a table (data read from another table carries that
    table's ids)."""
    by_id = schema.by_id()
    names = {f.name for f in input_schema}
    out: dict[str, Field] = {}
    taken: set[int] = set()
    for f, fid in zip(input_schema, field_ids_of(input_schema), strict=True):
        hit = schema.find(f.name)
        if hit is None and fid is not None:
            cand = by_id.get(fid)
            # the renamed field, unless its current name is also in the input
            if cand is not None and cand.name not in names:
                hit = cand
        if hit is not None and hit.id not in taken:
            taken.add(hit.id)
            out[f.name] = hit
    return out


# --- nested columns: present a stored column under a field, by id at every level ------


def _id_of(f: pa.Field[Any]) -> int | None:
    raw = (f.metadata or {}).get(FIELD_ID_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _stored_children(t: pa.DataType) -> list[pa.Field[Any]]:
    if pa.types.is_struct(t):
        return list(t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def same_shape(stored: pa.Field[Any], want: Field) -> bool:
    """Whether a stored column already is ``want``'s type with ``want``'s ids at
    every level (no rebuild needed)."""
    if want.nested:
        kids = _stored_children(stored.type)
        if len(kids) != len(want.children):
            return False
        plain = (pa.types.is_struct(stored.type) if want.type == STRUCT else
                 pa.types.is_list(stored.type) if want.type == LIST else
                 pa.types.is_map(stored.type))
        return plain and all(
            _id_of(k) == c.id and k.name == c.name and k.nullable == c.nullable
            and same_shape(k, c) for k, c in zip(kids, want.children, strict=True))
    return bool(stored.type == want.arrow_type)


def conform_array(arr: Any, stored: pa.Field[Any], want: Field, path: str) -> Any:
    """Present ``arr`` (a stored column or nested value, of ``stored``'s type) as
    ``want``'s type, matching every nested field **by id**: a field the data
    lacks reads as NULL, a stored field no id matches (dropped) is left out, a
    renamed one takes its current name, a widened one is cast.  Raises
    ``ValueError`` naming ``path`` when the stored type cannot present it."""
    if not want.nested:
        t = want.arrow_type
        if arr.type == t:
            return arr
        if isinstance(t, pa.ExtensionType) and arr.type == t.storage_type:
            return pa.ExtensionArray.from_storage(t, arr)
        try:
            return arr.cast(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ValueError(f"{path}: stored as {arr.type}, the table says {t} ({e})"
                             ) from None
    kids = {_id_of(k): (i, k) for i, k in enumerate(_stored_children(stored.type))}
    mask = arr.is_null() if arr.null_count else None
    if want.type == STRUCT:
        if not pa.types.is_struct(arr.type):
            raise ValueError(f"{path}: stored as {arr.type}, the table says a struct")
        parts = []
        for c in want.children:
            hit = kids.get(c.id)
            if hit is None:
                parts.append(_pa.nulls(len(arr), c.arrow_type))
            else:
                child = arr.field(hit[0])  # offset and length follow the parent's
                parts.append(conform_array(child, hit[1], c, f"{path}.{c.name}"))
        return pa.StructArray.from_arrays(parts, fields=[c.arrow_field() for c in want.children],
                                          mask=mask)
    if want.type == LIST:
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
                or pa.types.is_fixed_size_list(arr.type)):
            raise ValueError(f"{path}: stored as {arr.type}, the table says a list")
        element = want.children[0]
        if pa.types.is_fixed_size_list(arr.type):
            arr = arr.cast(pa.list_(arr.type.value_field))
        hit = kids.get(element.id)
        offsets, (start, length) = _rebased(arr.offsets)
        if hit is None:  # a re-created element: no stored values are its
            values = _pa.nulls(length, element.arrow_type)
        else:
            values = conform_array(arr.values.slice(start, length), hit[1], element,
                                   f"{path}.{element.name}")
        return pa.ListArray.from_arrays(offsets, values, type=want.arrow_type, mask=mask)
    if not pa.types.is_map(arr.type):
        raise ValueError(f"{path}: stored as {arr.type}, the table says a map")
    key, value = want.children
    k_hit, v_hit = kids.get(key.id), kids.get(value.id)
    if k_hit is None:
        raise ValueError(f"{path}: the stored map's key has another field id")
    offsets, (start, length) = _rebased(arr.offsets)
    keys = conform_array(arr.keys.slice(start, length), k_hit[1], key, f"{path}.{key.name}")
    items = (_pa.nulls(length, value.arrow_type) if v_hit is None else
             conform_array(arr.items.slice(start, length), v_hit[1], value,
                           f"{path}.{value.name}"))
    return _pa.MapArray.from_arrays(offsets, keys, items, type=want.arrow_type, mask=mask)


def _rebased(offsets: Any) -> tuple[Any, tuple[int, int]]:
    """List offsets starting at 0 (int32), and the ``(start, length)`` of the child
    values they cover."""
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, start).cast(pa.int32()), (start, end - start)


def conform_column(col: Any, stored: pa.Field[Any], want: Field) -> Any:
    """:func:`conform_array` over every chunk of a column; the column itself when it
    already has ``want``'s shape."""
    if same_shape(stored, want):
        return col
    if isinstance(col, pa.ChunkedArray):
        return _pa.chunked_array([conform_array(c, stored, want, want.name) for c in col.chunks],
                                type=want.arrow_type)
    return conform_array(col, stored, want, want.name)
