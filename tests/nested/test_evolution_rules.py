"""Schema evolution inside nested types (pure layer): evolve() by dotted path, the ids
it hands out, the typed errors naming the full path, the type text grammar, and
old Parquet files (written by pyarrow) read under the evolved schema by id."""

from __future__ import annotations

import io as _io
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from caslake.errors import InvalidSchemaChange, UserInputError
from caslake.format.schema import TableSchema
from caslake.format.schema_evolution import (
    AddColumn,
    DropColumn,
    MakeNullable,
    RenameColumn,
    WidenColumn,
    conform_column,
    evolve,
    is_widening,
)
from caslake.format.type_text import parse_type, type_text

DEVICE = pa.struct([("os", pa.string()), ("v", pa.int32())])
ITEMS = pa.list_(pa.struct([("price", pa.float32()), ("sku", pa.string())]))
BASE = TableSchema.from_arrow(pa.schema([
    ("id", pa.int64()), ("device", DEVICE), ("tags", pa.list_(pa.int32())),
    ("items", ITEMS), ("attrs", pa.map_(pa.string(), pa.int32())),
    ("a.b", pa.int16()), pa.field("nn", pa.struct([pa.field("x", pa.int8(), False)]))]))


def ids(schema: TableSchema) -> dict[str, int]:
    return {p: f.id for p, f in schema.walk()}


def test_add_a_field_at_any_depth_gets_fresh_ids_above_last_field_id() -> None:
    last = BASE.last_field_id
    s = evolve(BASE, [AddColumn("device.loc", pa.struct([("lat", pa.float64()),
                                                         ("lon", pa.float64())])),
                      AddColumn("items.element.qty", "int32"),
                      AddColumn("attrs2", "map<string,list<int64>>")])
    got = ids(s)
    assert got["device.loc"] == last + 1
    assert {got["device.loc.lat"], got["device.loc.lon"]} == {last + 2, last + 3}
    assert got["items.element.qty"] == last + 4
    assert [got[p] for p in ("attrs2", "attrs2.key", "attrs2.value", "attrs2.value.element")] \
        == [last + 5, last + 6, last + 7, last + 8]
    assert s.last_field_id == last + 8 and s.schema_id == 1
    assert all(ids(BASE)[p] == got[p] for p in ids(BASE))  # nothing else moved
    assert s.find_path("device.loc").nullable and s.find_path("items.element.qty").nullable
    assert s.to_arrow().field("device").type == pa.struct([
        ("os", pa.string()), ("v", pa.int32()),
        ("loc", pa.struct([("lat", pa.float64()), ("lon", pa.float64())]))])


def test_drop_then_add_of_a_nested_name_gets_a_new_id() -> None:
    s = evolve(BASE, [DropColumn("device.os")])
    s2 = evolve(s, [AddColumn("device.os", "string")])
    assert s2.find_path("device.os").id == BASE.last_field_id + 1
    assert s2.find_path("device.os").id != BASE.find_path("device.os").id


def test_rename_widen_and_make_nullable_keep_ids() -> None:
    s = evolve(BASE, [RenameColumn("device.os", "platform"),
                      RenameColumn("items.element.price", "items.element.cost"),
                      WidenColumn("tags.element", "int64"),
                      WidenColumn("attrs.value", pa.int64()),
                      WidenColumn("items.element.cost", "float64"),
                      MakeNullable("nn.x"), WidenColumn("a.b", "int32")])
    assert s.find_path("device.platform").id == BASE.find_path("device.os").id
    assert s.find_path("items.element.cost").type == "float64"
    assert s.find_path("tags.element").type == "int64"
    assert s.find_path("attrs.value").type == "int64"
    assert s.find_path("nn.x").nullable
    assert s.field("a.b").type == "int32"  # the dotted top-level name wins
    assert s.last_field_id == BASE.last_field_id


def test_a_dotted_top_level_name_keeps_working() -> None:
    s = evolve(BASE, [AddColumn("q.r", "int8"), RenameColumn("a.b", "c.d")])
    assert s.names == ["id", "device", "tags", "items", "attrs", "c.d", "nn", "q.r"]
    s = evolve(s, [DropColumn("c.d"), WidenColumn("q.r", "int64")])
    assert s.field("q.r").type == "int64" and "c.d" not in s.names


@pytest.mark.parametrize("change,path,words", [
    (AddColumn("tags.x", "int32"), "tags.x", "tags.element.x"),
    (AddColumn("id.x", "int32"), "id.x", "not a struct"),
    (AddColumn("device.os", "int32"), "device.os", "already exists"),
    (AddColumn("device.zz.y", "int32"), "device.zz.y", "fields os, v"),
    (AddColumn("device.x", pa.struct([("d", pa.duration("s"))])), "device.x.d", "int64"),
    (AddColumn("device.x", "list<int65>"), "device.x", "unknown type 'int65'"),
    (AddColumn("device.x", pa.struct([])), "device.x", "no fields"),
    (DropColumn("tags.element"), "tags.element", "drop 'tags'"),
    (DropColumn("items.element"), "items.element", "drop 'items'"),
    (DropColumn("nn.x"), "nn.x", "last field of struct 'nn'"),
    (DropColumn("device.nope"), "device.nope", "fields os, v"),
    (RenameColumn("attrs.key", "k"), "attrs.key", "fixed name"),
    (RenameColumn("device.os", "v"), "device.v", "already exists"),
    (RenameColumn("device.os", "x.y"), "device.os", "no '.'"),
    (WidenColumn("attrs.key", "string"), "attrs.key", "map key"),
    (WidenColumn("device", "int32"), "device", "device.os"),
    (WidenColumn("tags", "list<int64>"), "tags", "tags.element"),
    (WidenColumn("tags.element", "int16"), "tags.element", "from int32 to int16"),
    (WidenColumn("items.element.price", "int64"), "items.element.price", "float32"),
    (MakeNullable("attrs.key"), "attrs.key", "never NULL"),
])
def test_refused_changes_are_typed_errors_naming_the_full_path(
        change: Any, path: str, words: str | None) -> None:
    with pytest.raises(InvalidSchemaChange) as e:
        evolve(BASE, [change])
    assert isinstance(e.value, UserInputError)
    assert e.value.column == path
    assert path in str(e.value)
    if words:
        assert words in str(e.value)


@pytest.mark.parametrize("text,arrow", [
    ("int64", pa.int64()),
    ("list<string>", pa.list_(pa.string())),
    ("struct<os:string,v:int32>", pa.struct([("os", pa.string()), ("v", pa.int32())])),
    ("map<string,int64>", pa.map_(pa.string(), pa.int64())),
    ("list<struct<p:decimal128(10, 2),t:timestamp[us, tz=UTC]>>",
     pa.list_(pa.struct([("p", pa.decimal128(10, 2)), ("t", pa.timestamp("us", "UTC"))]))),
    ("map<int32,map<string,list<uuid>>>",
     pa.map_(pa.int32(), pa.map_(pa.string(), pa.list_(pa.uuid())))),
    ("struct<a:time64[us],b:fixed_size_binary[4],c:float16,d:date64>",
     pa.struct([("a", pa.time64("us")), ("b", pa.binary(4)), ("c", pa.float16()),
                ("d", pa.date64())])),
])
def test_type_text_round_trips(text: str, arrow: pa.DataType) -> None:
    assert parse_type(text) == arrow
    assert parse_type(type_text(arrow)) == arrow
    spaced = text.replace(",", " , ").replace("<", " < ").replace(":", " : ")
    if "(" not in text and "[" not in text:
        assert parse_type(spaced) == arrow


@pytest.mark.parametrize("text", ["list<int64", "list<>", "struct<a:int64,a:int8>",
                                  "struct<:int64>", "map<string>", "list", "foo<int64>",
                                  "int64>", "struct<a:int64,>"])
def test_bad_type_text_is_a_typed_error(text: str) -> None:
    with pytest.raises(UserInputError, match="cannot read the type"):
        parse_type(text, "col")


def test_float16_and_decimal_widths_widen() -> None:
    assert is_widening("float16", "float32") and is_widening("float16", "float64")
    assert is_widening("decimal32(5, 2)", "decimal128(12, 2)")
    assert not is_widening("decimal64(12, 2)", "decimal32(9, 2)")


def _parquet(table: pa.Table) -> pa.Table:
    buf = _io.BytesIO()
    pq.write_table(table, buf)
    return pq.read_table(pa.BufferReader(buf.getvalue()))


def test_a_file_written_before_the_changes_reads_under_the_new_schema_by_id() -> None:
    """pyarrow writes a file under the old schema (ids on every node); after a rename,
    a drop, a re-add of the dropped name, a widening and an add inside a list's
    struct, conform_column presents it as the model says: old values by id, NULL
    for every field added later (the re-added name too)."""
    old = BASE.to_arrow()
    rows = pa.Table.from_pylist([
        {"id": 1, "device": {"os": "ios", "v": 3}, "tags": [1, None], "items": [
            {"price": 1.5, "sku": "a"}, None], "attrs": [("k", 7)], "a.b": 2, "nn": {"x": 1}},
        {"id": 2, "device": None, "tags": None, "items": [], "attrs": None, "a.b": None,
         "nn": None}], schema=old)
    stored = _parquet(rows)
    new = evolve(BASE, [RenameColumn("device.os", "platform"), DropColumn("device.v"),
                        AddColumn("device.v", "string"), WidenColumn("tags.element", "int64"),
                        AddColumn("items.element.qty", "int32"),
                        DropColumn("items.element.sku"), WidenColumn("attrs.value", "int64")])
    got = {f.name: conform_column(stored.column(f.name), stored.schema.field(f.name),
                                  new.field(f.name)).to_pylist()
           for f in new.fields if f.name in ("device", "tags", "items", "attrs")}
    assert got == {
        "device": [{"platform": "ios", "v": None}, None],
        "tags": [[1, None], None],
        "items": [[{"price": 1.5, "qty": None}, None], []],
        "attrs": [[("k", 7)], None]}


def test_decimal_values_survive_a_nested_widening() -> None:
    s = TableSchema.from_arrow(pa.schema([("m", pa.map_(pa.string(), pa.decimal128(5, 2)))]))
    stored = _parquet(pa.table({"m": pa.array([[("a", Decimal("123.45"))]],
                                              s.to_arrow().field("m").type)},
                               schema=s.to_arrow()))
    new = evolve(s, [WidenColumn("m.value", "decimal128(20, 2)")])
    out = conform_column(stored.column("m"), stored.schema.field("m"), new.field("m"))
    assert out.type == pa.map_(pa.string(), pa.decimal128(20, 2))
    assert out.to_pylist() == [[("a", Decimal("123.45"))]]
