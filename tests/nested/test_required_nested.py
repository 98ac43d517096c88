"""NOT NULL fields inside nested columns, for data already in the table's types.

An append whose Arrow types equal the table's used to skip the nested checks, so
a NULL in a non-nullable nested field reached pyarrow's Parquet writer and came
out as a raw ``ArrowInvalid``; and NULLs that lie only under a NULL parent (as
Spark sends them) were refused although no reader can see them.  Checked
against DuckDB reading the written files."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.errors import SchemaMismatch, UnsupportedType

ITEM = pa.struct([pa.field("sku", pa.string(), nullable=False), pa.field("q", pa.int32())])
DEV = pa.struct([pa.field("os", pa.string(), nullable=False)])
SCHEMA = pa.schema([("id", pa.int64()), ("items", pa.list_(pa.field("element", ITEM))),
                    ("dev", DEV)])


def table(tmp_path: Path) -> caslake.Table:
    return caslake.create_table(str(tmp_path / "t"), SCHEMA)


def test_nulls_under_a_null_parent_are_accepted(tmp_path: Path) -> None:
    t = table(tmp_path)
    # dev's child is NULL exactly where dev itself is NULL (Spark's layout)
    dev = pa.StructArray.from_arrays([pa.array(["ios", None])],
                                     fields=[pa.field("os", pa.string(), nullable=False)],
                                     mask=pa.array([False, True]))
    items = pa.array([[{"sku": "a", "q": 1}, None], None], pa.list_(pa.field("element", ITEM)))
    data = pa.Table.from_arrays([pa.array([1, 2]), items, dev], schema=SCHEMA)
    t.append(data)
    want = [{"id": 1, "items": [{"sku": "a", "q": 1}, None], "dev": {"os": "ios"}},
            {"id": 2, "items": None, "dev": None}]
    assert t.scan().to_arrow().sort_by("id").to_pylist() == want
    files = [f["uri"].removeprefix("file://") for f in t.live_files()]
    got = duckdb.sql(f"SELECT id, items, dev FROM read_parquet({files}) ORDER BY id"
                     ).fetch_arrow_table().to_pylist()
    assert got == want


@pytest.mark.parametrize("where", ["items.element.sku", "dev.os"])
def test_a_null_in_a_not_null_nested_field_is_a_typed_error(tmp_path: Path, where: str) -> None:
    t = table(tmp_path)
    items = [[{"sku": None if where.startswith("items") else "a", "q": 1}]]
    dev = pa.StructArray.from_arrays(
        [pa.array([None if where == "dev.os" else "ios"], pa.string())],
        fields=[pa.field("os", pa.string(), nullable=False)])
    data = pa.Table.from_arrays(
        [pa.array([1]), pa.array(items, pa.list_(pa.field("element", ITEM))), dev],
        schema=SCHEMA)  # already the table's types: nothing to cast
    with pytest.raises(SchemaMismatch) as info:
        t.append(data)
    assert info.value.column == where
    assert t.scan().count() == 0 and t.version == 0


def test_a_negative_decimal_scale_is_refused_at_create(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedType, match="negative scale") as info:
        caslake.create_table(str(tmp_path / "d"), pa.schema([
            ("s", pa.struct([("amount", pa.decimal128(5, -2))]))]))
    assert info.value.path == "s.amount"
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").rglob("*"))
