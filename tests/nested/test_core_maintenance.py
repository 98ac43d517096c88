"""Deletes, upserts, compaction and purge on tables that also hold list, struct
and map columns: the live rows equal pyarrow's filter of the same data, and the
files purge splices read equal in pyarrow and DuckDB."""

from __future__ import annotations

import uuid

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import caslake
from caslake.core import WriteOptions
from tests.nested.core_data import SCHEMA, duck, nested_rows

SMALL = WriteOptions(target_file_size=16 * 1024, row_group_size=2 * 1024)


def _table(tmp: str) -> caslake.Table:
    return caslake.create_table(tmp, SCHEMA, write_options=SMALL)


def _rows(t: caslake.Table) -> list[dict[str, object]]:
    return t.scan().to_arrow().sort_by("id").to_pylist()


def _keep(data: pa.Table, lo: int, hi: int) -> pa.Table:
    """``data`` without ids in [lo, hi]."""
    return data.filter(pc.invert(pc.and_(pc.greater_equal(data["id"], lo),
                                         pc.less_equal(data["id"], hi))))


def test_delete_upsert_and_compact_with_nested_columns(tmp_path: object) -> None:
    t = _table(f"memory://{uuid.uuid4().hex}")
    data = nested_rows(0, 600)
    t.append(data.slice(0, 300))
    t.append(data.slice(300))
    t.delete("id between 100 and 149")
    want = _keep(data, 100, 149)
    assert _rows(t) == want.sort_by("id").to_pylist()
    # upsert by the top-level key: 20 rows changed (new nested values), 10 new
    new = nested_rows(590, 30)
    changed = new.set_column(new.schema.get_field_index("tags"), "tags",
                             pa.array([["changed"]] * 30, pa.list_(pa.string())))
    t.upsert(changed, key="id")
    want = pa.concat_tables([_keep(want, 590, 619), changed])
    assert _rows(t) == want.sort_by("id").to_pylist()
    before = len(t.live_files())
    t.compact(target_file_size=1 << 20, deleted_fraction=0.01)
    assert len(t.live_files()) < before
    assert _rows(t) == want.sort_by("id").to_pylist()
    assert duck("select id, tags, dev.geo.lat, items[1].price, attrs from s order by id",
                s=t.scan()) == duck(
        "select id, tags, dev.geo.lat, items[1].price, attrs from w order by id", w=want)


def test_purge_splices_files_that_pyarrow_and_duckdb_read(tmp_path: object) -> None:
    root = f"{tmp_path}/t"
    t = _table(root)
    data = nested_rows(0, 800)
    t.append(data)
    report = t.purge("id between 200 and 260")
    # only the touched row groups were re-encoded; the others are the old bytes
    assert 0 < report.row_groups_reencoded < sum(
        pq.ParquetFile(f["uri"]).num_row_groups for f in t.live_files(version=1))
    want = _keep(data, 200, 260)
    assert _rows(t) == want.to_pylist()
    files = [f["uri"] for f in t.live_files()]
    assert files
    # every live file, read by pyarrow and DuckDB directly, holds no purged row
    direct = pa.concat_tables([pq.read_table(u) for u in files]).sort_by("id")
    assert direct["id"].to_pylist() == want["id"].to_pylist()
    assert direct.select(["tags", "dev", "items", "grid"]).to_pylist() == \
        want.select(["tags", "dev", "items", "grid"]).to_pylist()
    listed = ", ".join(f"'{u}'" for u in files)
    assert duckdb.sql(f"select id, tags, dev, items, attrs, grid from read_parquet([{listed}])"
                      " order by id").fetchall() == duck(
        "select id, tags, dev, items, attrs, grid from w order by id", w=want)


def test_purge_splices_decimals_at_every_depth(tmp_path: object) -> None:
    """caslake stores decimals as INT32/INT64 (``store_decimal_as_integer``); a
    re-encoded row group must do the same for a decimal inside a struct, a list
    and a map, or the splice refuses (it did when no decimal was at the top)."""
    from decimal import Decimal

    d = pa.decimal128(10, 2)
    schema = pa.schema([("id", pa.int64()),
                        ("s", pa.struct([("price", d)])),
                        ("l", pa.list_(pa.struct([("price", d)]))),
                        ("m", pa.map_(pa.string(), d))])
    root = f"{tmp_path}/t"
    t = caslake.create_table(root, schema, write_options=SMALL)
    data = pa.Table.from_pylist([
        {"id": i, "s": {"price": Decimal(i) / 10},
         "l": [{"price": Decimal(i)}, None] if i % 3 else None,
         "m": [("a", Decimal(i) / 4 if i % 4 else None)]} for i in range(600)], schema=schema)
    t.append(data)
    report = t.purge("id between 100 and 130")
    assert report.row_groups_reencoded > 0
    want = data.filter(pc.invert(pc.and_(pc.greater_equal(data["id"], 100),
                                         pc.less_equal(data["id"], 130))))
    files = [f["uri"] for f in t.live_files()]
    listed = ", ".join(f"'{u}'" for u in files)
    assert duckdb.sql(f"select id, s, l, m from read_parquet([{listed}]) order by id"
                      ).fetchall() == duck("select id, s, l, m from w order by id", w=want)
    assert _rows(t) == want.to_pylist()
