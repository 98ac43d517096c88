"""Schema changes on a table: the ``update_schema()`` builder, and fitting appended data
to an evolved schema.

Owns: turning a builder's queued changes into one ``schema`` commit (the rules
are :func:`caslake.format.schema_evolution.evolve`'s), and :func:`align_input`,
which matches the columns of data to append to the table's fields (by name,
then by field id for renamed columns) and, with ``schema_mode="merge"``, adds
the extra columns in the append's own commit.  Never writes data files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa

from caslake.core import (
    Changes,
    CommitResult,
    SchemaUnchanged,
    Snapshot,
    TableContext,
    run_operation,
)
from caslake.errors import CaslakeError, InvalidArgument, InvalidSchemaChange, SchemaMismatch
from caslake.format.partition import Partitioning
from caslake.format.properties import CLUSTERING_COLUMNS, Clustering, clustering_policy
from caslake.format.schema import LIST, MAP, STRUCT, Field, TableSchema
from caslake.format.schema_evolution import (
    AddColumn,
    DropColumn,
    MakeNullable,
    RenameColumn,
    SchemaChange,
    WidenColumn,
    evolve,
    field_ids_of,
    map_input_columns,
)
from caslake.ops import refs
from caslake.ops.cluster import cluster_fields, column_by_id

# pyarrow-stubs type the nested constructors narrower than pyarrow accepts.
_pa: Any = pa

SCHEMA_OPERATION = "schema"
SCHEMA_MODES = (None, "strict", "merge")


class SchemaUpdate:
    """``table.update_schema().add_column("x", "int64").rename_column("a", "b").commit()``:
    the queued changes are checked as a whole and commit as **one** version with a
    new schema id.  Nothing is written before :meth:`commit`; a bad change raises
    :class:`InvalidSchemaChange` when queued (against the schema as it would be)."""

    def __init__(self, ctx: TableContext) -> None:
        self._ctx = ctx
        self._base = ctx.refresh()
        self._changes: list[SchemaChange] = []

    def _queue(self, change: SchemaChange) -> SchemaUpdate:
        new = evolve(self._base.manifest.schema, [*self._changes, change])  # fail early
        _check_partition_sources(self._base.manifest.partitioning, new, change)
        self._changes.append(change)
        return self

    def add_column(self, name: str, type: str | pa.DataType) -> SchemaUpdate:
        """A new optional column, or a new optional field of a struct when ``name`` is
        a dotted path (``device.os``, ``items.element.price``); rows written before
        read as NULL.  ``type``: a type string in Arrow names (``int64``,
        ``list<string>``, ``struct<os:string,v:int32>``, ``map<string,int64>``) or
        DuckDB / Spark DDL (``bigint``, ``decimal(7,2)``, ``varchar``, ``timestamptz``,
        ``array<struct<a:int>>``, ``integer[]``), or a pyarrow type; an unknown name is
        an InvalidSchemaChange listing the valid ones (caslake.format.type_text)."""
        return self._queue(AddColumn(name, type))

    def rename_column(self, old: str, new: str) -> SchemaUpdate:
        """Rename the column or nested field at ``old`` (a name or a dotted path) to
        ``new`` (for a nested field: its new name, e.g. ``("device.os", "platform")``)."""
        return self._queue(RenameColumn(old, new))

    def drop_column(self, name: str) -> SchemaUpdate:
        """Drop a column, or a struct's field by its dotted path; a field added later
        under the same name never shows the dropped values."""
        return self._queue(DropColumn(name))

    def widen_column(self, name: str, type: str | pa.DataType) -> SchemaUpdate:
        """Widen a primitive column or nested primitive (``tags.element``,
        ``attrs.value``): int to a wider int, float to a wider float, decimal precision."""
        return self._queue(WidenColumn(name, type))

    def make_nullable(self, name: str) -> SchemaUpdate:
        """Let the column or nested field at ``name`` hold NULL."""
        return self._queue(MakeNullable(name))

    def commit(self) -> CommitResult:
        """One commit: the next schema (schema id + 1).  A concurrent schema change
        is a ConcurrentModification; a concurrent append is rebased over."""
        if not self._changes:
            raise InvalidSchemaChange("a schema update needs at least one change")
        ctx = self._ctx
        started = ctx.meter()
        planned = self._base.manifest.schema
        new = evolve(planned, self._changes)
        refs.ensure_format(ctx.io)  # format 2: readers must match columns by field id

        properties = _clustering_after(self._base.manifest.properties, planned, new)

        def prepare(base: Snapshot) -> Changes:
            return Changes(SCHEMA_OPERATION, schema=new, properties=properties,
                           params={"schema_id": str(new.schema_id),
                                   "changes": "; ".join(c.describe() for c in self._changes)})

        return run_operation(ctx, SCHEMA_OPERATION, prepare,
                             requirements=(SchemaUnchanged(planned, exact=True),),
                             started=started)


def _clustering_after(properties: Mapping[str, str], planned: TableSchema,
                      new: TableSchema) -> dict[str, str] | None:
    """The ``clustering.columns`` property under the ``new`` schema: a renamed column
    renamed in it too; a dropped one refused (InvalidSchemaChange naming it, as Delta
    refuses), since every later compaction would fail.  None: nothing to change."""
    clustering = clustering_policy(properties)
    if clustering is None:
        return None
    try:
        columns = cluster_fields(planned, clustering)
    except CaslakeError:
        return None  # already unusable: the schema change neither fixes nor worsens it
    names = []
    for col in columns:
        now = column_by_id(new, col.field.id)
        if now is None:
            raise InvalidSchemaChange(
                f"column {col.name!r} is a clustering column ({CLUSTERING_COLUMNS} = "
                f"{clustering.to_property()!r}); set_properties a clustering without it "
                "first", column=col.name)
        names.append(now.name)
    if names == [c.name for c in columns]:
        return None
    return {CLUSTERING_COLUMNS: Clustering(clustering.kind, tuple(names)).to_property()}


def _check_partition_sources(partitioning: Partitioning | None, new: TableSchema,
                             change: SchemaChange) -> None:
    """A column the default partition spec is computed from cannot be dropped (new
    files could not be partitioned); ``update_spec`` first."""
    if partitioning is None:
        return
    ids = {f.id for f in new.fields}
    for pf in partitioning.default.fields:
        if pf.source_id not in ids:
            raise InvalidSchemaChange(
                f"{change.describe()}: the partition field {pf.name!r} is computed from this "
                "column; change the partition spec (update_spec) first",
                column=getattr(change, "name", None))


def align_input(reader: pa.RecordBatchReader, schema: TableSchema, schema_mode: Any
                ) -> tuple[pa.RecordBatchReader, TableSchema | None]:
    """Fit data to append to the table schema: columns match fields by name, and a
    column whose name the table no longer has matches by the field id it carries
    (data read before a rename); so do the fields of a struct at any depth.
    Columns and struct fields that match nothing are refused (SchemaMismatch naming
    all of them by path) unless ``schema_mode="merge"``, which adds them as optional
    fields: the returned schema is then the one to write and commit (None:
    unchanged)."""
    if schema_mode not in SCHEMA_MODES:
        raise InvalidArgument(f"schema_mode must be 'strict' or 'merge', not {schema_mode!r}")
    mapping = map_input_columns(reader.schema, schema)
    extras = [(f.name, f) for f in reader.schema if f.name not in mapping]
    for f in reader.schema:
        if f.name in mapping:
            extras.extend(_nested_extras(f.type, mapping[f.name], mapping[f.name].name))
    new_schema = _merged(schema, extras, schema_mode) if extras else None
    target = pa.schema([
        pa.field(mapping[f.name].name, _renamed(f.type, mapping[f.name]), f.nullable)
        if f.name in mapping else f for f in reader.schema])
    if target.equals(reader.schema):
        return reader, new_schema
    batches = (pa.RecordBatch.from_arrays(
        [c if c.type == t.type else c.view(t.type) for c, t in zip(b.columns, target,
                                                                    strict=True)],
        schema=target) for b in reader)
    return pa.RecordBatchReader.from_batches(target, batches), new_schema


def _merged(schema: TableSchema, extras: list[tuple[str, pa.Field[Any]]],
            schema_mode: Any) -> TableSchema:
    """``schema`` with the input's extra columns and struct fields (by path) added, or
    the SchemaMismatch of a strict append naming every one."""
    path, first = extras[0]
    if schema_mode != "merge":
        names = ", ".join(repr(p) for p, _ in extras)
        raise SchemaMismatch(
            f"column(s) {names} are not in the table schema (columns: "
            f"{', '.join(schema.names)}); pass schema_mode='merge' to add them",
            column=path, actual=str(first.type))
    try:
        return evolve(schema, [AddColumn(p, f.type) for p, f in extras])
    except InvalidSchemaChange as e:
        raise SchemaMismatch(str(e), column=e.column) from None


def _struct_of(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _input_children(t: pa.DataType, field: Field) -> list[tuple[pa.Field[Any], Field | None]]:
    """The input's nested fields of ``t`` beside the table's nested fields of ``field``:
    a struct's by name, then by the field id the input carries (a field renamed since
    the data was read, unless its new name is in the input too); a list's element; a
    map's key and value.  Empty when the shapes differ (the append's conform says so)."""
    t = _struct_of(t)
    if field.type == STRUCT and pa.types.is_struct(t):
        by_id = {c.id: c for c in field.children}
        names = {c.name for c in t}
        out: list[tuple[pa.Field[Any], Field | None]] = []
        for child, fid in zip(t, field_ids_of(pa.schema(list(t))), strict=True):
            hit = field.child(child.name)
            if hit is None and fid is not None:
                cand = by_id.get(fid)
                hit = cand if cand is not None and cand.name not in names else None
            out.append((child, hit))
        return out
    if field.type == LIST and (pa.types.is_list(t) or pa.types.is_large_list(t)
                               or pa.types.is_fixed_size_list(t)):
        return [(t.value_field, field.children[0])]
    if field.type == MAP and pa.types.is_map(t):
        return [(t.key_field, field.children[0]), (t.item_field, field.children[1])]
    return []


def _nested_extras(t: pa.DataType, field: Field, path: str) -> list[tuple[str, pa.Field[Any]]]:
    """The input's struct fields (path, Arrow field) at any depth inside ``t`` that
    ``field`` lacks."""
    out: list[tuple[str, pa.Field[Any]]] = []
    for child, hit in _input_children(t, field):
        if hit is None:
            out.append((f"{path}.{child.name}", child))
        else:
            out.extend(_nested_extras(child.type, hit, f"{path}.{hit.name}"))
    return out


def _renamed(t: pa.DataType, field: Field) -> pa.DataType:
    """``t`` with each struct field matched by id under its table name (an extra one
    keeps its own); the same layout, so a column of ``t`` views as it."""
    kids = _input_children(t, field)
    if not kids or not any(hit is not None for _, hit in kids):
        return t
    if pa.types.is_struct(t):
        return pa.struct([c.with_type(_renamed(c.type, hit)).with_name(hit.name)
                          if hit is not None else c for c, hit in kids])
    if pa.types.is_map(t):
        (k, kf), (v, vf) = kids
        assert kf is not None and vf is not None
        out: pa.DataType = _pa.map_(k.with_type(_renamed(k.type, kf)),
                                    v.with_type(_renamed(v.type, vf)),
                                    keys_sorted=t.keys_sorted)
        return out
    (e, ef), = kids
    assert ef is not None
    item = e.with_type(_renamed(e.type, ef))
    if pa.types.is_large_list(t):
        return pa.large_list(item)
    fixed: pa.DataType = (pa.list_(item, t.list_size) if pa.types.is_fixed_size_list(t)
                          else pa.list_(item))
    return fixed


def with_schema(changes: Changes | None, schema: TableSchema | None) -> Changes | None:
    """``changes`` committing ``schema`` too (a merge-mode append)."""
    if changes is None or schema is None:
        return changes
    return replace(changes, schema=schema)
