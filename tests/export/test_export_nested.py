"""Nested columns through the Iceberg and Delta exports (issue 29).

A table with structs in structs, a list of structs holding a map, a list of
strings, a map, a list of lists and a ``date64``, with NULL at every level
(NULL struct, NULL field, NULL and empty list, NULL element, NULL and empty map,
NULL map value), exported after appends, a one-row delete (a tombstone) and a
range delete, and after nested renames: pyiceberg, DuckDB ``iceberg_scan``,
deltalake and DuckDB ``delta_scan`` read exactly the rows of the original
pyarrow data (minus the deleted ones) and of ``caslake scan``.  The metadata
carries caslake's field id at every level, checked through pyiceberg's and
deltalake's own parsing of it.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.errors import ExportColumnsDiverged
from tests.export.readers import duck

ITEM = pa.struct([pa.field("price", pa.decimal128(10, 2)), pa.field("qty", pa.int32()),
                  pa.field("attrs", pa.map_(pa.string(), pa.int64()))])
SCHEMA = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("payload", pa.struct([
        pa.field("device", pa.struct([pa.field("os", pa.string()),
                                      pa.field("ver", pa.int32())])),
        pa.field("items", pa.list_(ITEM)),
        pa.field("seen", pa.timestamp("us", tz="UTC")),
    ])),
    pa.field("tags", pa.large_list(pa.string())),  # an Arrow encoding: stored as a list
    pa.field("scores", pa.map_(pa.string(), pa.float64())),
    pa.field("matrix", pa.list_(pa.list_(pa.int32()))),
    pa.field("day", pa.date64()),
])


def _items(i: int) -> list[Any] | None:
    if i % 6 == 4:
        return None
    if i % 6 == 5:
        return []
    attrs: list[tuple[str, int | None]] | None = (
        None if i % 3 == 0 else [] if i % 3 == 1 else [("k", i), ("z", None)])
    first = {"price": Decimal(i * 101) / 100, "qty": None if i % 4 == 1 else i % 9,
             "attrs": attrs}
    return [first, None if i % 4 == 0 else {"price": None, "qty": 1, "attrs": [("a", 1)]}]


def row(i: int, tag: str = "") -> dict[str, Any]:
    """Row ``i``: NULL at a different level for different i."""
    device = None if i % 7 == 2 else {"os": None if i % 5 == 1 else f"{tag}os-{i % 4}",
                                      "ver": i * 3}
    payload = None if i % 11 == 3 else {
        "device": device, "items": _items(i),
        "seen": dt.datetime(2024, 2, 29, tzinfo=dt.UTC) + dt.timedelta(seconds=i * 61)}
    return {
        "id": i, "payload": payload,
        "tags": None if i % 9 == 1 else [] if i % 9 == 2 else [f"t{i}", None if i % 2 else "x"],
        "scores": None if i % 8 == 3 else [] if i % 8 == 4 else
        [("a", i * 0.5), ("b", None if i % 3 else 1.0)],
        "matrix": None if i % 10 == 7 else [[i, None], [], None] if i % 2 else [[i]],
        "day": None if i % 13 == 5 else dt.date(1969, 12, 1) + dt.timedelta(days=i),
    }


def rows(lo: int, hi: int, tag: str = "", schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.Table.from_pylist([row(i, tag) for i in range(lo, hi)], schema=schema)


def norm(v: Any) -> Any:
    """A reader's Python value in one comparable form: maps as lists of pairs,
    timestamps in UTC, UUIDs as text."""
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [norm(x) for x in v]
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC)
    if isinstance(v, uuid.UUID):
        return str(v)
    return v


def pylist(table: pa.Table) -> list[dict[str, Any]]:
    return sorted((norm(r) for r in table.to_pylist()), key=lambda r: r["id"])


def _copy(want: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def deep(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: deep(x) for k, x in v.items()}
        if isinstance(v, list):
            return [deep(x) for x in v]
        return v
    return [deep(r) for r in want]


def pyiceberg_expected(want: list[dict[str, Any]], lists_of_structs: list[str]
                       ) -> list[dict[str, Any]]:
    out = _copy(want)
    for r in out:
        for path in lists_of_structs:
            *parents, leaf = path.split(".")
            node: Any = r
            for p in parents:
                node = node.get(p) if isinstance(node, dict) else None
            if isinstance(node, dict) and node.get(leaf) is None:
                node[leaf] = []
    return out


def read_pyiceberg(location: str, row_filter: str | None = None) -> list[dict[str, Any]]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(location)
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    return pylist(scan.to_arrow())


def read_duck_iceberg(location: str, where: str = "") -> list[dict[str, Any]]:
    sql = f"SELECT * FROM iceberg_scan('{location}') {where}"
    return pylist(duck(("avro", "iceberg")).execute(sql).fetch_arrow_table())


def read_deltalake(root: Path, where: str = "") -> list[dict[str, Any]]:
    from deltalake import DeltaTable, QueryBuilder

    result: Any = QueryBuilder().register("t", DeltaTable(str(root))).execute(
        f"SELECT * FROM t {where}")
    return pylist(pa.table(result))


def read_duck_delta(root: Path, where: str = "") -> list[dict[str, Any]]:
    sql = f"SELECT * FROM delta_scan('{root}') {where}"
    return pylist(duck(("delta",)).execute(sql).fetch_arrow_table())


def check_readers(t: Table, root: Path, want: list[dict[str, Any]], where: str, *,
                  delta: bool = True, lists_of_structs: tuple[str, ...] = ("payload.items",)
                  ) -> None:
    """Every reader, and caslake's own scan, shows exactly ``want`` (the pyarrow
    rows the table should hold)."""
    assert pylist(t.scan().to_arrow()) == want, f"caslake scan, {where}"
    ir = t.export_iceberg()
    readers: list[tuple[str, Callable[[], list[dict[str, Any]]], list[dict[str, Any]]]] = [
        ("pyiceberg", lambda: read_pyiceberg(ir.location),
         pyiceberg_expected(want, list(lists_of_structs))),
        ("duckdb iceberg", lambda: read_duck_iceberg(ir.location), want)]
    if delta:
        t.export_delta()
        readers += [("deltalake", lambda: read_deltalake(root), want),
                    ("duckdb delta", lambda: read_duck_delta(root), want)]
    for name, read, expected in readers:
        got = read()
        assert len(got) == len(expected), f"{name}, {where}: {len(got)} rows"
        for g, w in zip(got, expected, strict=True):
            assert g == w, f"{name}, {where}: row {w['id']} reads\n{g}\nwant\n{w}"


def expected(data: pa.Table, deleted: set[int]) -> list[dict[str, Any]]:
    return [r for r in pylist(data) if r["id"] not in deleted]


def test_nested_values_read_the_same_in_every_reader_with_deletes(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = caslake.create_table(str(root), SCHEMA)
    data = rows(0, 40)
    t.append(data)
    check_readers(t, root, expected(data, set()), "one append")
    more = rows(40, 80)
    t.append(more)
    everything = pa.concat_tables([data, more])
    t.delete("id = 7")  # one tombstone: one position per file
    check_readers(t, root, expected(everything, {7}), "after a one-row delete")
    t.delete("id BETWEEN 50 AND 60")
    check_readers(t, root, expected(everything, {7, *range(50, 61)}), "after a range delete")


def _ids(t: Table) -> dict[str, int]:
    return {path: f.id for path, f in t.context.refresh().manifest.schema.walk()}


def test_metadata_carries_caslake_field_ids_at_every_level(tmp_path: Path) -> None:
    """pyiceberg's and deltalake's parsing of the exported metadata finds each
    nested field (and Iceberg each list element, map key and value) under
    caslake's field id."""
    from deltalake import DeltaTable
    from pyiceberg.table import StaticTable

    root = tmp_path / "t"
    t = caslake.create_table(str(root), SCHEMA)
    t.append(rows(0, 5))
    ids = _ids(t)
    ir = t.export_iceberg()
    ice = StaticTable.from_metadata(ir.location).schema()
    for path, fid in ids.items():
        assert ice.find_field(path).field_id == fid, path
    items = ice.find_field("payload.items").field_type
    assert items.element_id == ids["payload.items.element"]  # type: ignore[attr-defined]
    assert items.element_required is False  # type: ignore[attr-defined]
    attrs = ice.find_field("payload.items.element.attrs").field_type
    assert (attrs.key_id, attrs.value_id) == (  # type: ignore[attr-defined]
        ids["payload.items.element.attrs.key"], ids["payload.items.element.attrs.value"])
    t.export_delta()
    schema = json.loads(DeltaTable(str(root)).schema().to_json())
    mapped: dict[str, tuple[int, str]] = {}

    def walk(typ: Any, prefix: str) -> None:
        if not isinstance(typ, dict):
            return
        if typ["type"] == "struct":
            for f in typ["fields"]:
                path = f"{prefix}.{f['name']}" if prefix else f["name"]
                meta = f["metadata"]
                mapped[path] = (meta["delta.columnMapping.id"],
                                meta["delta.columnMapping.physicalName"])
                walk(f["type"], path)
        elif typ["type"] == "array":
            assert typ["containsNull"] is True
            walk(typ["elementType"], f"{prefix}.element")
        elif typ["type"] == "map":
            assert typ["valueContainsNull"] is True
            walk(typ["keyType"], f"{prefix}.key")
            walk(typ["valueType"], f"{prefix}.value")

    walk(schema, "")
    struct_fields = {p for p in ids if not p.endswith((".element", ".key", ".value"))}
    assert set(mapped) == struct_fields
    for path, (fid, physical) in mapped.items():
        assert fid == ids[path] and physical == path.rsplit(".", 1)[-1], path


def test_filters_on_nested_fields_skip_no_matching_file(tmp_path: Path) -> None:
    """Statistics are keyed by leaf field ids: filters on a top-level column and on
    fields inside structs return exactly the matching rows in every reader (a bound
    under the wrong id would skip a file holding matches)."""
    root = tmp_path / "t"
    t = caslake.create_table(str(root), SCHEMA)
    batches = [rows(k * 10, k * 10 + 10) for k in range(4)]
    for b in batches:
        t.append(b)
    t.delete("id = 12")
    ir = t.export_iceberg()
    t.export_delta()
    every = expected(pa.concat_tables(batches), {12})
    cases = [  # (pyiceberg filter, SQL where, python predicate)
        ("id = 25", "WHERE id = 25", lambda r: r["id"] == 25),
        ("payload.device.ver > 90", "WHERE payload.device.ver > 90",
         lambda r: ((r["payload"] or {}).get("device") or {}).get("ver", -1) > 90),
        ("payload.device.os = 'os-1'", "WHERE payload.device.os = 'os-1'",
         lambda r: ((r["payload"] or {}).get("device") or {}).get("os") == "os-1"),
    ]
    for ice_filter, where, pred in cases:
        want = [r for r in every if pred(r)]
        assert want, ice_filter
        assert read_pyiceberg(ir.location, ice_filter) == pyiceberg_expected(
            want, ["payload.items"]), f"pyiceberg {ice_filter}"
        assert read_duck_iceberg(ir.location, where) == want, f"duckdb iceberg {where}"
        assert read_duck_delta(root, where) == want, f"duckdb delta {where}"
        dl_where = where.replace("payload.device.ver", "payload['device']['ver']").replace(
            "payload.device.os", "payload['device']['os']")
        assert read_deltalake(root, dl_where) == want, f"deltalake {dl_where}"


def _renamed(want: list[dict[str, Any]], top: str = "payload") -> list[dict[str, Any]]:
    """Rows as read after payload.device.os -> platform and
    payload.items.element.qty -> count, with the struct column named ``top``."""
    out = []
    for r in _copy(want):
        body = r.pop("payload")
        if body is not None:
            if body["device"] is not None:
                body["device"] = {"platform": body["device"]["os"],
                                  "ver": body["device"]["ver"]}
            if body["items"] is not None:
                body["items"] = [None if x is None else
                                 {"price": x["price"], "count": x["qty"], "attrs": x["attrs"]}
                                 for x in body["items"]]
        out.append({"id": r["id"], top: body, **{k: v for k, v in r.items() if k != "id"}})
    return out


def test_exports_read_right_after_nested_renames(tmp_path: Path) -> None:
    """Renamed fields inside a struct (and inside the struct a list holds), then the
    renamed struct column itself, keep their values in every reader.  Files written
    after a rename store the new names: Iceberg (by field id) reads them all; Delta
    (by physical name) refuses, naming the field's full path and writing nothing,
    until a compaction rewrites the older files, then reads right again."""
    root = tmp_path / "t"
    t = caslake.create_table(str(root), SCHEMA)
    data = rows(0, 30)
    t.append(data)
    t.delete("id = 4")
    t.export_delta()
    (t.update_schema().rename_column("payload.device.os", "platform")
     .rename_column("payload.items.element.qty", "count").commit())
    want = _renamed(expected(data, {4}))
    check_readers(t, root, want, "after nested renames, old files only")
    new_schema = pa.schema([pa.field(f.name, f.type) for f in t.schema])
    later = pa.Table.from_pylist(_renamed(rows(30, 40, "n").to_pylist()), schema=new_schema)
    t.append(later)
    want = want + pylist(later)
    check_readers(t, root, want, "files before and after the renames", delta=False)
    log = sorted(p.name for p in (root / "_delta_log").iterdir())
    with pytest.raises(ExportColumnsDiverged) as err:
        t.export_delta()
    assert err.value.column in ("payload.device.platform", "payload.items.element.count")
    assert err.value.column in str(err.value) and err.value.files
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == log
    t.compact(target_file_size=1 << 30, deleted_fraction=0.01)
    check_readers(t, root, want, "after a compaction rewrote every file")
    t.update_schema().rename_column("payload", "body").commit()
    want = [{("body" if k == "payload" else k): v for k, v in r.items()} for r in want]
    check_readers(t, root, want, "after renaming the struct column",
                  lists_of_structs=("body.items",))
