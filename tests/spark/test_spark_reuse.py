"""One loaded ``caslake`` DataFrame reused by many queries (issue 27).

PySpark 4.3 keeps the read planned by a query's filter pushdown on the
DataFrame's data source object and reuses it for every later query of that
DataFrame that pushes no filter, so no query may depend on filters pushed by
another.  The differential test runs seeded random query sequences over one
loaded DataFrame and compares every answer with Spark's own Parquet reader on
the same rows.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import EqualTo, GreaterThan, IsNull, LessThan

import caslake
import caslake.spark
from caslake.spark.source import CaslakeDataSource

pytestmark = [pytest.mark.spark]

N = 10_000
SCHEMA = pa.schema([("x", pa.int64()), ("y", pa.int64()), ("s", pa.string()),
                    ("n", pa.int64())])


def _rows(lo: int, hi: int) -> pa.Table:
    xs = list(range(lo, hi))
    return pa.table({"x": xs, "y": [i % 100 for i in xs],
                     "s": [None if i % 11 == 0 else f"s{i % 7}" for i in xs],
                     "n": [None if i % 5 == 0 else i % 97 for i in xs]}, schema=SCHEMA)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A caslake table of N rows in four files (disjoint x ranges, so pruning by x
    drops files) with 100 tombstoned rows, and a Parquet file of the same live rows."""
    root = tmp_path_factory.mktemp("reuse")
    uri = str(root / "t")
    table = caslake.create_table(uri, SCHEMA)
    step = (N + 100) // 4
    for lo in range(0, N + 100, step):
        table.append(_rows(lo, min(lo + step, N + 100)))
    table.delete(f"x >= {N}")  # tombstones must hold for every query too
    pq_dir = root / "pq"
    pq_dir.mkdir()
    pq.write_table(_rows(0, N), str(pq_dir / "part-0.parquet"))
    return uri, str(pq_dir)


PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(params=["true", "false"])
def pushdown(spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    """Both settings of Spark's Python filter pushdown (a user may turn it on for
    another source; the reader must give the same rows either way)."""
    before = spark.conf.get(PUSHDOWN)
    spark.conf.set(PUSHDOWN, request.param)
    yield str(request.param)
    spark.conf.set(PUSHDOWN, str(before))


def test_a_pushed_filter_does_not_stick_to_the_dataframe(
        spark: SparkSession, tables: tuple[str, str], tmp_path: Path, pushdown: str) -> None:
    uri, _ = tables
    df = spark.read.format("caslake").load(uri)
    assert df.where("y > 90").count() == 900
    assert df.count() == N
    assert df.where("y < 10").count() == 1000
    assert df.count() == N
    assert len(df.collect()) == N
    df.createOrReplaceTempView("reuse_v")
    assert spark.sql("select count(*) from reuse_v").collect()[0][0] == N
    assert spark.sql("select count(*) from reuse_v where s = 's3'").collect()[0][0] == \
        sum(1 for i in range(N) if i % 11 and i % 7 == 3)
    assert df.count() == N
    assert df.where("n is null").count() == N // 5
    other = str(tmp_path / "copy")
    caslake.spark.save(df, other, mode="overwrite")
    assert caslake.open_table(other).scan().count() == N


def test_reader_rows_do_not_depend_on_pushed_filters(tables: tuple[str, str]) -> None:
    """Whatever pushFilters is handed, the reader's partitions cover every live row:
    Spark may reuse the reader (pickled into its read function) for a query that
    pushes nothing, so pushed filters must not narrow what it returns."""
    uri, _ = tables
    source = CaslakeDataSource({"path": uri})
    schema = source.schema()
    plain = source.reader(schema)
    pushed = source.reader(schema)
    filters = [GreaterThan(("y",), 90), LessThan(("x",), 100), EqualTo(("s",), "s3"),
               IsNull(("n",))]
    rest = list(pushed.pushFilters(list(filters)))
    assert rest == filters, "every filter stays with Spark"

    def rows_of(reader: Any) -> int:
        return sum(b.num_rows for p in reader.partitions() for b in reader.read(p))

    assert rows_of(pushed) == rows_of(plain) == N


# --- differential: random query sequences against Spark's Parquet reader ----------

FILTERS = [None, None, None, "y > 90", "y < 10", "x between 1000 and 2600", "x < 300",
           "x >= 9000", "s = 's3'", "s in ('s1', 's5')", "s is null", "s is not null",
           "n is null", "n is not null", "n > 50", "x % 7 = 3", "s like 's1%'",
           "y >= 50 and s <> 's2'", "not (x > 5000)", "n = 13 or y = 4"]
COLUMNS = [None, ["x"], ["s", "n"], ["y", "x", "s"]]


def _query(rng: random.Random) -> tuple[str, str | None, list[str] | None]:
    return rng.choice(["count", "collect", "sql"]), rng.choice(FILTERS), rng.choice(COLUMNS)


def _run(spark: SparkSession, df: DataFrame, view: str, q: tuple[str, str | None,
                                                             list[str] | None]) -> Any:
    kind, where, cols = q
    if kind == "sql":
        sel = ", ".join(cols) if cols else "*"
        text = f"select {sel} from {view}" + (f" where {where}" if where else "")
        return sorted((tuple(r) for r in spark.sql(text).collect()), key=repr)
    out = df.where(where) if where else df
    if cols:
        out = out.select(*cols)
    if kind == "count":
        return out.count()
    return sorted((tuple(r) for r in out.collect()), key=repr)


@pytest.mark.parametrize(("seed", "pushdown_conf"), [(1, "true"), (2, "false"), (3, "true")])
def test_b_random_query_sequences_match_parquet(
        spark: SparkSession, tables: tuple[str, str], seed: int, pushdown_conf: str) -> None:
    before = spark.conf.get(PUSHDOWN)
    spark.conf.set(PUSHDOWN, pushdown_conf)
    try:
        _differential(spark, tables, seed)
    finally:
        spark.conf.set(PUSHDOWN, str(before))


def _size(result: Any) -> int:
    return result if isinstance(result, int) else len(result)


def _differential(spark: SparkSession, tables: tuple[str, str], seed: int) -> None:
    uri, pq_dir = tables
    rng = random.Random(seed)
    cl = spark.read.format("caslake").load(uri)  # ONE DataFrame for the whole sequence
    pqdf = spark.read.parquet(pq_dir)
    cl.createOrReplaceTempView(f"cl_{seed}")
    pqdf.createOrReplaceTempView(f"pq_{seed}")
    # Start with a filtered query, then one without: the order that leaked before.
    seq = [("count", "y > 90", None), ("count", None, None)] + \
        [_query(rng) for _ in range(12)]
    wrong = []
    for i, q in enumerate(seq):
        got = _run(spark, cl, f"cl_{seed}", q)
        want = _run(spark, pqdf, f"pq_{seed}", q)
        if got != want:
            wrong.append(f"query {i} {q}: caslake {_size(got)} rows, parquet {_size(want)}")
    assert not wrong, f"seed {seed}: " + "; ".join(wrong)


def test_the_where_option_prunes_and_is_part_of_the_dataframe(
        spark: SparkSession, tables: tuple[str, str]) -> None:
    """``option("where", ...)`` is the DataFrame's own predicate: its read is pruned
    (fewer partitions: whole files drop out) and every later query of that DataFrame,
    reused or through a view, sees exactly the matching rows, as the same filter
    applied to Spark's Parquet reader gives them."""
    uri, pq_dir = tables
    where = "x < 2000 AND s IS NOT NULL"
    narrow = spark.read.format("caslake").option("where", where).load(uri)
    whole = spark.read.format("caslake").load(uri)
    plain = spark.read.parquet(pq_dir).where(where)
    assert narrow.rdd.getNumPartitions() < whole.rdd.getNumPartitions()
    want = plain.count()
    assert 0 < want < N
    assert narrow.count() == want
    assert narrow.where("y > 50").count() == plain.where("y > 50").count()
    assert narrow.count() == want  # reused after a filtered query
    narrow.createOrReplaceTempView("narrow_v")
    assert spark.sql("select count(*) from narrow_v").collect()[0][0] == want
    assert sorted(narrow.collect()) == sorted(plain.select(*narrow.columns).collect())
    assert whole.count() == N  # another DataFrame of the table is not narrowed


def test_a_bad_where_option_is_refused_naming_the_column(
        spark: SparkSession, tables: tuple[str, str]) -> None:
    uri, _ = tables
    with pytest.raises(Exception, match="nope"):
        spark.read.format("caslake").option("where", "nope > 1").load(uri).count()
