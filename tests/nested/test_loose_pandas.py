"""pandas object columns (Python dicts, lists, ints, Decimals) are read straight
into the table's types: Python ints into an int32/int16/int8 field inside a
struct or list, Decimals into the table's decimal, dicts into maps -- as DuckDB
reads the same frame into a table of the same types.  A value that does not fit
is a SchemaMismatch naming the full path (``dev.v``, ``items.element.qty``),
with nothing committed (DuckDB refuses it too)."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

import caslake
from caslake.errors import SchemaMismatch
from tests.nested.core_data import duck

ITEM = pa.struct([("qty", pa.int16()), ("price", pa.decimal128(9, 2))])
SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("dev", pa.struct([("os", pa.string()), ("v", pa.int32()),
                       ("geo", pa.struct([("lat", pa.float64()), ("alt", pa.int32())]))])),
    ("items", pa.list_(ITEM)),
    ("tags", pa.list_(pa.int8())),
    ("n", pa.int32()),
])
DUCK_TABLE = ("create table t (id bigint, dev struct(os varchar, v integer, "
              "geo struct(lat double, alt integer)), items struct(qty smallint, "
              "price decimal(9,2))[], tags tinyint[], n integer)")


def _table(schema: pa.Schema = SCHEMA) -> caslake.Table:
    return caslake.create_table(f"memory://{uuid.uuid4().hex}", schema)


def _frame() -> pd.DataFrame:
    return pd.DataFrame({
        "id": [1, 2, 3, 4],
        "dev": [{"os": "ios", "v": 3, "geo": {"lat": 1.5, "alt": -7}}, None,
                {"os": None, "v": None, "geo": None},
                {"os": "x", "v": 2_000_000_000, "geo": {"lat": None, "alt": 2**31 - 1}}],
        "items": [[{"qty": 2, "price": Decimal("1.50")}, None],
                  [], None, [{"qty": -32768, "price": Decimal("9999999.99")}]],
        "tags": [[1, None, -128], None, [], [127]],
        # object dtype: pandas would make ints with a None float64
        "n": pd.Series([5, None, -2_147_483_648, 2_147_483_647], dtype=object,
                       index=[7, 8, 9, 10]),
    }, index=[7, 8, 9, 10])


def _duckdb_table(df: pd.DataFrame) -> duckdb.DuckDBPyConnection:
    """DuckDB's reading of the frame into a table of the same types."""
    con = duckdb.connect()
    con.sql(DUCK_TABLE)
    # DuckDB reads an object column of ints and None as text: give it pandas' Int64
    con.register("df", df.astype({"n": "Int64"}))
    con.sql("insert into t select id, dev, items, tags, n from df")
    return con


def test_python_ints_in_dicts_and_lists_land_in_narrower_fields_like_duckdb() -> None:
    t = _table()
    df = _frame()
    t.append(df)
    got = t.scan().to_arrow()
    assert got.schema.remove_metadata().equals(pa.schema(
        [f.remove_metadata() for f in t.scan().schema]))
    assert got.schema.field("dev").type.field("v").type == pa.int32()
    con = _duckdb_table(df)
    want = con.sql("select * from t order by id").fetchall()
    assert duck("select id, dev, items, tags, n from s order by id", s=got) == want


def test_upsert_and_a_transaction_read_pandas_by_the_tables_types() -> None:
    t = _table()
    df = _frame()
    with t.transaction() as tx:
        tx.append(df.iloc[:2])
    t.upsert(df.iloc[1:], key="id")
    con = _duckdb_table(df)
    want = con.sql("select * from t order by id").fetchall()
    assert duck("select id, dev, items, tags, n from s order by id", s=t.scan()) == want


GEO = {"lat": 0.5, "alt": 1}


@pytest.mark.parametrize(("column", "value", "path", "duckdb_refuses"), [
    ("dev", {"os": "x", "v": 3_000_000_000, "geo": GEO}, "dev.v", True),
    ("dev", {"os": "x", "v": 1, "geo": {"lat": 0.5, "alt": -2**31 - 1}}, "dev.geo.alt", True),
    ("items", [{"qty": 40000, "price": Decimal("1.00")}], "items.element.qty", True),
    ("items", [{"qty": 1, "price": Decimal("12345678.90")}], "items.element.price", True),
    # DuckDB rounds 1.234 to 1.23; caslake never drops digits
    ("items", [{"qty": 1, "price": Decimal("1.234")}], "items.element.price", False),
    ("tags", [1, 300], "tags.element", True),
    ("n", 2**31, "n", True),
])
def test_a_value_that_does_not_fit_is_a_schema_mismatch_naming_its_path(
        column: str, value: Any, path: str, duckdb_refuses: bool) -> None:
    t = _table()
    df = _frame()
    df.at[8, column] = value
    if duckdb_refuses:
        with pytest.raises(duckdb.ConversionException):
            _duckdb_table(df)
    with pytest.raises(SchemaMismatch) as e:
        t.append(df)
    assert e.value.column == path
    assert t.refresh().version == 0


@pytest.mark.parametrize(("column", "value", "path"), [
    ("dev", {"v": "three"}, "dev.v"),                 # text where the table has int32
    ("dev", {"v": 1.5}, "dev.v"),                     # a float is no int32
    ("tags", [1, "x"], "tags.element"),               # values of no common type
    ("items", [{"qty": 1}, "oops"], "items.element"),  # not a dict where a struct is
    ("dev", "oops", "dev"),
])
def test_a_wrong_typed_value_is_a_schema_mismatch_naming_its_path(
        column: str, value: Any, path: str) -> None:
    t = _table()
    df = _frame()
    df.at[8, column] = value
    with pytest.raises(SchemaMismatch) as e:
        t.append(df)
    assert e.value.column == path
    assert t.refresh().version == 0


def test_a_null_in_a_non_nullable_nested_field_is_refused_by_path() -> None:
    t = _table(pa.schema([("id", pa.int64()), ("dev", pa.struct(
        [pa.field("v", pa.int32(), nullable=False), ("os", pa.string())]))]))
    with pytest.raises(SchemaMismatch) as e:
        t.append(pd.DataFrame({"id": [1, 2], "dev": [{"v": 1}, {"os": "x", "v": None}]}))
    assert e.value.column == "dev.v"
    with pytest.raises(SchemaMismatch) as e:
        t.append(pd.DataFrame({"id": [1], "dev": [{"os": "x"}]}))
    assert e.value.column == "dev.v"
    t.append(pd.DataFrame({"id": [1], "dev": [{"v": 7, "os": None}]}))
    assert t.scan().to_arrow().to_pylist() == [{"id": 1, "dev": {"v": 7, "os": None}}]


def test_dicts_into_map_columns_with_string_and_integer_keys() -> None:
    t = _table(pa.schema([("id", pa.int64()), ("attrs", pa.map_(pa.string(), pa.int16())),
                          ("codes", pa.map_(pa.int32(), pa.string()))]))
    attrs = [{"a": 1, "b": None}, None, {}, {"z": -5}]
    codes = [{1: "one", 2_000_000_000: None}, {}, None, {-3: "x"}]
    t.append(pd.DataFrame({"id": [1, 2, 3, 4], "attrs": attrs, "codes": codes}))
    got = t.scan().to_arrow().sort_by("id")
    assert got.schema.field("attrs").type.item_type == pa.int16()

    def pairs(d: dict[Any, Any] | None) -> list[tuple[Any, Any]] | None:
        return None if d is None else list(d.items())
    # the frame's own dicts are the oracle; DuckDB reads the maps back as the same pairs
    assert got.column("attrs").to_pylist() == [pairs(d) for d in attrs]
    assert got.column("codes").to_pylist() == [pairs(d) for d in codes]
    rows = duck("select id, map_keys(codes), map_values(attrs) from s order by id", s=got)
    assert rows == [(i + 1, None if c is None else list(c), None if a is None else
                     list(a.values())) for i, (c, a) in enumerate(zip(codes, attrs, strict=True))]
    for bad, path in (({"a": 70000}, "attrs.value"), ({"a": "x"}, "attrs.value")):
        with pytest.raises(SchemaMismatch) as e:
            t.append(pd.DataFrame({"id": [5], "attrs": [bad], "codes": [None]}))
        assert e.value.column == path
    with pytest.raises(SchemaMismatch) as e:
        t.append(pd.DataFrame({"id": [5], "attrs": [None], "codes": [{2**31: "x"}]}))
    assert e.value.column == "codes.key"
    assert t.refresh().version == 1


def test_merge_mode_adds_a_struct_field_the_dicts_bring() -> None:
    t = _table(pa.schema([("id", pa.int64()), ("dev", pa.struct([("v", pa.int32())]))]))
    df = pd.DataFrame({"id": [1, 2], "dev": [{"v": 1, "extra": "a"}, {"v": None, "extra": None}]})
    with pytest.raises(SchemaMismatch) as e:
        t.append(df)
    assert e.value.column == "dev.extra"
    t.append(df, schema_mode="merge")
    dev = t.scan().schema.field("dev").type
    assert (dev.field("v").type, dev.field("extra").type) == (pa.int32(), pa.string())
    assert duck("select id, dev.v, dev.extra from s order by id", s=t.scan()) == \
        duck("select id, dev.v, dev.extra from df order by id", df=df)


def test_python_ints_into_floats_and_decimals_only_when_exact() -> None:
    t = _table(pa.schema([("id", pa.int64()), ("s", pa.struct(
        [("f", pa.float64()), ("g", pa.float32()), ("d", pa.decimal64(12, 2))]))]))
    df = pd.DataFrame({"id": [1, 2], "s": [{"f": 2**53, "g": 2**24, "d": 10**9},
                                          {"f": -3, "g": None, "d": Decimal("-0.25")}]})
    t.append(df)
    con = duckdb.connect()
    con.sql("create table w (id bigint, s struct(f double, g float, d decimal(12,2)))")
    con.register("df", df)
    con.sql("insert into w select * from df")
    assert duck("select * from s order by id", s=t.scan()) == \
        con.sql("select * from w order by id").fetchall()
    for value, path in (({"f": 2**53 + 1}, "s.f"), ({"g": 2**24 + 1}, "s.g"),
                        ({"g": 0.1}, "s.g"), ({"d": 10**10}, "s.d")):
        with pytest.raises(SchemaMismatch) as e:
            t.append(pd.DataFrame({"id": [3], "s": [value]}))
        assert e.value.column == path
    assert t.refresh().version == 1
