"""Delta column mapping for the export: each caslake field's Delta ``physicalName``.

caslake data files carry each column's field id, but name it as the column was
named when the file was written: after a rename, older files still use the old
name; after a drop and an add of the same name, older files hold the dropped
column under that name.  Delta readers resolve a column by its
``delta.columnMapping.physicalName`` -- deltalake 1.6.6 and DuckDB's
``delta_scan`` do so in mode ``id`` too, ignoring Parquet field ids (a physical
name no file uses reads as NULL in both modes) -- so the export uses mode
``name`` with, per field, the one Parquet name its live files store it under.

Owns: reading a data file's Parquet names by field id (from its footer, or from
the ``caslake.columns`` tag an earlier export put on the file's ``add``) and
choosing the physical names.  A field whose live files use different names,
or whose name another column of a live file holds, cannot be shown right by a
name-matching reader: refused with :class:`ExportColumnsDiverged` before
anything is written.  Never writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from caslake.core import FooterCache
from caslake.errors import ExportColumnsDiverged
from caslake.format.manifest import DataFile
from caslake.format.schema import FIELD_ID_KEY, TableSchema
from caslake.store.base import ObjectStore

MODE = "name"
COLUMNS_TAG = "caslake.columns"  # add.tags: the file's Parquet column names by field id


def file_columns(store: ObjectStore, footers: FooterCache, f: DataFile,
                 schema: TableSchema) -> dict[int, str]:
    """The Parquet column name of each field id data file ``f`` stores (a column
    without a field id, from a table written before ids were checked, belongs to
    the field of that name)."""
    arrow = footers.get(store, f).metadata.schema.to_arrow_schema()
    out: dict[int, str] = {}
    for col in arrow:
        raw = (col.metadata or {}).get(FIELD_ID_KEY)
        if raw is not None and raw.strip().lstrip(b"-").isdigit():
            out[int(raw)] = col.name
        else:
            hit = schema.find(col.name)
            if hit is not None:
                out.setdefault(hit.id, col.name)
    return out


def encode_columns(columns: Mapping[int, str]) -> str:
    return json.dumps({str(k): v for k, v in sorted(columns.items())}, separators=(",", ":"),
                      ensure_ascii=False)


def decode_columns(tag: str | None) -> dict[int, str] | None:
    if not tag:
        return None
    try:
        doc = json.loads(tag)
        return {int(k): str(v) for k, v in doc.items()}
    except (ValueError, AttributeError):
        return None  # not ours: read the footer instead


def physical_names(schema: TableSchema, files: Mapping[str, Mapping[int, str]],
                   previous: Mapping[int, str]) -> dict[int, str]:
    """Field id -> Delta physical name for ``schema``, given the Parquet names
    (field id -> name) of every live file.  A field no live file stores keeps its
    ``previous`` physical name if still free, else takes its own name, else a fresh
    one.  Raises ExportColumnsDiverged (see the module docstring)."""
    holders: dict[str, dict[int, list[str]]] = {}  # name -> field id -> files
    names_of: dict[int, set[str]] = {}
    for path, cols in files.items():
        for fid, name in cols.items():
            holders.setdefault(name, {}).setdefault(fid, []).append(path)
            names_of.setdefault(fid, set()).add(name)
    out: dict[int, str] = {}
    for f in schema.fields:
        used = sorted(names_of.get(f.id, ()))
        if len(used) > 1:
            by_name = {n: holders[n][f.id][:2] for n in used}
            raise ExportColumnsDiverged(
                f"column {f.name!r} (field id {f.id}) is stored as "
                + ", ".join(f"{n!r} in {', '.join(p)}" for n, p in by_name.items())
                + ": Delta readers match columns by one physical name, so the Delta export "
                "cannot show it; rewrite the older files (compact) or export to Iceberg",
                column=f.name, type=f.type, files=[p for ps in by_name.values() for p in ps])
        if used:
            name = used[0]
        else:
            taken = set(holders) | set(out.values())
            name = next(c for c in _candidates(f.name, f.id, previous.get(f.id))
                        if c not in taken)
        others = {fid: ps for fid, ps in holders.get(name, {}).items() if fid != f.id}
        if others:
            files_ = [p for ps in others.values() for p in ps][:3]
            raise ExportColumnsDiverged(
                f"column {f.name!r} (field id {f.id}) is stored as {name!r}, and "
                f"{', '.join(files_)} hold{'s' if len(files_) == 1 else ''} another column "
                f"(field id {', '.join(map(str, sorted(others)))}, dropped or renamed) under "
                "that name: a Delta reader would read it as this column; rewrite those "
                "files (compact) or export to Iceberg",
                column=f.name, type=f.type, files=files_)
        out[f.id] = name
    return out


def _candidates(name: str, fid: int, previous: str | None) -> list[str]:
    first = [previous] if previous else []
    return [*first, name, f"{name}_{fid}", *(f"col-{fid}-{k}" for k in range(1, 1000))]
