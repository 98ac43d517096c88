"""UPDATE and MERGE on TPC-H ``orders`` and ``lineitem`` (sf 0.01, DuckDB's
``tpch`` extension, offline) equal DuckDB running the same ``UPDATE`` and
``MERGE INTO`` statements on the same rows."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import caslake
from caslake.core import WriteOptions
from tests.export.readers import duck


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duck(("tpch",))
    c.execute("CALL dbgen(sf=0.01)")
    return c


def load(con: duckdb.DuckDBPyConnection, name: str, root: Path) -> caslake.Table:
    data = con.execute(f"SELECT * FROM {name}").fetch_arrow_table()
    t = caslake.create_table(str(root / name), data.schema,
                             write_options=WriteOptions(row_group_size=64 * 1024))
    third = data.num_rows // 3
    for i in range(3):
        t.append(data.slice(i * third, third if i < 2 else None))
    return t


def same(t: caslake.Table, con: duckdb.DuckDBPyConnection, name: str, order: str) -> None:
    want = con.execute(f"SELECT * FROM {name} ORDER BY {order}").fetch_arrow_table()
    # A connection of its own: a name on the default one can shadow the local.
    own = duckdb.connect()
    got = own.from_arrow(t.to_arrow()).order(order).fetch_arrow_table()
    assert got.num_rows == want.num_rows
    assert got.cast(want.schema).equals(want)


UPDATES = [
    ({"o_orderstatus": "'C'", "o_totalprice": "o_totalprice * 1.1"},
     "o_orderdate < DATE '1993-01-01' AND o_orderpriority = '1-URGENT'",
     "UPDATE o SET o_orderstatus = 'C', o_totalprice = o_totalprice * 1.1 "
     "WHERE o_orderdate < DATE '1993-01-01' AND o_orderpriority = '1-URGENT'"),
    ({"o_comment": "upper(o_comment)", "o_shippriority": "o_shippriority + 1"},
     "o_custkey BETWEEN 100 AND 400",
     "UPDATE o SET o_comment = upper(o_comment), o_shippriority = o_shippriority + 1 "
     "WHERE o_custkey BETWEEN 100 AND 400"),
]


def test_update_orders_equals_duckdb(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    con.execute("CREATE OR REPLACE TABLE o AS SELECT * FROM orders")
    t = load(con, "orders", tmp_path)
    for set_, where, sql in UPDATES:
        v = t.version
        t.update(set=set_, where=where)
        con.execute(sql)
        assert t.version == v + 1
        same(t, con, "o", "o_orderkey")


def test_update_lineitem_equals_duckdb(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    con.execute("CREATE OR REPLACE TABLE l AS SELECT * FROM lineitem")
    t = load(con, "lineitem", tmp_path)
    t.update(set={"l_discount": "l_discount + 0.01", "l_returnflag": "'X'",
                  "l_extendedprice": caslake.col("l_extendedprice") * 2},
             where="l_shipdate BETWEEN DATE '1995-03-01' AND DATE '1995-03-31'")
    con.execute("UPDATE l SET l_discount = l_discount + 0.01, l_returnflag = 'X', "
                "l_extendedprice = l_extendedprice * 2 "
                "WHERE l_shipdate BETWEEN DATE '1995-03-01' AND DATE '1995-03-31'")
    same(t, con, "l", "l_orderkey, l_linenumber")


MERGES = [
    # a CDC batch: some orders change, some are cancelled, new ones arrive
    ("WHEN MATCHED AND source.o_orderstatus = 'F' THEN DELETE "
     "WHEN MATCHED THEN UPDATE SET o_totalprice = source.o_totalprice, "
     "o_comment = source.o_comment "
     "WHEN NOT MATCHED THEN INSERT *",
     lambda m: m.when_matched_delete(condition="source.o_orderstatus = 'F'")
     .when_matched_update(set={"o_totalprice": "source.o_totalprice",
                               "o_comment": "source.o_comment"})
     .when_not_matched_insert_all()),
    ("WHEN MATCHED AND target.o_orderpriority = '5-LOW' THEN UPDATE SET "
     "o_shippriority = target.o_shippriority + 7 "
     "WHEN NOT MATCHED BY SOURCE AND target.o_orderdate < DATE '1992-03-01' THEN DELETE "
     "WHEN NOT MATCHED BY SOURCE AND target.o_custkey < 50 THEN UPDATE SET o_clerk = 'gone'",
     lambda m: m.when_matched_update(set={"o_shippriority": "target.o_shippriority + 7"},
                                     condition="target.o_orderpriority = '5-LOW'")
     .when_not_matched_by_source_delete(condition="target.o_orderdate < DATE '1992-03-01'")
     .when_not_matched_by_source_update(set={"o_clerk": "'gone'"},
                                        condition="target.o_custkey < 50")),
]

SOURCE = """
SELECT o_orderkey + CASE WHEN o_orderkey % 4 = 0 THEN 1000000 ELSE 0 END AS o_orderkey,
       o_custkey, o_orderstatus, o_totalprice * 2 AS o_totalprice, o_orderdate,
       o_orderpriority, o_clerk, o_shippriority, 'merged ' || o_comment AS o_comment
FROM orders WHERE o_orderkey % 3 = 0
"""


@pytest.mark.parametrize(("sql", "build"), MERGES)
def test_merge_orders_equals_duckdb(con: duckdb.DuckDBPyConnection, tmp_path: Path,
                                    sql: str, build) -> None:  # type: ignore[no-untyped-def]
    con.execute("CREATE OR REPLACE TABLE o AS SELECT * FROM orders")
    con.execute(f"CREATE OR REPLACE TABLE s AS {SOURCE}")
    source = con.execute("SELECT * FROM s").fetch_arrow_table()
    t = load(con, "orders", tmp_path)
    v = t.version
    build(t.merge(source, on=["o_orderkey"])).execute()
    assert t.version == v + 1
    con.execute(f"MERGE INTO o AS target USING s AS source "
                f"ON target.o_orderkey = source.o_orderkey {sql}")
    same(t, con, "o", "o_orderkey")


def test_merge_lineitem_on_two_keys(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    con.execute("CREATE OR REPLACE TABLE l AS SELECT * FROM lineitem")
    con.execute("CREATE OR REPLACE TABLE s AS SELECT * REPLACE (l_quantity + 1 AS l_quantity) "
                "FROM lineitem WHERE l_orderkey % 5 = 0 UNION ALL "
                "SELECT * REPLACE (l_linenumber + 10 AS l_linenumber) FROM lineitem "
                "WHERE l_orderkey % 97 = 0")
    source = con.execute("SELECT * FROM s").fetch_arrow_table()
    t = load(con, "lineitem", tmp_path)
    t.merge(source, on=["l_orderkey", "l_linenumber"]) \
        .when_matched_update(set={"l_quantity": "source.l_quantity"},
                             condition="source.l_shipmode <> 'AIR'") \
        .when_not_matched_insert_all().execute()
    con.execute("MERGE INTO l AS target USING s AS source ON target.l_orderkey = "
                "source.l_orderkey AND target.l_linenumber = source.l_linenumber "
                "WHEN MATCHED AND source.l_shipmode <> 'AIR' THEN UPDATE SET "
                "l_quantity = source.l_quantity WHEN NOT MATCHED THEN INSERT *")
    same(t, con, "l", "l_orderkey, l_linenumber")


def test_update_change_feed_on_orders(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    t = load(con, "orders", tmp_path)
    v = t.version + 1
    t.update(set={"o_totalprice": "o_totalprice + 1"}, where="o_custkey < 200")
    feed = t.changes(v, v).to_arrow()
    pre = [r for r in feed.to_pylist() if r["_change_type"] == "update_preimage"]
    post = [r for r in feed.to_pylist() if r["_change_type"] == "update_postimage"]
    want = con.execute("SELECT o_orderkey, o_totalprice FROM orders WHERE o_custkey < 200 "
                       "ORDER BY o_orderkey").fetchall()
    assert len(pre) == len(post) == len(want) == feed.num_rows // 2
    for a, b in zip(pre, post, strict=True):
        assert a["o_orderkey"] == b["o_orderkey"]
        assert b["o_totalprice"] == a["o_totalprice"] + 1
    assert sorted((a["o_orderkey"], a["o_totalprice"]) for a in pre) == want
