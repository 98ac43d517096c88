"""Shared pieces of the multi-table transaction tests: two small tables and
readers that go around caslake (DuckDB over the live Parquet files)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

import caslake

ORDERS = pa.schema([("id", pa.int64()), ("customer", pa.string()), ("total", pa.float64())])
ITEMS = pa.schema([("order_id", pa.int64()), ("sku", pa.string()), ("qty", pa.int64())])


def two_tables(root: Path | str) -> tuple[caslake.Table, caslake.Table]:
    orders = caslake.create_table(f"{root}/orders", ORDERS)
    items = caslake.create_table(f"{root}/items", ITEMS)
    orders.append(pa.table({"id": [1, 2, 3], "customer": ["ann", "bob", "cy"],
                            "total": [10.0, 20.0, 30.0]}, schema=ORDERS))
    items.append(pa.table({"order_id": [1, 1, 2, 3], "sku": ["a", "b", "a", "c"],
                           "qty": [1, 2, 3, 4]}, schema=ITEMS))
    return orders, items


def rows(table: pa.Table, order: str) -> list[tuple[object, ...]]:
    """``table``'s rows sorted by ``order`` through DuckDB (an independent engine)."""
    con = duckdb.connect()
    con.register("t", table)
    return [tuple(r) for r in con.execute(f"SELECT * FROM t ORDER BY {order}").fetchall()]


def data_keys(t: caslake.Table) -> set[str]:
    return {m.key for m in t.store.list("data/")}
