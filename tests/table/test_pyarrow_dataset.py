"""``Table.to_pyarrow_dataset()``: DuckDB and Polars push projection and filter into
caslake's scan, deleted rows stay dropped, and any filter gives pyarrow's answer.

TPC-H lineitem (DuckDB's ``tpch`` extension, sf 0.05) is appended to a table and a
fifth of it deleted; ``select count(*) ... where l_shipdate = DATE '1995-03-15'``
over the dataset must read at most a tenth of the table's bytes (the store's
counters) and equal DuckDB's own answer on the raw rows without the deleted ones.
The filter translation is checked against pyarrow's dataset over the same live
rows for filters it translates, half-translates, and cannot read."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest

import caslake
from caslake.errors import InvalidArgument
from tests.export.readers import duck

DAY = "DATE '1995-03-15'"
DELETED = "l_orderkey % 5 = 0"


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duck(("tpch",))
    c.execute("CALL dbgen(sf=0.05)")
    return c


@pytest.fixture(scope="module")
def lineitem(con: duckdb.DuckDBPyConnection, tmp_path_factory: pytest.TempPathFactory
             ) -> caslake.Table:
    data = con.execute("SELECT * FROM lineitem").fetch_arrow_table()
    t = caslake.create_table(str(tmp_path_factory.mktemp("tpch") / "lineitem"), data.schema,
                             write_options=caslake.WriteOptions(target_file_size=4 << 20,
                                                                row_group_size=1 << 20))
    t.append(data)
    t.delete(DELETED)
    return t


def _bytes(t: caslake.Table) -> int:
    return sum(f["bytes"] for f in t.live_files())


def test_duckdb_pushes_the_filter_and_reads_a_tenth(con: duckdb.DuckDBPyConnection,
                                                   lineitem: caslake.Table) -> None:
    t = caslake.open_table(lineitem.uri)
    ds = t.to_pyarrow_dataset()
    assert isinstance(ds, pads.Dataset)
    t.store.counters.reset()
    got = con.sql(f"select count(*) from ds where l_shipdate = {DAY}").fetchall()
    read = t.store.counters.bytes_in
    want = con.sql(f"select count(*) from lineitem where l_shipdate = {DAY} "
                   f"and not ({DELETED})").fetchall()
    assert got == want and want[0][0] > 0
    assert read * 10 <= _bytes(t), (read, _bytes(t))
    # the table read whole, as a stream, for comparison: every byte
    t.store.counters.reset()
    con.sql(f"select count(*) from t where l_shipdate = {DAY}").fetchall()
    assert t.store.counters.bytes_in > 5 * read
    rows = con.sql("select l_orderkey, l_linenumber, l_quantity from ds where l_shipdate "
                   f"between {DAY} and DATE '1995-03-20' and l_returnflag = 'R' "
                   "order by 1, 2").fetchall()
    assert rows == con.sql("select l_orderkey, l_linenumber, l_quantity from lineitem where "
                           f"l_shipdate between {DAY} and DATE '1995-03-20' and "
                           f"l_returnflag = 'R' and not ({DELETED}) order by 1, 2").fetchall()


def _column_bytes(t: caslake.Table, names: list[str]) -> int:
    """Stored bytes of the column chunks of ``names`` in every live file."""
    import pyarrow.parquet as pq

    total = 0
    for f in t.live_files():
        md = pq.ParquetFile(f["uri"].removeprefix("file://")).metadata
        idx = [i for i in range(md.num_columns) if md.schema.column(i).name in names]
        total += sum(md.row_group(r).column(i).total_compressed_size
                     for r in range(md.num_row_groups) for i in idx)
    return total


def test_polars_pushes_the_filter_and_the_projection(con: duckdb.DuckDBPyConnection,
                                                     lineitem: caslake.Table) -> None:
    """Polars asks for the filter's column and, for a row count, the first column
    too: exactly their chunks are read (and the tombstones)."""
    import polars as pl

    t = caslake.open_table(lineitem.uri)
    ds = t.to_pyarrow_dataset()
    tombstones = sum(r.size for r in t.snapshot.manifest.tombstones)
    want = con.sql(f"select count(*) from lineitem where l_shipdate = {DAY} "
                   f"and not ({DELETED})").fetchone()
    assert want is not None
    on_day = pl.scan_pyarrow_dataset(ds).filter(pl.col("l_shipdate") == dt.date(1995, 3, 15))
    t.store.counters.reset()
    assert on_day.select(pl.col("l_shipdate").count()).collect().item() == want[0]
    read = t.store.counters.bytes_in
    assert read <= _column_bytes(t, ["l_shipdate"]) + tombstones + 64 * 1024
    assert read * 10 <= _bytes(t), (read, _bytes(t))
    t.store.counters.reset()
    assert on_day.select(pl.len()).collect().item() == want[0]
    read = t.store.counters.bytes_in
    assert read <= _column_bytes(t, ["l_orderkey", "l_shipdate"]) + tombstones + 64 * 1024
    assert read * 5 <= _bytes(t), (read, _bytes(t))
    keys = (pl.scan_pyarrow_dataset(ds).filter(pl.col("l_partkey") < 50)
            .select("l_orderkey", "l_linenumber").sort("l_orderkey", "l_linenumber").collect())
    assert keys.rows() == con.sql(
        f"select l_orderkey, l_linenumber from lineitem where l_partkey < 50 and not "
        f"({DELETED}) order by 1, 2").fetchall()


def test_the_dataset_is_pinned_and_counts_from_metadata(lineitem: caslake.Table,
                                                        con: duckdb.DuckDBPyConnection) -> None:
    t = caslake.open_table(lineitem.uri)
    ds = t.to_pyarrow_dataset()
    live = con.sql(f"select count(*) from lineitem where not ({DELETED})").fetchone()
    masks = sum(r.size for r in t.snapshot.manifest.tombstones)
    t.store.counters.reset()
    assert live is not None and ds.count_rows() == live[0]
    assert t.store.counters.bytes_in == masks  # no data file: the tombstones only
    assert ds.scanner(columns=[]).count_rows() == live[0]  # no column: the same count
    assert t.store.counters.bytes_in == masks  # and they are cached
    big = pc.field("l_quantity") > pa.scalar(Decimal(49), pa.decimal128(15, 2))
    assert ds.count_rows(filter=big) == con.sql(
        f"select count(*) from lineitem where l_quantity > 49 and not ({DELETED})").fetchone()[0]
    head = ds.head(5, columns=["l_orderkey"])
    assert head.num_rows == 5 and head.column_names == ["l_orderkey"]
    assert t.to_pyarrow_dataset(version=1).count_rows() == con.sql(
        "select count(*) from lineitem").fetchone()[0]
    with pytest.raises(InvalidArgument):
        ds.take([0])
    with pytest.raises(InvalidArgument):
        ds.to_table(filter="l_quantity > 3")
    with pytest.raises(InvalidArgument, match="filter"):  # pyarrow's refusal, typed
        ds.count_rows(filter=pc.field("l_quantity") > 49)
    with pytest.raises(InvalidArgument, match="filter"):
        ds.to_table(filter=pc.field("l_nope") == 1)


# --- the filter translation against pyarrow's own answers --------------------------------

TS = pa.timestamp("us")
SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("d", pa.date32()), ("t", TS),
                    ("x", pa.float64()), ("big name", pa.int32()),
                    ("s", pa.struct([("n", pa.int64())])), ("dec", pa.decimal128(10, 2))])


def _rows(n: int) -> pa.Table:
    rng = np.random.default_rng(5)
    a = [None if i % 11 == 0 else int(v) for i, v in enumerate(rng.integers(-5, 50, n))]
    b = [None if i % 13 == 0 else ['x', 'q"u\'o\\te', "x y", "", "é"][i % 5] for i in range(n)]
    x = [None if i % 17 == 0 else float("nan") if i % 19 == 0 else float(v)
         for i, v in enumerate(rng.normal(0, 10, n))]
    return pa.table({
        "a": pa.array(a, pa.int64()), "b": pa.array(b, pa.string()),
        "d": pa.array([dt.date(1995, 3, 1) + dt.timedelta(days=i % 40) for i in range(n)]),
        "t": pa.array([dt.datetime(2020, 1, 1) + dt.timedelta(seconds=97 * i)
                       for i in range(n)], TS),
        "x": pa.array(x, pa.float64()), "big name": pa.array(range(n), pa.int32()),
        "s": pa.array([None if i % 7 == 0 else {"n": i % 9} for i in range(n)],
                      SCHEMA.field("s").type),
        "dec": pa.array([Decimal(i % 300) / 100 for i in range(n)], pa.decimal128(10, 2))},
        schema=SCHEMA)


f = pc.field
FILTERS: list[Any] = [
    f("a") == 2, f("a") != 2, (f("a") >= 2) & (f("b") == "x"),
    (f("a") < 2) | ~(f("b") == 'q"u\'o\\te'), f("b") == "x y", f("b") == "",
    f("d") == pa.scalar(dt.date(1995, 3, 15)), f("d") > pa.scalar(dt.date(1995, 3, 30)),
    f("t") >= pa.scalar(dt.datetime(2020, 1, 1, 2, 0, 0, 500)),
    f("x") == float("nan"), f("x") > 3.5, f("x") < pa.scalar(-1), ~(f("x") > 0),
    f("a").is_null(), f("a").is_valid(), ~f("a").is_null(), f("x").is_null(nan_is_null=True),
    f("a").isin([1, 2, 3]), ~f("a").isin([1, 2]), f("b").isin(["x", "é"]),
    f("a").isin(pa.array([1, None], pa.int64())), ~f("a").isin(pa.array([1, None], pa.int64())),
    f("s", "n") == 1, ~(f("s", "n") == 1), (f("big name") < 100) & pc.starts_with(f("b"), "x"),
    ~((f("a") == 1) & pc.starts_with(f("b"), "x")), f("dec") > pa.scalar(Decimal("1.25")),
    f("a") == 2.5, f("a") < f("big name"), f("a").cast(pa.float64()) > 3,
    pc.and_kleene(f("a") > 1, f("x") > 0), ~pc.or_kleene(f("a") > 1, f("x") > 0),
    pc.scalar(True), pc.scalar(False), f("d").isin([dt.date(1995, 3, 2), dt.date(1995, 3, 9)]),
]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[caslake.Table, pa.Table]:
    data = _rows(3000)
    t = caslake.create_table(str(tmp_path_factory.mktemp("f") / "t"), SCHEMA,
                             write_options=caslake.WriteOptions(row_group_size=16 * 1024))
    t.append(data.slice(0, 1500))
    t.append(data.slice(1500))
    t.delete("a = 7 OR b = 'é'")
    keep = pc.invert(pc.fill_null(pc.or_kleene(pc.equal(data["a"], 7),
                                               pc.equal(data["b"], "é")), False))
    return t, data.filter(keep)


@pytest.mark.parametrize("expr", FILTERS, ids=[str(e)[:60] for e in FILTERS])
def test_any_filter_equals_pyarrow(small: tuple[caslake.Table, pa.Table], expr: Any) -> None:
    t, live = small
    ds = t.to_pyarrow_dataset()
    got = ds.to_table(filter=expr, columns=["big name", "a"]).sort_by("big name")
    want = pads.dataset(live).to_table(filter=expr, columns=["big name", "a"]
                                       ).sort_by("big name")
    assert got.equals(want)
