"""Delta column mapping for the export: each caslake field's Delta ``physicalName``.

caslake data files carry each column's field id, but name it as the column was
named when the file was written: after a rename, older files still use the old
name; after a drop and an add of the same name, older files hold the dropped
column under that name.  Delta readers resolve a column by its
``delta.columnMapping.physicalName`` -- deltalake 1.6.6 and DuckDB's
``delta_scan`` do so in mode ``id`` too, ignoring Parquet field ids (a physical
name no file uses reads as NULL in both modes) -- so the export uses mode
``name`` with, per field, the one Parquet name its live files store it under.

The same holds at every depth: Delta column mapping gives every struct field
(a top-level column, a field of a struct, of a struct inside a list element or
a map value) its own id and physical name, and a reader resolves each level by
physical name, so a nested field renamed after files were written keeps the
name its files use.  List elements and map keys and values have no name of
their own in Delta; readers take them from the Parquet LIST and MAP structure.

Owns: reading a data file's Parquet names by field id, each with the id of the
struct it lies in (from its footer, or from the ``caslake.columns`` tag an
earlier export put on the file's ``add``), the field ids of a file's Parquet
leaf columns, and choosing the physical names.  A field whose live files use
different names, or whose name another field of the same struct holds in a
live file, cannot be shown right by a name-matching reader: refused with
:class:`ExportColumnsDiverged` (naming the field's full path) before anything
is written.  Never writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from caslake.core import FooterCache
from caslake.errors import ExportColumnsDiverged
from caslake.format.manifest import DataFile
from caslake.format.schema import LIST, MAP, STRUCT, Field, TableSchema
from caslake.format.schema_evolution import field_id_of, stored_children
from caslake.store.base import ObjectStore

MODE = "name"
COLUMNS_TAG = "caslake.columns"  # add.tags: the file's Parquet names by field id
TOP = 0  # the parent id of a top-level column
ID_KEY = "delta.columnMapping.id"
PHYSICAL_KEY = "delta.columnMapping.physicalName"

# field id -> (id of the struct node it is a field of, or TOP; its Parquet name)
Columns = dict[int, tuple[int, str]]


def _nested_columns(t: pa.DataType, node: int, out: Columns) -> None:
    """The struct fields below a node of id ``node`` (a struct's own fields; through a
    list element or map key/value, the fields of the struct they hold)."""
    struct_ = pa.types.is_struct(t)
    for child in stored_children(t):
        cid = field_id_of(child)
        if cid is None:
            continue  # no id: nothing below it can be matched
        if struct_:
            out[cid] = (node, child.name)
        _nested_columns(child.type, cid, out)


def file_columns(store: ObjectStore, footers: FooterCache, f: DataFile,
                 schema: TableSchema) -> Columns:
    """The Parquet name of each struct field (at any depth) data file ``f`` stores,
    by field id, with the id of the struct it is a field of (a top-level column
    without a field id, from a table written before ids were checked, belongs to
    the column of that name)."""
    arrow = footers.get(store, f).metadata.schema.to_arrow_schema()
    out: Columns = {}
    for col in arrow:
        fid = field_id_of(col)
        if fid is None:
            hit = schema.find(col.name)
            if hit is not None:
                out.setdefault(hit.id, (TOP, col.name))
            continue
        out[fid] = (TOP, col.name)
        _nested_columns(col.type, fid, out)
    return out


def leaf_ids(arrow: pa.Schema, schema: TableSchema) -> list[int | None]:
    """The field id of each Parquet leaf column of a file with Arrow schema ``arrow``,
    in the footer's column order (the primitive leaves, depth first); a top-level
    column without a field id (written before ids were checked) belongs to the
    column of that name."""
    out: list[int | None] = []

    def visit(f: pa.Field[Any]) -> None:
        kids = stored_children(f.type)
        if not kids:
            out.append(field_id_of(f))
        for k in kids:
            visit(k)

    for col in arrow:
        if not stored_children(col.type) and field_id_of(col) is None:
            hit = schema.find(col.name)
            out.append(hit.id if hit is not None else None)
        else:
            visit(col)
    return out


def encode_columns(columns: Columns) -> str:
    """A top-level column as ``"id": "name"`` (as exports before nesting wrote it),
    a nested field as ``"id": ["name", parent id]``."""
    doc = {str(k): name if parent == TOP else [name, parent]
           for k, (parent, name) in sorted(columns.items())}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def decode_columns(tag: str | None) -> Columns | None:
    if not tag:
        return None
    try:
        doc = json.loads(tag)
        out: Columns = {}
        for k, v in doc.items():
            if isinstance(v, str):
                out[int(k)] = (TOP, v)
            else:
                name, parent = v
                out[int(k)] = (int(parent), str(name))
        return out
    except (ValueError, AttributeError, TypeError):
        return None  # not ours: read the footer instead


def mapped_fields(schema: TableSchema) -> Iterator[tuple[int, str, Field]]:
    """``(parent id, path, field)`` of every field Delta column mapping names: the
    columns and, at any depth, the fields of every struct."""
    def below(f: Field, path: str) -> Iterator[tuple[int, str, Field]]:
        for c in f.children:
            cpath = f"{path}.{c.name}"
            if f.type == STRUCT:
                yield f.id, cpath, c
            if c.type in (STRUCT, LIST, MAP):
                yield from below(c, cpath)

    for f in schema.fields:
        yield TOP, f.name, f
        yield from below(f, f.name)


def physical_from_schema(schema: Mapping[str, Any]) -> dict[int, str]:
    """Field id -> physical name of every struct field, at any depth, of a Delta
    schemaString object."""
    out: dict[int, str] = {}

    def visit(t: Any) -> None:
        if not isinstance(t, dict):
            return
        for f in t.get("fields", []) if t.get("type") == "struct" else []:
            meta = f.get("metadata") or {}
            if ID_KEY in meta and PHYSICAL_KEY in meta:
                out[int(meta[ID_KEY])] = str(meta[PHYSICAL_KEY])
            visit(f.get("type"))
        for key in ("elementType", "keyType", "valueType"):
            visit(t.get(key))

    visit(dict(schema))
    return out


def physical_names(schema: TableSchema, files: Mapping[str, Columns],
                   previous: Mapping[int, str]) -> dict[int, str]:
    """Field id -> Delta physical name for every struct field of ``schema`` (at any
    depth), given the Parquet names (field id -> parent id, name) of every live
    file.  A field no live file stores keeps its ``previous`` physical name if still
    free in its struct, else takes its own name, else a fresh one.  Raises
    ExportColumnsDiverged (see the module docstring)."""
    holders: dict[tuple[int, str], dict[int, list[str]]] = {}  # (parent, name) -> id -> files
    names_of: dict[int, set[str]] = {}
    for path, cols in files.items():
        for fid, (parent, name) in cols.items():
            holders.setdefault((parent, name), {}).setdefault(fid, []).append(path)
            names_of.setdefault(fid, set()).add(name)
    out: dict[int, str] = {}
    taken_in: dict[int, set[str]] = {}  # parent -> physical names given so far
    for parent, where, f in mapped_fields(schema):
        used = sorted(names_of.get(f.id, ()))
        if len(used) > 1:
            by_name = {n: holders[(parent, n)][f.id][:2] for n in used
                       if f.id in holders.get((parent, n), {})}
            raise ExportColumnsDiverged(
                f"column {where!r} (field id {f.id}) is stored as "
                + ", ".join(f"{n!r} in {', '.join(p)}" for n, p in by_name.items())
                + ": Delta readers match columns by one physical name, so the Delta export "
                "cannot show it; rewrite the older files (compact) or export to Iceberg",
                column=where, type=f.type, files=[p for ps in by_name.values() for p in ps])
        given = taken_in.setdefault(parent, set())
        if used:
            name = used[0]
        else:
            taken = {n for (p, n) in holders if p == parent} | given
            name = next(c for c in _candidates(f.name, f.id, previous.get(f.id))
                        if c not in taken)
        others = {fid: ps for fid, ps in holders.get((parent, name), {}).items()
                  if fid != f.id}
        if others:
            files_ = [p for ps in others.values() for p in ps][:3]
            raise ExportColumnsDiverged(
                f"column {where!r} (field id {f.id}) is stored as {name!r}, and "
                f"{', '.join(files_)} hold{'s' if len(files_) == 1 else ''} another column "
                f"(field id {', '.join(map(str, sorted(others)))}, dropped or renamed) under "
                "that name: a Delta reader would read it as this column; rewrite those "
                "files (compact) or export to Iceberg",
                column=where, type=f.type, files=files_)
        out[f.id] = name
        given.add(name)
    return out


def _candidates(name: str, fid: int, previous: str | None) -> list[str]:
    first = [previous] if previous else []
    return [*first, name, f"{name}_{fid}", *(f"col-{fid}-{k}" for k in range(1, 1000))]
