"""Schema changes on a table: the ``update_schema()`` builder, and fitting appended data
to an evolved schema.

Owns: turning a builder's queued changes into one ``schema`` commit (the rules
are :func:`caslake.format.schema_evolution.evolve`'s), and :func:`align_input`,
which matches the columns of data to append to the table's fields (by name,
then by field id for renamed columns) and, with ``schema_mode="merge"``, adds
the extra columns in the append's own commit.  Never writes data files.
"""

from __future__ import annotations

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
from caslake.errors import InvalidArgument, InvalidSchemaChange, SchemaMismatch
from caslake.format.schema import TableSchema, type_to_str
from caslake.format.schema_evolution import (
    AddColumn,
    DropColumn,
    MakeNullable,
    RenameColumn,
    SchemaChange,
    WidenColumn,
    evolve,
    map_input_columns,
)
from caslake.ops import refs

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
        evolve(self._base.manifest.schema, [*self._changes, change])  # fail early
        self._changes.append(change)
        return self

    def add_column(self, name: str, type: str | pa.DataType) -> SchemaUpdate:
        """A new nullable column; rows written before read as NULL."""
        return self._queue(AddColumn(name, _type_name(name, type)))

    def rename_column(self, old: str, new: str) -> SchemaUpdate:
        return self._queue(RenameColumn(old, new))

    def drop_column(self, name: str) -> SchemaUpdate:
        return self._queue(DropColumn(name))

    def widen_column(self, name: str, type: str | pa.DataType) -> SchemaUpdate:
        return self._queue(WidenColumn(name, _type_name(name, type)))

    def make_nullable(self, name: str) -> SchemaUpdate:
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

        def prepare(base: Snapshot) -> Changes:
            return Changes(SCHEMA_OPERATION, schema=new,
                           params={"schema_id": str(new.schema_id),
                                   "changes": "; ".join(c.describe() for c in self._changes)})

        return run_operation(ctx, SCHEMA_OPERATION, prepare,
                             requirements=(SchemaUnchanged(planned, exact=True),),
                             started=started)


def _type_name(column: str, type_: object) -> str:
    try:
        if isinstance(type_, pa.DataType):
            return type_to_str(type_)
    except InvalidArgument as e:
        raise InvalidSchemaChange(f"column {column!r}: {e}", column=column) from None
    if not isinstance(type_, str):
        raise InvalidSchemaChange(f"column {column!r}: a type is a string such as 'int64' or "
                                  f"a pyarrow type, not {type_!r}", column=column)
    return type_


def align_input(reader: pa.RecordBatchReader, schema: TableSchema, schema_mode: Any
                ) -> tuple[pa.RecordBatchReader, TableSchema | None]:
    """Fit data to append to the table schema: columns match fields by name, and a
    column whose name the table no longer has matches by the field id it carries
    (data read before a rename).  Columns that match nothing are refused
    (SchemaMismatch naming all of them) unless ``schema_mode="merge"``, which adds
    them as nullable columns: the returned schema is then the one to write and
    commit (None: unchanged)."""
    if schema_mode not in SCHEMA_MODES:
        raise InvalidArgument(f"schema_mode must be 'strict' or 'merge', not {schema_mode!r}")
    mapping = map_input_columns(reader.schema, schema)
    extras = [f for f in reader.schema if f.name not in mapping]
    new_schema: TableSchema | None = None
    if extras:
        names = ", ".join(repr(f.name) for f in extras)
        if schema_mode != "merge":
            raise SchemaMismatch(
                f"column(s) {names} are not in the table schema (columns: "
                f"{', '.join(schema.names)}); pass schema_mode='merge' to add them",
                column=extras[0].name, actual=str(extras[0].type))
        adds: list[SchemaChange] = []
        for f in extras:
            try:
                adds.append(AddColumn(f.name, type_to_str(f.type)))
            except InvalidArgument as e:
                raise SchemaMismatch(f"column {f.name!r}: {e}", column=f.name,
                                     actual=str(f.type)) from None
        try:
            new_schema = evolve(schema, adds)
        except InvalidSchemaChange as e:
            raise SchemaMismatch(str(e), column=e.column) from None
    renames = {src: fld.name for src, fld in mapping.items() if src != fld.name}
    if not renames:
        return reader, new_schema
    target = pa.schema([pa.field(renames.get(f.name, f.name), f.type, f.nullable)
                        for f in reader.schema])
    batches = (b.rename_columns(target.names) for b in reader)
    return pa.RecordBatchReader.from_batches(target, batches), new_schema


def with_schema(changes: Changes | None, schema: TableSchema | None) -> Changes | None:
    """``changes`` committing ``schema`` too (a merge-mode append)."""
    if changes is None or schema is None:
        return changes
    return replace(changes, schema=schema)
