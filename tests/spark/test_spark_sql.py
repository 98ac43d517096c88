"""Spark SQL over a registered caslake table (issue 32): ``spark.sql`` answers equal
DuckDB's over the same rows; the view is pinned to the version registered; bad
names and versions get caslake's typed errors."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

import caslake
import caslake.spark
from caslake.errors import InvalidArgument, TableNotFound, VersionNotFound

pytestmark = pytest.mark.spark

ORDERS = pa.schema([("id", pa.int64()), ("customer", pa.string()),
                    ("amount", pa.float64()), ("day", pa.date32())])
D0 = dt.date(2026, 1, 1)

QUERIES = [
    "SELECT id, customer, amount FROM orders "
    "WHERE (amount > 50 AND customer <> 'c3') OR customer IS NULL",
    "SELECT customer, count(*) AS n, count(amount) AS priced, round(sum(amount), 2) AS total "
    "FROM orders WHERE day >= DATE '2026-01-05' GROUP BY customer HAVING count(*) > 3",
    "WITH big AS (SELECT * FROM orders WHERE amount IS NOT NULL AND amount > 20) "
    "SELECT b.customer, count(*) AS n FROM big b JOIN orders o ON b.id = o.id + 1 "
    "GROUP BY b.customer",
    "SELECT id, row_number() OVER (PARTITION BY customer ORDER BY amount DESC, id) AS r "
    "FROM orders WHERE amount IS NOT NULL",
]


def orders(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": ids,
                     "customer": [None if i % 13 == 0 else f"c{i % 5}" for i in ids],
                     "amount": [None if i % 7 == 0 else round((i * 37 % 100) + 0.25, 2)
                                for i in ids],
                     "day": [D0 + dt.timedelta(days=i % 10) for i in ids]}, schema=ORDERS)


def normalized(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    def cell(v: object) -> object:
        return round(v, 6) if isinstance(v, float) and not math.isnan(v) else v
    return sorted((tuple(cell(v) for v in r) for r in rows), key=repr)


def test_spark_sql_over_a_registered_table_equals_duckdb(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = caslake.create_table(uri, ORDERS)
    table.append(orders(0, 120))
    table.append(orders(120, 200))
    table.delete("id % 11 = 3")  # the view must not see deleted rows
    assert caslake.spark.register_table(spark, "orders", uri) == table.version
    live = orders(0, 200).filter(pa.array([i % 11 != 3 for i in range(200)]))
    con = duckdb.connect()
    con.register("orders", live)
    for sql in QUERIES:
        got = [tuple(r) for r in spark.sql(sql).collect()]
        want = con.execute(sql).fetchall()
        assert normalized(got) == normalized(want), sql
        assert got, sql  # every query has rows to compare

    # Pinned to the version registered; registering again reads the new one.
    table.append(orders(200, 210))
    assert spark.sql("SELECT count(*) FROM orders").first()[0] == live.num_rows
    caslake.spark.register_table(spark, "orders", uri)
    assert spark.sql("SELECT count(*) FROM orders").first()[0] == live.num_rows + 10
    caslake.spark.register_table(spark, "orders_v1", uri, version=1)
    assert spark.sql("SELECT count(*) FROM orders_v1").first()[0] == 120

    # Writes are the Python calls: Spark refuses DML on the view.
    with pytest.raises(AnalysisException):
        spark.sql("DELETE FROM orders WHERE id = 1")


def test_register_table_bad_input_gets_typed_errors(spark: SparkSession,
                                                    tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, ORDERS).append(orders(0, 5))
    with pytest.raises(InvalidArgument, match="'my orders'"):
        caslake.spark.register_table(spark, "my orders", uri)
    with pytest.raises(TableNotFound):
        caslake.spark.register_table(spark, "nope", str(tmp_path / "missing"))
    with pytest.raises(VersionNotFound):
        caslake.spark.register_table(spark, "t_v9", uri, version=9)
