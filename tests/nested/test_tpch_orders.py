"""Real nested data: TPC-H orders with their line items, as DuckDB builds them.

DuckDB's ``tpch`` extension (from the ``duckdb-ext-tpch`` wheel, offline)
generates orders and lineitem at sf 0.01; DuckDB nests them into one row per
order -- a list of line-item structs, a struct of order facts, a list of ship
modes and a map of counts -- and keeps that as the reference table ``src``.
caslake takes the nested table in three batches, one each from pyarrow,
Polars and a DuckDB relation, and every scan, time travel and delete below is
compared with DuckDB's answer to the same question on ``src``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import caslake
from tests.export.readers import duck

NESTED_ORDERS = """
SELECT o.o_orderkey, o.o_custkey, o.o_orderdate, o.o_totalprice,
       {'priority': o.o_orderpriority, 'clerk': o.o_clerk, 'status': o.o_orderstatus} AS info,
       list(struct_pack(line := l.l_linenumber, part := l.l_partkey, qty := l.l_quantity,
                        price := l.l_extendedprice, shipdate := l.l_shipdate,
                        mode := l.l_shipmode) ORDER BY l.l_linenumber) AS items,
       list(DISTINCT l.l_shipmode ORDER BY l.l_shipmode) AS modes,
       map(['lines', 'returned'],
           [count(*), count(*) FILTER (WHERE l.l_returnflag = 'R')]) AS counts
FROM orders o JOIN lineitem l ON l.l_orderkey = o.o_orderkey
GROUP BY ALL
"""


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duck(("tpch",))
    c.execute("CALL dbgen(sf=0.01)")
    c.execute(f"CREATE TABLE src AS {NESTED_ORDERS} ORDER BY o_orderkey")
    return c


@pytest.fixture(scope="module")
def table(con: duckdb.DuckDBPyConnection, tmp_path_factory: pytest.TempPathFactory
          ) -> caslake.Table:
    """The nested orders, appended in three batches: pyarrow, Polars, DuckDB."""
    import polars as pl

    src = con.execute("SELECT * FROM src ORDER BY o_orderkey").fetch_arrow_table()
    t = caslake.create_table(str(tmp_path_factory.mktemp("nested") / "orders"), src.schema)
    third = src.num_rows // 3
    t.append(src.slice(0, third))  # pyarrow
    t.append(pl.from_arrow(src.slice(third, third)))  # Polars (string views)
    last = src.column("o_orderkey")[2 * third].as_py()
    t.append(con.sql(f"SELECT * FROM src WHERE o_orderkey >= {last}"))  # a DuckDB relation
    return t


def rows(t: pa.Table, key: str = "o_orderkey") -> list[dict[str, Any]]:
    return t.sort_by(key).to_pylist()


def duck_rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    return con.execute(sql).fetch_arrow_table().to_pylist()


def leaf(t: pa.Table, path: str) -> list[Any]:
    """The values at dotted ``path`` of a result, whether the scan kept the struct
    shape or returned the leaf as its own column."""
    if path in t.column_names:
        return t.column(path).to_pylist()
    top, *rest = path.split(".")
    col: Any = t.column(top)
    for name in rest:
        col = pc.struct_field(col, name)
    return list(col.to_pylist())


def keys(t: pa.Table) -> list[int]:
    return sorted(t.column("o_orderkey").to_pylist())


def duck_keys(con: duckdb.DuckDBPyConnection, where: str) -> list[int]:
    return [r[0] for r in con.execute(
        f"SELECT o_orderkey FROM src WHERE {where} ORDER BY 1").fetchall()]


def test_full_scan_equals_duckdb(con: duckdb.DuckDBPyConnection, table: caslake.Table) -> None:
    got = table.scan().to_arrow()
    assert got.num_rows == con.execute("SELECT count(*) FROM src").fetchone()[0]  # type: ignore[index]
    assert rows(got) == duck_rows(con, "SELECT * FROM src ORDER BY o_orderkey")


def test_projected_leaves_equal_duckdb(con: duckdb.DuckDBPyConnection,
                                       table: caslake.Table) -> None:
    got = table.scan(columns=["o_orderkey", "info.priority"]).to_arrow().sort_by("o_orderkey")
    want = con.execute("SELECT info.priority FROM src ORDER BY o_orderkey").fetchall()
    assert leaf(got, "info.priority") == [r[0] for r in want]


@pytest.mark.parametrize(("ours", "theirs"), [
    ("info.priority = '1-URGENT'", "info.priority = '1-URGENT'"),
    ("info['status'] = 'F'", "info.status = 'F'"),
    ("cardinality(items) > 5", "len(items) > 5"),
    ("array_contains(modes, 'AIR')", "list_contains(modes, 'AIR')"),
    ("counts['returned'] >= 3", "counts['returned'] >= 3"),
    ("element_at(counts, 'lines') = 7", "counts['lines'] = 7"),
])
def test_nested_predicates_equal_duckdb(con: duckdb.DuckDBPyConnection, table: caslake.Table,
                                        ours: str, theirs: str) -> None:
    assert keys(table.scan(where=ours).to_arrow()) == duck_keys(con, theirs)


def test_time_travel_equals_duckdb(con: duckdb.DuckDBPyConnection, table: caslake.Table) -> None:
    first = 1  # version 1: the pyarrow batch
    got = table.scan(version=first).to_arrow()
    n = con.execute("SELECT count(*) FROM src").fetchone()[0] // 3  # type: ignore[index]
    want = duck_rows(con, f"SELECT * FROM src ORDER BY o_orderkey LIMIT {n}")
    assert rows(got) == want


def test_delete_by_nested_predicate_equals_duckdb(con: duckdb.DuckDBPyConnection,
                                                  table: caslake.Table, tmp_path: Path) -> None:
    t = caslake.clone(table.uri, str(tmp_path / "fork"))
    t.delete("info.status = 'F' AND cardinality(items) >= 4")
    want = duck_rows(con, "SELECT * FROM src WHERE NOT (info.status = 'F' AND len(items) >= 4) "
                          "ORDER BY o_orderkey")
    assert rows(t.scan().to_arrow()) == want
    # the source is untouched
    assert table.scan().count() == con.execute("SELECT count(*) FROM src").fetchone()[0]  # type: ignore[index]
