"""Appending nested data: any Arrow encoding at any level becomes the table's
types, struct fields match by name in any order, and every refusal is a typed
SchemaMismatch naming the full path with nothing committed.  Input from
pandas, Polars and DuckDB lands as those libraries hold it (checked through
DuckDB and pyarrow, not caslake alone)."""

from __future__ import annotations

import uuid
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import caslake
from caslake.errors import SchemaMismatch
from tests.nested.core_data import SCHEMA, duck, nested_rows

ITEMS = pa.list_(pa.struct([("sku", pa.string()), ("price", pa.float64())]))
SMALL = pa.schema([
    ("id", pa.int64()),
    ("tags", pa.list_(pa.string())),
    ("dev", pa.struct([("os", pa.string()), ("ver", pa.int32()),
                       pa.field("must", pa.int64(), nullable=False)])),
    ("items", ITEMS),
])


def _table(schema: pa.Schema = SMALL) -> caslake.Table:
    return caslake.create_table(f"memory://{uuid.uuid4().hex}", schema)


def _rows(t: caslake.Table) -> list[dict[str, Any]]:
    return sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def test_every_arrow_encoding_at_every_level_becomes_the_tables_type() -> None:
    t = _table(SCHEMA)
    want = nested_rows(0, 50)
    tags = pa.array(want["tags"].to_pylist(), pa.large_list(pa.string_view()))
    dev_t = pa.struct([("geo", pa.struct([("lon", pa.float64()), ("lat", pa.float64())])),
                       ("ver", pa.int32()),
                       ("os", pa.dictionary(pa.int8(), pa.string()))])  # other order
    dev = pa.array(want["dev"].to_pylist(), dev_t)
    items = pa.array(want["items"].to_pylist(), pa.list_view(
        pa.struct([("qty", pa.int32()), ("price", pa.float64()), ("sku", pa.large_string())])))
    grid = pa.array(want["grid"].to_pylist(), pa.large_list(pa.list_view(pa.int16())))
    data = pa.table({"grid": grid, "id": want["id"], "items": items, "attrs": want["attrs"],
                     "dev": dev, "tags": tags})
    t.append(data)
    got = t.scan().to_arrow().sort_by("id")
    assert got.schema.remove_metadata().equals(pa.schema(
        [f.remove_metadata() for f in t.scan().schema]))
    assert got.to_pylist() == want.to_pylist()
    # a fixed-size list too
    fixed = _table(pa.schema([("id", pa.int64()), ("v", pa.list_(pa.float32()))]))
    fixed.append(pa.table({"id": [1, 2], "v": pa.array([[1.0, 2.0], None],
                                                       pa.list_(pa.float32(), 2))}))
    assert duck("select id, v from s order by id", s=fixed.scan()) == [(1, [1.0, 2.0]),
                                                                      (2, None)]


def test_struct_fields_match_by_name_and_a_missing_nullable_one_is_null() -> None:
    t = _table()
    dev = pa.array([{"must": 1, "os": "ios"}, None],
                   pa.struct([("must", pa.int64()), ("os", pa.string())]))  # no "ver"
    items = pa.array([[{"price": 2.5}], []], pa.list_(pa.struct([("price", pa.float64())])))
    t.append(pa.table({"id": [1, 2], "tags": [["a"], None], "dev": dev, "items": items}))
    assert _rows(t) == [
        {"id": 1, "tags": ["a"], "dev": {"os": "ios", "ver": None, "must": 1},
         "items": [{"sku": None, "price": 2.5}]},
        {"id": 2, "tags": None, "dev": None, "items": []}]


@pytest.mark.parametrize(("dev", "items", "path"), [
    # a missing non-nullable field
    (pa.array([{"os": "x"}]), pa.array([[]], ITEMS), "dev.must"),
    # a list<string> into a list<float64> deep inside
    (pa.array([{"must": 1}]), pa.array([[{"price": "1.5"}]]), "items.element.price"),
    # an unsafe cast: int64 into int32
    (pa.array([{"must": 1, "ver": 2**40}]), pa.array([[]], ITEMS), "dev.ver"),
    # a field the table does not have
    (pa.array([{"must": 1, "extra": 1}]), pa.array([[]], ITEMS), "dev.extra"),
    # a struct where the table has a list
    (pa.array([{"must": 1}]), pa.array([{"price": 1.0}]), "items"),
])
def test_refusals_name_the_full_path_and_commit_nothing(dev: Any, items: Any,
                                                       path: str) -> None:
    t = _table()
    t.append(pa.table({"id": [0], "tags": [["a"]], "dev": pa.array(
        [{"os": "a", "ver": 1, "must": 0}], SMALL.field("dev").type),
        "items": pa.array([[]], ITEMS)}))
    with pytest.raises(SchemaMismatch) as e:
        t.append(pa.table({"id": [1], "tags": [["a"]], "dev": dev, "items": items}))
    assert e.value.column == path
    assert repr(path) in str(e.value)
    assert t.refresh().version == 1
    assert [r["id"] for r in _rows(t)] == [0]


def test_values_that_do_not_fit_name_the_path() -> None:
    t = _table(pa.schema([("id", pa.int64()), ("ts", pa.list_(pa.struct(
        [("at", pa.timestamp("ms")), ("n", pa.int32())]))),
        ("req", pa.list_(pa.field("element", pa.int64(), nullable=False)))]))
    lossy = pa.array([[{"at": 1_000_001, "n": 1}]], pa.list_(pa.struct(
        [("at", pa.timestamp("us")), ("n", pa.int32())])))
    with pytest.raises(SchemaMismatch) as e:
        t.append(pa.table({"id": [1], "ts": lossy, "req": [[1]]}))
    assert e.value.column == "ts.element.at"
    with pytest.raises(SchemaMismatch) as e:
        t.append(pa.table({"id": [1], "ts": [[]], "req": [[1, None]]}))
    assert e.value.column == "req.element"
    assert t.refresh().version == 0


def test_pandas_object_columns_of_lists_and_dicts() -> None:
    # pyarrow infers int64 for Python ints in dicts (an int32 field refuses them, as
    # a top-level int64 column into int32 is refused)
    t = _table(pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())),
                          ("dev", pa.struct([("os", pa.string()), ("ver", pa.int64())]))]))
    df = pd.DataFrame({"id": [1, 2, 3], "tags": [["a", "b"], [], None],
                       "dev": [{"os": "ios", "ver": 3}, None, {"ver": 1, "os": None}]},
                      index=[10, 11, 12])
    t.append(df)
    want = pa.Table.from_pandas(df, preserve_index=False)  # pyarrow's reading of the frame
    assert duck("select id, tags, dev.os, dev.ver from s order by id", s=t.scan()) == \
        duck("select id, tags, dev.os, dev.ver from w order by id", w=want)


def test_polars_frames_with_views_and_nesting() -> None:
    t = _table(pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())),
                          ("dev", pa.struct([("os", pa.string()), ("ver", pa.int32())])),
                          ("m", pa.list_(pa.list_(pa.int64())))]))
    df = pl.DataFrame({"id": [1, 2, 3], "tags": [["a", None], None, []],
                       "dev": [{"os": "ios", "ver": 3}, None, {"os": None, "ver": 1}],
                       "m": [[[1], None], None, [[]]]},
                      schema={"id": pl.Int64, "tags": pl.List(pl.String),
                              "dev": pl.Struct({"os": pl.String, "ver": pl.Int32}),
                              "m": pl.List(pl.List(pl.Int64))})
    t.append(df)
    back = pl.DataFrame(t.scan().to_arrow()).sort("id")
    assert back.to_dicts() == df.to_dicts()
    assert duck("select id, tags, dev, m from s order by id", s=t.scan()) == \
        duck("select id, tags, dev, m from df order by id", df=df)


def test_duckdb_relations_with_list_struct_and_map() -> None:
    t = _table(pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())),
                          ("dev", pa.struct([("os", pa.string()), ("ver", pa.int32())])),
                          ("attrs", pa.map_(pa.string(), pa.int64()))]))
    con = duckdb.connect()
    rel = con.sql("""select * from (values
        (1::bigint, ['a', null], {'os': 'ios', 'ver': 3::int}, map(['k'], [5::bigint])),
        (2::bigint, null, null, null),
        (3::bigint, [], {'os': null, 'ver': null}, map([], []::bigint[]))
        ) v(id, tags, dev, attrs)""")
    t.append(rel)
    assert duck("select id, tags, dev, attrs from s order by id", s=t.scan()) == \
        rel.order("id").fetchall()
