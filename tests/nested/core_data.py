"""Shared data for the nested-type core tests: a schema with lists, structs, maps
(nulls at every level) and the newer primitives, and rows of it."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ITEM = pa.struct([("sku", pa.string()), ("price", pa.float64()), ("qty", pa.int32())])
SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("tags", pa.list_(pa.string())),
    ("dev", pa.struct([("os", pa.string()), ("ver", pa.int32()),
                       ("geo", pa.struct([("lat", pa.float64()), ("lon", pa.float64())]))])),
    ("items", pa.list_(ITEM)),
    ("attrs", pa.map_(pa.string(), pa.int64())),
    ("grid", pa.list_(pa.list_(pa.int16()))),
])
PRIMS = pa.schema([
    ("id", pa.int64()),
    ("t32", pa.time32("s")), ("t32ms", pa.time32("ms")), ("t64", pa.time64("us")),
    ("d64", pa.date64()), ("dec32", pa.decimal32(7, 2)), ("dec64", pa.decimal64(15, 3)),
    ("dec256", pa.decimal256(40, 5)), ("u", pa.uuid()), ("h", pa.float16()),
    ("fsb", pa.binary(3)),
])


def nested_rows(start: int, n: int) -> pa.Table:
    """``n`` rows of :data:`SCHEMA` with ids from ``start``; every level has nulls."""
    rows: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for i in range(start, start + n):
        rows["id"].append(i)
        rows["tags"].append(None if i % 7 == 3 else [] if i % 7 == 4 else
                            [f"t{i % 5}", None if i % 3 == 0 else f"u{i}"])
        rows["dev"].append(None if i % 6 == 5 else {
            "os": None if i % 4 == 1 else ["ios", "android", "linux"][i % 3],
            "ver": i % 13, "geo": None if i % 5 == 2 else {"lat": i / 7, "lon": None}})
        rows["items"].append(None if i % 9 == 8 else [
            {"sku": f"s{i}", "price": i * 0.5, "qty": i % 4},
            None if i % 2 else {"sku": None, "price": None, "qty": None}])
        rows["attrs"].append(None if i % 8 == 7 else [("a", i), ("b", None)] if i % 2 else [])
        rows["grid"].append(None if i % 10 == 9 else [[i % 3, None], None, []])
    return pa.table(rows, schema=SCHEMA)


def prim_rows(start: int, n: int) -> pa.Table:
    """``n`` rows of :data:`PRIMS` with nulls."""
    def maybe(i: int, v: Any) -> Any:
        return None if i % 4 == 3 else v
    ids = list(range(start, start + n))
    return pa.table({
        "id": ids,
        "t32": [maybe(i, dt.time(i % 24, i % 60, 7)) for i in ids],
        "t32ms": [maybe(i, dt.time(1, 2, 3, 4000)) for i in ids],
        "t64": [maybe(i, dt.time(5, 6, 7, i % 1000)) for i in ids],
        "d64": [maybe(i, dt.date(2020, 1, 1) + dt.timedelta(days=i)) for i in ids],
        "dec32": [maybe(i, Decimal(i) / 100) for i in ids],
        "dec64": [maybe(i, Decimal(i * 1000 + 7) / 1000) for i in ids],
        "dec256": [maybe(i, Decimal(10) ** 30 + Decimal(i) / 100000) for i in ids],
        "u": pa.array([maybe(i, uuid.UUID(int=i * 7919).bytes) for i in ids],
                      pa.binary(16)).cast(pa.uuid()),
        "h": pa.array(np.array([float(i % 50) / 4 for i in ids], dtype=np.float16),
                      mask=np.array([i % 4 == 3 for i in ids])),
        "fsb": [maybe(i, bytes([i % 256, 1, 2])) for i in ids],
    }, schema=PRIMS)


def plain(t: pa.Table) -> pa.Table:
    """``t`` without field metadata, for equality with another engine's output."""
    return pa.table({n: t.column(n) for n in t.column_names}).cast(
        pa.schema([f.remove_metadata() for f in t.schema]))


def strip_ids(t: pa.DataType) -> pa.DataType:
    """``t`` without field ids at any level (Arrow compares child metadata)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, strip_ids(f.type), f.nullable) for f in t])
    if pa.types.is_list(t):
        f = t.value_field
        return pa.list_(pa.field(f.name, strip_ids(f.type), f.nullable))
    if pa.types.is_map(t):
        return pa.map_(pa.field("key", strip_ids(t.key_type), False),
                       pa.field("value", strip_ids(t.item_type), t.item_field.nullable))
    return t


def duck(sql: str, **tables: Any) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` run by DuckDB over the Arrow objects ``tables`` (by name)."""
    con = duckdb.connect()
    for name, obj in tables.items():
        con.register(name, obj)
    return con.sql(sql).fetchall()


def duckdb_rows(path: str, sql_cols: str = "*", order: str = "id") -> list[tuple[Any, ...]]:
    """The rows of Parquet file(s) ``path`` as DuckDB reads them."""
    return duckdb.sql(f"select {sql_cols} from read_parquet('{path}') order by {order}"
                      ).fetchall()


def write_reference(t: pa.Table, path: str) -> str:
    """``t`` written by pyarrow as a plain Parquet file (the independent reference)."""
    pq.write_table(t, path)
    return path
