"""decimal32/decimal64 columns, and decimal256 of at most 38 digits, are written to
Parquet as decimal128 at any depth: the same Parquet physical types and logical
type as pyarrow writes for the table's types, only the Arrow schema in the footer
says decimal128 (pyiceberg 0.12 refuses files whose Arrow schema says
decimal32/64/256).  caslake's scan still returns the table's types; pyarrow,
DuckDB and pyiceberg (through an Iceberg export) read the same values."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import caslake
from tests.export.readers import duckdb_iceberg_rows, normal, pyiceberg_rows

FIELDS = [
    pa.field("id", pa.int64()),
    pa.field("a", pa.decimal32(7, 2)),
    pa.field("b", pa.decimal64(15, 3)),
    pa.field("c", pa.decimal256(30, 4)),
    pa.field("s", pa.struct([pa.field("x", pa.decimal32(5, 1)),
                             pa.field("l", pa.list_(pa.decimal64(18, 2)))])),
    pa.field("m", pa.map_(pa.string(), pa.decimal32(4, 2))),
]
SCHEMA = pa.schema(FIELDS)
WIDE = pa.schema([*FIELDS, pa.field("w", pa.decimal256(40, 5))])


def _rows(n: int, schema: pa.Schema) -> pa.Table:
    rows: list[dict[str, Any]] = []
    for i in range(n):
        row = {
            "id": i,
            "a": None if i % 4 == 3 else Decimal(i * 12345 - 99999) / 100,
            "b": Decimal(-i * 987654321) / 1000,
            "c": None if i % 5 == 1 else Decimal(f"{i}2345678901234567890123.4567"),
            "s": None if i % 6 == 5 else {"x": Decimal(i % 999) / 10,
                                          "l": None if i % 3 == 1 else [Decimal(i) / 4, None]},
            "m": None if i % 7 == 6 else [("k", Decimal(i % 99) / 100)],
        }
        if "w" in schema.names:
            row["w"] = Decimal(10) ** 34 + Decimal(i) / 100000
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema)


def _data_files(root: Path) -> list[Path]:
    return sorted(root.glob("data/**/*.parquet"))


def _decimal_types(t: pa.DataType) -> list[pa.DataType]:
    if pa.types.is_decimal(t):
        return [t]
    if pa.types.is_struct(t):
        return [d for f in t for d in _decimal_types(f.type)]
    if pa.types.is_list(t):
        return _decimal_types(t.value_type)
    if pa.types.is_map(t):
        return _decimal_types(t.item_type)
    return []


def test_files_store_decimal128_and_every_reader_gets_the_values(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = caslake.create_table(str(root), WIDE)
    data = _rows(40, WIDE)
    t.append(data.slice(0, 25))
    t.append(data.slice(25))
    got = t.scan().to_arrow()
    assert pa.schema([f.remove_metadata() for f in got.schema]) == pa.schema(
        [f.remove_metadata() for f in WIDE])  # the table's decimal32/64/256 types
    assert got.sort_by("id").to_pylist() == data.to_pylist()
    reference = io.BytesIO()  # pyarrow's own file of the table's types
    pq.write_table(data, reference, store_decimal_as_integer=True)
    ref_schema = pq.ParquetFile(io.BytesIO(reference.getvalue())).schema
    for path in _data_files(root):
        pf = pq.ParquetFile(path)
        stored = pf.schema_arrow
        widths = [str(d) for f in stored for d in _decimal_types(f.type)]
        assert widths == ["decimal128(7, 2)", "decimal128(15, 3)", "decimal128(30, 4)",
                          "decimal128(5, 1)", "decimal128(18, 2)", "decimal128(4, 2)",
                          "decimal256(40, 5)"]
        # the same Parquet columns, physical and logical types as pyarrow writes
        assert [(c.path, c.physical_type, str(c.logical_type)) for c in pf.schema] == \
            [(c.path, c.physical_type, str(c.logical_type)) for c in ref_schema]
    files = [str(p) for p in _data_files(root)]
    from_files = pa.concat_tables(pq.read_table(p) for p in files).sort_by("id")
    assert from_files.cast(pa.schema([f.remove_metadata() for f in WIDE]),
                           safe=True).to_pylist() == data.to_pylist()
    # DuckDB takes no Arrow decimal256: its reference reads c as decimal128
    ref = data.drop_columns(["w"]).cast(pa.schema([
        f.with_type(pa.decimal128(30, 4)) if f.name == "c" else f for f in SCHEMA]))
    cols = "id, a, b, c, s, m"
    con = duckdb.connect()
    con.register("ref", ref)
    assert con.sql(f"select {cols} from read_parquet({files}) order by id").fetchall() == \
        con.sql(f"select {cols} from ref order by id").fetchall()


def test_pyiceberg_reads_an_iceberg_export_of_decimal32_and_64_columns(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = caslake.create_table(str(root), SCHEMA)
    data = _rows(30, SCHEMA)
    t.append(data)
    t.delete("id = 4")
    t.compact()  # rewritten files too
    want = normal(data.filter(pa.compute.not_equal(data["id"], 4)), SCHEMA)
    assert normal(t.scan().to_arrow(), SCHEMA).equals(want)
    location = t.export_iceberg().location
    assert pyiceberg_rows(location, SCHEMA).equals(want)
    assert duckdb_iceberg_rows(location, SCHEMA).equals(want)


def test_purge_and_a_decimal_struct_leaf_predicate_on_decimal128_files(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    data = _rows(50, SCHEMA)
    t.append(data)
    t.purge("a < 0")
    keep = data.filter(pa.compute.fill_null(pa.compute.greater_equal(data["a"], 0), True))
    got = t.scan().to_arrow()
    assert got.schema.field("a").type == pa.decimal32(7, 2)
    assert got.sort_by("id").to_pylist() == keep.to_pylist()
    sel = t.scan(where="s.x > 2.5").to_arrow().sort_by("id")
    con = duckdb.connect()
    con.register("ref", keep.select(["id", "s"]))
    assert sel.column("id").to_pylist() == [r[0] for r in con.sql(
        "select id from ref where s.x > 2.5 order by id").fetchall()]
