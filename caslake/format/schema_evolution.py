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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import CaslakeError, InvalidArgument, InvalidSchemaChange, UnsupportedType
from caslake.format.schema import (
    FIELD_ID_KEY,
    KEY,
    LIST,
    MAP,
    STRUCT,
    Field,
    TableSchema,
    _Ids,
    canonical_type,
    fields_from_arrow,
    type_from_str,
    type_to_str,
)
from caslake.format.type_text import parse_type, type_text

# pyarrow-stubs type the nested constructors narrower than pyarrow accepts.
_pa: Any = pa

_INT_WIDTH = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_FLOAT_WIDTH = {"float16": 16, "float32": 32, "float64": 64}


@dataclass(frozen=True)
class AddColumn:
    """A new optional column, or a new optional field of a struct at any depth when
    ``name`` is a dotted path (``device.os``, ``items.element.price``); rows written
    before it read as NULL.  ``type`` is a type string (``int64``, ``list<string>``,
    ``struct<os:string,v:int32>``) or a pyarrow type."""

    name: str
    type: str | pa.DataType

    def describe(self) -> str:
        t = self.type if isinstance(self.type, str) else _text_of(self.type)
        return f"add {self.name} {t}"


@dataclass(frozen=True)
class RenameColumn:
    """Rename the column or nested field at path ``old``; ``new`` is its new name
    (for a nested field the last part only, or the whole path with the same parent)."""

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
    """int8/16/32 -> a wider int up to int64, float16/32 -> a wider float, decimal(p, s)
    -> decimal(p', s) with p' > p; for a nested primitive too (``tags.element``,
    ``attrs.value``, ``device.version``).  Every old value is representable."""

    name: str
    type: str | pa.DataType

    def describe(self) -> str:
        t = self.type if isinstance(self.type, str) else _text_of(self.type)
        return f"widen {self.name} to {t}"


@dataclass(frozen=True)
class MakeNullable:
    name: str

    def describe(self) -> str:
        return f"make {self.name} nullable"


SchemaChange = AddColumn | RenameColumn | DropColumn | WidenColumn | MakeNullable


def _text_of(t: pa.DataType) -> str:
    try:
        return type_text(t)
    except CaslakeError:
        return str(t)


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
    if pa.types.is_decimal(a) and pa.types.is_decimal(b):
        return bool(a.scale == b.scale and a.precision < b.precision)
    return False


# --- paths: a column name, or a dotted path to a nested field ---------------------------


def _at(fields: Sequence[Field], chain: Sequence[int]) -> Field:
    node = fields[chain[0]]
    for i in chain[1:]:
        node = node.children[i]
    return node


def _locate(fields: Sequence[Field], path: str) -> list[int] | None:
    """The indexes (column, then child at each level) of the field at ``path``, as
    :meth:`TableSchema.find_path` resolves it: a top-level name wins, then the
    longest top-level name that is a prefix, followed by child names."""
    names = [f.name for f in fields]
    if path in names:
        return [names.index(path)]
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        top = ".".join(parts[:cut])
        if top not in names:
            continue
        chain = [names.index(top)]
        node = fields[chain[0]]
        for name in parts[cut:]:
            i = next((j for j, c in enumerate(node.children) if c.name == name), None)
            if i is None:
                break
            chain.append(i)
            node = node.children[i]
        else:
            return chain
    return None


def _names_nested(fields: Sequence[Field], path: str) -> bool:
    """Whether ``path`` reaches into a column: some dotted prefix of it is a column's
    name.  Otherwise a dotted name is a top-level column's own name."""
    names = {f.name for f in fields}
    parts = path.split(".")
    return any(".".join(parts[:cut]) in names for cut in range(1, len(parts)))


def _find(fields: Sequence[Field], path: object) -> list[int]:
    if not isinstance(path, str) or not path:
        raise InvalidSchemaChange(f"a column name must be a non-empty string, not {path!r}",
                                  column=str(path))
    chain = _locate(fields, path)
    if chain is None:
        if _names_nested(fields, path):
            raise InvalidSchemaChange(f"no field at {path!r} ({_near(fields, path)})",
                                      column=path)
        raise InvalidSchemaChange(
            f"no column named {path!r} (columns: {', '.join(f.name for f in fields)})",
            column=path)
    return chain


def _near(fields: Sequence[Field], path: str) -> str:
    """What the deepest existing prefix of ``path`` holds, for an error message."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:cut])
        chain = _locate(fields, prefix)
        if chain is not None:
            node = _at(fields, chain)
            kids = ", ".join(c.name for c in node.children)
            return (f"{prefix!r} is {node.type} with fields {kids}" if kids
                    else f"{prefix!r} is {node.type}, which has no fields")
    return "no column starts it"


def _rebuild(fields: Sequence[Field], chain: Sequence[int],
             fn: Callable[[Field], Field | None]) -> list[Field]:
    """``fields`` with the field at ``chain`` replaced by ``fn(field)`` (None: removed)."""
    out = list(fields)
    head = chain[0]
    if len(chain) == 1:
        new = fn(out[head])
        if new is None:
            del out[head]
        else:
            out[head] = new
        return out
    out[head] = replace(out[head], children=tuple(_rebuild(out[head].children, chain[1:], fn)))
    return out


def _parent_kind(fields: Sequence[Field], chain: Sequence[int]) -> str | None:
    """The type of the field holding the one at ``chain`` (None for a column)."""
    return _at(fields, chain[:-1]).type if len(chain) > 1 else None


# --- types --------------------------------------------------------------------------------


def _arrow_type(path: str, type_: object) -> pa.DataType:
    """A type string (primitive or nested) or a pyarrow type, as the plain Arrow type
    a table stores."""
    try:
        if isinstance(type_, str):
            try:
                return type_from_str(type_)
            except ValueError:
                return canonical_type(parse_type(type_, path), path)
        if isinstance(type_, pa.DataType):
            return canonical_type(type_, path)
    except UnsupportedType as e:  # names the nested field at fault
        raise InvalidSchemaChange(str(e), column=e.path) from None
    except InvalidArgument as e:
        raise InvalidSchemaChange(str(e), column=path) from None
    raise InvalidSchemaChange(f"column {path!r}: a type is a string such as 'int64' or "
                              f"'list<string>', or a pyarrow type, not {type_!r}", column=path)


def _primitive(path: str, type_: object) -> str:
    t = _arrow_type(path, type_)
    if pa.types.is_nested(t):
        raise InvalidSchemaChange(f"cannot change {path!r} to {_text_of(t)}: only a primitive "
                                  "type widens", column=path)
    return type_to_str(t, path)


def _new_field(path: str, name: str, type_: object, ids: _Ids) -> Field:
    """A new optional field named ``name`` (at ``path``); a nested type's fields get
    fresh ids too."""
    t = _arrow_type(path, type_)
    if not pa.types.is_nested(t):
        return Field(ids.next(), name, type_to_str(t, path), True)
    parent = path[:-len(name) - 1] if path != name else ""
    try:
        return fields_from_arrow([pa.field(name, t, nullable=True)], ids, parent)[0]
    except UnsupportedType as e:
        raise InvalidSchemaChange(str(e), column=e.path) from None
    except InvalidArgument as e:
        raise InvalidSchemaChange(str(e), column=path) from None


# --- the changes --------------------------------------------------------------------------


def _check_new_name(fields: Sequence[Field], name: object, path: str | None = None) -> str:
    shown = path if path is not None else name
    if not isinstance(name, str) or not name:
        raise InvalidSchemaChange(f"a column name must be a non-empty string, not {name!r}",
                                  column=str(shown))
    if any(f.name == name for f in fields):
        what = "a column" if path is None else "a field"
        raise InvalidSchemaChange(f"{what} named {shown!r} already exists", column=str(shown))
    return name


def _add(fields: list[Field], ch: AddColumn, ids: _Ids) -> list[Field]:
    path = ch.name
    if isinstance(path, str) and _locate(fields, path) is not None:
        what = "a column" if path in (f.name for f in fields) else "a field"
        raise InvalidSchemaChange(f"{what} named {path!r} already exists", column=path)
    if not isinstance(path, str) or not _names_nested(fields, path):
        name = _check_new_name(fields, path)  # a column (its name may hold dots)
        return [*fields, _new_field(name, name, ch.type, ids)]
    parent_path, _, name = path.rpartition(".")
    chain = _locate(fields, parent_path)
    if chain is None:
        raise InvalidSchemaChange(f"cannot add {path!r}: no field at {parent_path!r} "
                                  f"({_near(fields, path)})", column=path)
    parent = _at(fields, chain)
    if parent.type != STRUCT:
        hint = {LIST: f"; a list's fields go into its element ('{parent_path}.element.{name}' "
                      "when the element is a struct)",
                MAP: f"; a map's fields go into its value ('{parent_path}.value.{name}' when "
                     "the value is a struct)"}.get(parent.type, "")
        raise InvalidSchemaChange(f"cannot add {path!r}: {parent_path!r} is {parent.type}, "
                                  f"not a struct{hint}", column=path)
    _check_new_name(parent.children, name, path)
    new = _new_field(path, name, ch.type, ids)
    return _rebuild(fields, chain, lambda p: replace(p, children=(*p.children, new)))


def _rename(fields: list[Field], ch: RenameColumn) -> list[Field]:
    chain = _find(fields, ch.old)
    if len(chain) == 1:
        new_name = _check_new_name(fields, ch.new)
        return _rebuild(fields, chain, lambda f: replace(f, name=new_name))
    parent = _at(fields, chain[:-1])
    if parent.type != STRUCT:
        raise InvalidSchemaChange(f"cannot rename {ch.old!r}: a {parent.type}'s "
                                  f"{_at(fields, chain).name} has a fixed name", column=ch.old)
    prefix = ch.old.rpartition(".")[0] + "."
    new = ch.new[len(prefix):] if isinstance(ch.new, str) and ch.new.startswith(prefix) else ch.new
    if isinstance(new, str) and "." in new:
        raise InvalidSchemaChange(f"cannot rename {ch.old!r} to {ch.new!r}: a nested field's "
                                  "name has no '.' (paths are dotted); give the new name of "
                                  "the field only", column=ch.old)
    name = _check_new_name(parent.children, new, prefix + str(new))
    return _rebuild(fields, chain, lambda f: replace(f, name=name))


def _drop(fields: list[Field], ch: DropColumn) -> list[Field]:
    chain = _find(fields, ch.name)
    if len(chain) == 1:
        if len(fields) == 1:
            raise InvalidSchemaChange(f"cannot drop {ch.name!r}: it is the last column",
                                      column=ch.name)
        return _rebuild(fields, chain, lambda f: None)
    parent_path = ch.name.rpartition(".")[0]
    parent = _at(fields, chain[:-1])
    if parent.type != STRUCT:
        raise InvalidSchemaChange(f"cannot drop {ch.name!r}: a {parent.type} cannot lose its "
                                  f"{_at(fields, chain).name}; drop "
                                  f"{_droppable(fields, chain[:-1], parent_path)!r} instead",
                                  column=ch.name)
    if len(parent.children) == 1:
        raise InvalidSchemaChange(f"cannot drop {ch.name!r}: it is the last field of struct "
                                  f"{parent_path!r} (Parquet cannot store an empty struct); "
                                  f"drop {_droppable(fields, chain[:-1], parent_path)!r} "
                                  "instead", column=ch.name)
    return _rebuild(fields, chain, lambda f: None)


def _droppable(fields: Sequence[Field], chain: Sequence[int], path: str) -> str:
    """The path of the nearest field at or above ``chain`` that can be dropped (a
    column or a struct's field, not a list's element or a map's key or value)."""
    while len(chain) > 1 and _parent_kind(fields, chain) != STRUCT:
        chain, path = chain[:-1], path.rpartition(".")[0]
    return path


def _widen(fields: list[Field], ch: WidenColumn) -> list[Field]:
    chain = _find(fields, ch.name)
    old = _at(fields, chain)
    if old.nested:
        inside = {LIST: "element", MAP: "value"}.get(old.type, old.children[0].name)
        raise InvalidSchemaChange(f"cannot change the type of {ch.name!r}: it is a {old.type}; "
                                  "only primitive types widen (address one inside it, e.g. "
                                  f"'{ch.name}.{inside}')", column=ch.name)
    if _parent_kind(fields, chain) == MAP and old.name == KEY:
        raise InvalidSchemaChange(f"cannot change the type of {ch.name!r}: a map key keeps "
                                  "its type", column=ch.name)
    new = _primitive(ch.name, ch.type)
    if not is_widening(old.type, new):
        raise InvalidSchemaChange(
            f"cannot change {ch.name!r} from {old.type} to {new}: only int8/16/32 -> "
            "wider int, float16/32 -> wider float and decimal precision widening at the "
            "same scale keep every value", column=ch.name)
    return _rebuild(fields, chain, lambda f: replace(f, type=new))


def _make_nullable(fields: list[Field], ch: MakeNullable) -> list[Field]:
    chain = _find(fields, ch.name)
    if _parent_kind(fields, chain) == MAP and _at(fields, chain).name == KEY:
        raise InvalidSchemaChange(f"cannot make {ch.name!r} nullable: a map key is never NULL",
                                  column=ch.name)
    return _rebuild(fields, chain, lambda f: replace(f, nullable=True))


def evolve(schema: TableSchema, changes: Iterable[SchemaChange]) -> TableSchema:
    """Apply ``changes`` in order and return the next schema (``schema_id + 1``).

    A change names a column, or a nested field by its dotted path (a top-level
    name containing dots wins, as in :meth:`TableSchema.find_path`).  New fields
    (and every field inside a new nested type) get ids above every id ever used
    (``last_field_id``), so a dropped field's data never shows under a new field of
    the same name.  Raises :class:`InvalidSchemaChange` naming the full path for
    any change that is not allowed; the input schema is never modified."""
    fields = list(schema.fields)
    ids = _Ids(schema.last_field_id)
    changes = list(changes)
    if not changes:
        raise InvalidSchemaChange("a schema update needs at least one change")
    for ch in changes:
        if isinstance(ch, AddColumn):
            fields = _add(fields, ch, ids)
        elif isinstance(ch, RenameColumn):
            fields = _rename(fields, ch)
        elif isinstance(ch, DropColumn):
            fields = _drop(fields, ch)
        elif isinstance(ch, WidenColumn):
            fields = _widen(fields, ch)
        elif isinstance(ch, MakeNullable):
            fields = _make_nullable(fields, ch)
        else:
            raise InvalidSchemaChange(f"not a schema change: {ch!r}")
    return TableSchema(tuple(fields), schema_id=schema.schema_id + 1, highest_field_id=ids.last)


def field_ids_of(schema: pa.Schema) -> list[int | None]:
    """The ``PARQUET:field_id`` of each column of an Arrow schema (None where absent)."""
    return [field_id_of(f) for f in schema]


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


def field_id_of(f: pa.Field[Any]) -> int | None:
    """The ``PARQUET:field_id`` an Arrow field carries (None: absent or not a number)."""
    raw = (f.metadata or {}).get(FIELD_ID_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def stored_children(t: pa.DataType) -> list[pa.Field[Any]]:
    """The child fields of an Arrow type as Parquet stores them: a struct's fields, a
    list's element (any list encoding), a map's key and value; none for a primitive
    (an extension type's children are its storage type's)."""
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    if pa.types.is_struct(t):
        return list(t)
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def same_shape(stored: pa.Field[Any], want: Field) -> bool:
    """Whether a stored column already is ``want``'s type with ``want``'s ids at
    every level (no rebuild needed)."""
    if want.nested:
        kids = stored_children(stored.type)
        if len(kids) != len(want.children):
            return False
        plain = (pa.types.is_struct(stored.type) if want.type == STRUCT else
                 pa.types.is_list(stored.type) if want.type == LIST else
                 pa.types.is_map(stored.type))
        return plain and all(
            field_id_of(k) == c.id and k.name == c.name and k.nullable == c.nullable
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
    kids = {field_id_of(k): (i, k) for i, k in enumerate(stored_children(stored.type))}
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
