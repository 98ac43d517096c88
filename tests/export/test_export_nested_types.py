"""Issue 29's newer primitive types, and the metrics of nested files, in the exports.

Iceberg holds ``time`` (microseconds), ``uuid``, ``fixed[n]``, ``date`` (from
``date64``) and ``decimal(p, s)`` up to 38 digits (from any decimal width), also
inside structs, lists and maps; Delta holds the dates and decimals.  What a
format cannot hold is refused with ExportUnsupportedType naming the field's full
dotted path, before anything is written.  Iceberg manifests give column sizes
for every leaf and null counts only for leaves outside lists and maps, keyed by
field id, as pyiceberg computes them from the same Parquet footers.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import caslake
from caslake.errors import ExportUnsupportedType
from caslake.store import ObjectStore
from tests.export.test_export_nested import (
    SCHEMA,
    pylist,
    read_deltalake,
    read_duck_delta,
    read_duck_iceberg,
    read_pyiceberg,
    rows,
)

U = [uuid.UUID(int=k * 0x1234567890ABCDEF + 7) for k in range(40)]
ICEBERG_ONLY = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("s", pa.struct([pa.field("t", pa.time64("us")), pa.field("u", pa.uuid()),
                             pa.field("fx", pa.binary(4)), pa.field("d", pa.date64()),
                             pa.field("dec", pa.decimal128(38, 10))])),
    pa.field("us", pa.list_(pa.uuid())),
    pa.field("fm", pa.map_(pa.string(), pa.binary(2))),
])


def iceberg_only_rows(lo: int, hi: int) -> pa.Table:
    out = []
    for i in range(lo, hi):
        s = None if i % 7 == 3 else {
            "t": None if i % 5 == 1 else dt.time(i % 24, i % 60, 0, i * 17 % 1_000_000),
            "u": None if i % 4 == 2 else U[i % 40].bytes,
            "fx": None if i % 6 == 0 else bytes([i % 256, 1, 2, 3]),
            "d": None if i % 9 == 4 else dt.date(1960, 1, 1) + dt.timedelta(days=i * 400),
            "dec": None if i % 8 == 5 else Decimal(f"{i}2345678901234567890123456.7890123456"),
        }
        out.append({"id": i, "s": s,
                    "us": None if i % 10 == 6 else [U[i % 40].bytes, None],
                    "fm": None if i % 11 == 2 else [("k", bytes([i % 256, 9])), ("n", None)]})
    return pa.Table.from_pylist(out, schema=_storage(ICEBERG_ONLY)).cast(ICEBERG_ONLY)


def _storage(schema: pa.Schema) -> pa.Schema:
    """``schema`` with uuid as its storage type (pyarrow builds no extension type
    from Python values)."""
    def plain(t: pa.DataType) -> pa.DataType:
        if isinstance(t, pa.BaseExtensionType):
            return t.storage_type
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(plain(f.type)) for f in t])
        if pa.types.is_list(t):
            return pa.list_(t.value_field.with_type(plain(t.value_type)))
        return t
    return pa.schema([f.with_type(plain(f.type)) for f in schema])


def test_iceberg_holds_time_uuid_fixed_date64_and_wide_decimals(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), ICEBERG_ONLY)
    data = pa.concat_tables([iceberg_only_rows(0, 20), iceberg_only_rows(20, 40)])
    t.append(data.slice(0, 20))
    t.append(data.slice(20))
    t.delete("id = 13")
    want = [r for r in pylist(data) if r["id"] != 13]
    assert pylist(t.scan().to_arrow()) == want
    ir = t.export_iceberg()
    meta = json.loads(Path(ir.location.removeprefix("file://")).read_text())
    (schema,) = meta["schemas"]
    s_type = schema["fields"][1]["type"]
    assert [f["type"] for f in s_type["fields"]] == [
        "time", "uuid", "fixed[4]", "date", "decimal(38, 10)"]
    assert schema["fields"][2]["type"]["element"] == "uuid"
    assert schema["fields"][3]["type"]["value"] == "fixed[2]"
    assert read_pyiceberg(ir.location) == want
    assert read_duck_iceberg(ir.location) == want
    with pytest.raises(ExportUnsupportedType) as err:
        t.export_delta()
    assert err.value.column == "s.t" and err.value.target == "Delta"


DECIMALS = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("s", pa.struct([pa.field("d32", pa.decimal32(7, 2)),
                             pa.field("d64", pa.decimal64(15, 3)),
                             pa.field("d256", pa.decimal256(38, 5))])),
    pa.field("days", pa.list_(pa.date64())),
])


def test_decimals_of_every_width_and_date64_in_both_formats(tmp_path: Path) -> None:
    """decimal32/64/256 up to 38 digits are decimal(p, s), date64 is a date, in both
    formats.  pyiceberg 0.12.0 is left out: it refuses a Parquet file whose Arrow
    schema says decimal32/64/256 ('Unsupported type: decimal64(15, 3)'), before
    reading a value."""
    root = tmp_path / "t"
    t = caslake.create_table(str(root), DECIMALS)
    data = pa.Table.from_pylist([
        {"id": i,
         "s": None if i % 5 == 2 else {
             "d32": None if i % 3 == 0 else Decimal(i * 1234) / 100,
             "d64": Decimal(-i * 987654321) / 1000,
             "d256": Decimal(f"{i}12345678901234567890123456789.12345")},
         "days": None if i % 4 == 1 else [dt.date(2000, 2, 29) + dt.timedelta(days=i), None]}
        for i in range(30)], schema=DECIMALS)
    t.append(data)
    t.delete("id = 4")
    want = [r for r in pylist(data) if r["id"] != 4]
    assert pylist(t.scan().to_arrow()) == want
    ir = t.export_iceberg()
    t.export_delta()
    meta = json.loads(Path(ir.location.removeprefix("file://")).read_text())
    s_type = meta["schemas"][0]["fields"][1]["type"]
    assert [f["type"] for f in s_type["fields"]] == [
        "decimal(7, 2)", "decimal(15, 3)", "decimal(38, 5)"]
    assert read_duck_iceberg(ir.location) == want
    assert read_deltalake(root) == want
    assert read_duck_delta(root) == want


def _keys(store: ObjectStore) -> dict[str, str]:
    return {m.key: m.etag for m in store.list("")}


@pytest.mark.parametrize(("arrow_type", "iceberg_ok", "delta_ok"), [
    (pa.float16(), False, False),
    (pa.decimal256(40, 2), False, False),
    (pa.uint32(), False, False),
    (pa.timestamp("ns"), False, False),
    (pa.time64("ns"), False, False),
    (pa.time32("ms"), False, False),
    (pa.time64("us"), True, False),
    (pa.uuid(), True, False),
    (pa.binary(3), True, False),
    (pa.date64(), True, True),
    (pa.decimal64(18, 0), True, True),
])
def test_a_type_a_format_cannot_hold_is_refused_by_its_full_path(
        tmp_path: Path, arrow_type: pa.DataType, iceberg_ok: bool, delta_ok: bool) -> None:
    item = pa.struct([pa.field("price", pa.int64()), pa.field("x", arrow_type)])
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("payload", pa.struct([
        pa.field("items", pa.list_(item))]))])
    t = caslake.create_table(str(tmp_path / "t"), schema)
    t.append(pa.Table.from_pylist([{"id": 1, "payload": {"items": [None]}},
                                   {"id": 2, "payload": None}],
                                  schema=_storage(schema)).cast(schema))
    for export, ok, target in ((t.export_iceberg, iceberg_ok, "Iceberg"),
                               (t.export_delta, delta_ok, "Delta")):
        before = _keys(t.store)
        if ok:
            export()
            continue
        with pytest.raises(ExportUnsupportedType) as err:
            export()
        assert isinstance(err.value, caslake.CaslakeError)
        assert err.value.column == "payload.items.element.x", err.value
        assert "'payload.items.element.x'" in str(err.value) and err.value.target == target
        assert _keys(t.store) == before, f"{target}: the refusal wrote something"


def test_iceberg_metrics_are_keyed_by_leaf_field_ids(tmp_path: Path) -> None:
    """Each data file's column sizes and null counts equal what pyiceberg computes
    from the same Parquet footer by field id: column sizes for every leaf (inside
    lists and maps too), null counts only for leaves outside lists and maps, and no
    metric under the id of a struct, list or map."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.table import StaticTable

    root = tmp_path / "t"
    t = caslake.create_table(str(root), SCHEMA)
    t.append(rows(0, 20))
    t.append(rows(20, 50))
    ir = t.export_iceberg()
    table = StaticTable.from_metadata(ir.location)
    schema = table.schema()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    containers = {f.field_id for f in _walk(schema) if not f.field_type.is_primitive}
    under_repeated = {fid for fid, path in _paths(schema).items()
                      if ".element" in path or ".key" in path or ".value" in path}
    files = [e.data_file for m in snapshot.manifests(table.io)
             for e in m.fetch_manifest_entry(table.io)]
    assert len(files) == 2
    import pyarrow.parquet as pq

    for f in files:
        md = pq.ParquetFile(f.file_path.removeprefix("file://")).metadata
        theirs = data_file_statistics_from_parquet_metadata(
            md, compute_statistics_plan(schema, {}), parquet_path_to_id_mapping(schema))
        assert f.column_sizes == theirs.column_sizes
        assert f.null_value_counts, "no null counts at all"
        for fid, n in f.null_value_counts.items():
            assert fid not in containers and fid not in under_repeated, fid
            assert n == theirs.null_value_counts[fid], fid
        for fid in {*f.value_counts, *f.lower_bounds, *f.upper_bounds}:
            assert fid not in containers and fid not in under_repeated, fid


def _walk(schema: Any) -> list[Any]:
    from pyiceberg.schema import Schema

    assert isinstance(schema, Schema)
    return [schema.find_field(fid) for fid in _paths(schema)]


def _paths(schema: Any) -> dict[int, str]:
    return dict(schema._lazy_id_to_name.items())  # pyiceberg: id -> full dotted name
