"""Scans of tables with nested columns and the newer primitives, checked against
pyarrow and DuckDB reading the same rows: whole-table reads, streaming,
counts, time travel, deletion masks, nested projections (and the bytes they
fetch)."""

from __future__ import annotations

import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.core import WriteOptions
from tests.nested.core_data import PRIMS, SCHEMA, duck, nested_rows, prim_rows, write_reference

SMALL = WriteOptions(target_file_size=8 * 1024, row_group_size=2 * 1024)


def _table(schema: pa.Schema = SCHEMA, uri: str | None = None) -> caslake.Table:
    return caslake.create_table(uri or f"memory://{uuid.uuid4().hex}", schema,
                                write_options=SMALL)


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def _same(got: pa.Table, want: pa.Table) -> None:
    """Equal values, and the table's types (a list's child is named ``element``)."""
    assert got.column_names == want.column_names
    for name in want.column_names:
        a, b = got.column(name).combine_chunks(), want.column(name).combine_chunks()
        assert a.to_pylist() == b.to_pylist(), name
        assert str(a.type) == str(b.type).replace("<item:", "<element:"), name


def test_scan_of_nested_columns_equals_pyarrow_and_duckdb(tmp_path: Path) -> None:
    t = _table()
    first, second = nested_rows(0, 300), nested_rows(300, 200)
    t.append(first)
    t.append(second)
    assert len(t.live_files()) > 2  # several files, several row groups
    want = pa.concat_tables([first, second])
    got = t.scan().to_arrow()
    _same(_sorted(got), want)
    # DuckDB reading caslake's stream and pyarrow's own file agree row for row.
    ref = write_reference(want, str(tmp_path / "ref.parquet"))
    ours = duck("select * from scan order by id", scan=t.scan())
    theirs = duckdb.sql(f"select * from read_parquet('{ref}') order by id").fetchall()
    assert ours == theirs
    assert len(ours) == 500


def test_streaming_count_and_time_travel() -> None:
    t = _table()
    t.append(nested_rows(0, 200))
    t.append(nested_rows(200, 100))
    batches = list(t.scan().to_batches())
    assert sum(b.num_rows for b in batches) == 300
    streamed = pa.Table.from_batches(batches)
    _same(_sorted(streamed), pa.concat_tables([nested_rows(0, 200), nested_rows(200, 100)]))
    assert t.scan().count() == 300
    old = t.scan(version=1).to_arrow()
    _same(_sorted(old), nested_rows(0, 200))
    assert t.scan(version=1).count() == 200


def test_deletion_masks_on_a_nested_table() -> None:
    t = _table()
    data = nested_rows(0, 400)
    t.append(data)
    t.delete("id in (3, 7, 50, 399) or id between 100 and 180")
    gone = pc.or_(pc.is_in(data["id"], pa.array([3, 7, 50, 399])),
                  pc.and_(pc.greater_equal(data["id"], 100), pc.less_equal(data["id"], 180)))
    want = data.filter(pc.invert(gone))
    got = t.scan().to_arrow()
    _same(_sorted(got), want)
    assert t.scan().count() == want.num_rows
    # the same rows through DuckDB
    ours = duck("select id, dev.os, len(items) from got order by id", got=got)
    theirs = duck("select id, dev.os, len(items) from data where not (id in "
                  "(3, 7, 50, 399) or id between 100 and 180) order by id", data=data)
    assert ours == theirs
    # where on a top-level column with a nested projection
    part = t.scan(columns=["id", "dev.os"], where="id < 50").to_arrow()
    assert part.column("id").to_pylist() == [i for i in range(50) if i not in (3, 7)]


def test_new_primitives_come_back_as_the_tables_types(tmp_path: Path) -> None:
    t = _table(PRIMS)
    data = prim_rows(0, 120)
    t.append(data)
    got = _sorted(t.scan().to_arrow())
    assert got.schema.remove_metadata().equals(PRIMS)  # time32[s], date64, decimal32...
    _same(got, data)
    ref = write_reference(data, str(tmp_path / "p.parquet"))
    cols = "id, t32, t64, d64, dec32, dec64, fsb"  # DuckDB reads no decimal256, float16
    sub = got.drop_columns(["dec256", "h"])
    assert duck(f"select {cols} from sub order by id", sub=sub) == duckdb.sql(
        f"select {cols} from read_parquet('{ref}') order by id").fetchall()


# --- projection of nested fields ---------------------------------------------------


def test_projecting_a_struct_leaf_keeps_the_struct_shape(tmp_path: Path) -> None:
    t = _table()
    data = nested_rows(0, 300)
    t.append(data)
    ref = write_reference(data, str(tmp_path / "ref.parquet"))
    got = t.scan(columns=["id", "dev.os"]).to_arrow().sort_by("id")
    assert got.column_names == ["id", "dev"]
    want = pq.ParquetFile(ref).read(columns=["id", "dev.os"]).sort_by("id")  # pyarrow's pruning
    assert got.column("dev").to_pylist() == want.column("dev").to_pylist()
    assert [f.name for f in got.schema.field("dev").type] == ["os"]
    assert t.scan(columns=["dev.os"]).schema.names == ["dev"]
    # two leaves of one struct, and a leaf of a struct inside it, in the table's order
    two = t.scan(columns=["dev.geo.lat", "dev.os"]).to_arrow()
    assert [f.name for f in two.schema.field("dev").type] == ["os", "geo"]
    assert duck("select dev.os, dev.geo.lat from two order by all", two=two) == \
        duckdb.sql(f"select dev.os, dev.geo.lat from read_parquet('{ref}') order by all"
                   ).fetchall()
    # a field inside a list of structs
    prices = t.scan(columns=["id", "items.element.price"]).to_arrow().sort_by("id")
    want_p = pq.ParquetFile(ref).read(columns=["id", "items.list.element.price"]).sort_by("id")
    assert prices.column("items").to_pylist() == want_p.column("items").to_pylist()
    # a whole column named beside its leaf: the whole column
    whole = t.scan(columns=["dev.os", "dev"]).to_arrow()
    assert whole.schema.field("dev").type.num_fields == 3


def test_projection_with_a_predicate_on_the_same_struct_and_case_insensitive() -> None:
    t = _table()
    data = nested_rows(0, 100)
    t.append(data)
    got = t.scan(columns=["ID", "Dev.OS"], where="id >= 90").to_arrow()
    assert got.column_names == ["id", "dev"]
    assert got.column("dev").to_pylist() == [
        None if d is None else {"os": d["os"]}
        for d in data.column("dev").to_pylist()[90:]]


def test_unknown_nested_path_is_a_typed_error() -> None:
    t = _table()
    with pytest.raises(caslake.errors.UnknownColumn):
        t.scan(columns=["dev.nope"])


def _leaf_bytes(data: bytes, leaf_path: str) -> tuple[int, int]:
    md = pq.read_metadata(pa.BufferReader(data))
    total = 0
    for rg in range(md.num_row_groups):
        for c in range(md.num_columns):
            col = md.row_group(rg).column(c)
            if col.path_in_schema == leaf_path:
                total += col.total_compressed_size
    footer = int.from_bytes(data[-8:-4], "little") + 8
    return total, footer


def test_a_nested_projection_fetches_only_that_leafs_chunks() -> None:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)  # one big file
    t.append(nested_rows(0, 20000))
    (f,) = t.live_files()
    data = t.store.get(f["path"]).data
    leaf, footer = _leaf_bytes(data, "dev.os")
    reader = caslake.Table.load(t.store)  # a fresh handle: no footer cached
    scan = reader.scan(columns=["dev.os"])
    scan.plan()  # metadata and the footer
    t.store.counters.reset()
    got = scan.to_arrow()
    assert got.num_rows == 20000
    assert got.column("dev").to_pylist() == [
        None if d is None else {"os": d["os"]} for d in nested_rows(0, 20000)["dev"].to_pylist()]
    fetched = t.store.counters.snapshot()
    assert fetched["get_range"] >= 1
    assert fetched["bytes_in"] <= 1.2 * leaf + footer, (fetched, leaf, len(data))


def test_projection_and_bytes_after_nested_evolution(tmp_path: Path) -> None:
    """Renamed, dropped, added and widened nested fields read by field id, also
    when projected; a dropped field's chunks are not fetched."""
    t = _table()
    data = nested_rows(0, 200)
    t.append(data)
    (t.update_schema().rename_column("dev.os", "platform").drop_column("dev.geo")
     .add_column("dev.build", "int64").widen_column("items.element.qty", "int64").commit())
    got = t.scan(columns=["id", "dev.platform", "dev.build", "items.element.qty"]
                 ).to_arrow().sort_by("id")
    assert got.column_names == ["id", "dev", "items"]
    assert got.column("dev").to_pylist() == [
        None if d is None else {"platform": d["os"], "build": None}
        for d in data.column("dev").to_pylist()]
    assert str(got.schema.field("items").type) == "list<element: struct<qty: int64>>"
    assert got.column("items").to_pylist() == [
        None if xs is None else [None if x is None else {"qty": x["qty"]} for x in xs]
        for xs in data.column("items").to_pylist()]
    whole = t.scan().to_arrow().sort_by("id")
    assert [f.name for f in whole.schema.field("dev").type] == ["platform", "ver", "build"]
    # the same values as DuckDB reads from the stored file, under the old names
    ref = write_reference(data, str(tmp_path / "ref.parquet"))
    assert duck("select id, dev.platform, dev.ver from w order by id", w=whole) == \
        duckdb.sql(f"select id, dev.os, dev.ver from read_parquet('{ref}') order by id"
                   ).fetchall()
