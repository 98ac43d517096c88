"""CASE WHEN in where= and in update's set= (issue 32), compared with DuckDB.

Random data with NULLs, written as several files so statistics could prune:
each predicate keeps exactly the rows DuckDB's ``WHERE`` keeps (a NULL
condition is not TRUE and falls to ELSE), whether it is SQL text or built with
``caslake.expr.when``; an ``UPDATE ... SET x = CASE ...`` leaves the same table
as DuckDB's.  A CASE never prunes a file it should read (pruning is checked on
a predicate whose rows live in one file only).
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.errors import InvalidPredicate
from caslake.expr import bind, col, might_match, parse_sql, parse_sql_value, when

PREDICATES = [
    "CASE WHEN i > 5 THEN 'big' WHEN i IS NULL THEN 'none' ELSE 'small' END = 'small'",
    "CASE WHEN i > 5 THEN 'big' ELSE 'small' END = 'small'",  # NULL i -> ELSE
    "CASE WHEN i > 5 THEN 1 END IS NULL",  # no ELSE: NULL
    "CASE i WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE s END = 'a'",
    "CASE i WHEN NULL THEN 1 WHEN 3 THEN 2 ELSE 0 END = 0",  # WHEN NULL never matches
    "CASE WHEN s = 'a' THEN x WHEN s = 'b' THEN i ELSE -1 END > 0.5",
    "CASE WHEN x > 0 AND s IS NOT NULL THEN TRUE ELSE FALSE END",
    "CASE WHEN s LIKE 'a%' THEN i * 2 ELSE i END BETWEEN 3 AND 12",
    "CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END = 'odd' AND x IS NOT NULL",
    "NOT (CASE WHEN x < 0 THEN TRUE WHEN x > 2 THEN FALSE END)",
    "CASE WHEN i > 0 THEN CASE WHEN x > 0 THEN 1 ELSE 2 END ELSE 3 END = 2",
    "id < 10 OR CASE WHEN i IS NULL THEN 0 ELSE i END >= 15",
    "coalesce(CASE WHEN b THEN s END, 'zz') = 'zz'",
    "CASE WHEN b THEN 1.5 ELSE 2 END = 2",
    "if(i > 3, s, 'none') = 'none'",
    "CASE WHEN id >= 200 THEN 'late' ELSE 'early' END = 'late'",
]


def _data(seed: int, rows: int = 240) -> pa.Table:
    rng = random.Random(seed)

    def maybe(v: object) -> object:
        return None if rng.random() < 0.2 else v

    return pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "i": pa.array([maybe(rng.randint(-5, 20)) for _ in range(rows)], pa.int32()),
        "x": [maybe(round(rng.uniform(-3, 3), 2)) for _ in range(rows)],
        "s": [maybe(rng.choice(["a", "b", "ab", "c"])) for _ in range(rows)],
        "b": [maybe(rng.random() < 0.5) for _ in range(rows)],
    })


def _table(path: Path, data: pa.Table) -> caslake.Table:
    t = caslake.create_table(str(path / uuid.uuid4().hex), data.schema)
    for start in range(0, data.num_rows, 80):  # three files, by id range
        t.append(data.slice(start, 80))
    return t


@pytest.fixture(scope="module", params=[1, 2])
def both(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[caslake.Table, duckdb.DuckDBPyConnection]:
    data = _data(request.param)
    con = duckdb.connect()
    con.register("data", data)
    return _table(tmp_path_factory.mktemp("case"), data), con


def _ids(con: duckdb.DuckDBPyConnection, where: str) -> list[int]:
    return [r[0] for r in con.execute(f"SELECT id FROM data WHERE {where} ORDER BY id").fetchall()]


@pytest.mark.parametrize("where", PREDICATES)
def test_case_where_equals_duckdb(both: tuple[caslake.Table, duckdb.DuckDBPyConnection],
                                  where: str) -> None:
    t, con = both
    want = _ids(con, where)
    assert 0 < len(want) < 240  # the predicate separates rows on this data
    assert sorted(t.scan(where=where).to_arrow().column("id").to_pylist()) == want


def test_python_builder_equals_sql(both: tuple[caslake.Table, duckdb.DuckDBPyConnection]
                                   ) -> None:
    t, con = both
    size = when(col("i") > 5, "big").when(col("i").is_null(), "none").otherwise("small")
    got = sorted(t.scan(where=size == "none").to_arrow().column("id").to_pylist())
    want = _ids(con, "i IS NULL")
    assert got == want and want
    # str() renders SQL that parses back to the same tree
    assert parse_sql(str(size == "none")) == (size == "none")


def test_case_in_update_set_equals_duckdb(tmp_path: Path) -> None:
    data = _data(7)
    t = _table(tmp_path, data)
    values = {
        "s": "CASE WHEN i > 10 THEN 'high' WHEN i > 0 THEN 'low' END",  # NULL i: NULL
        "x": "CASE s WHEN 'a' THEN x * 2 WHEN 'b' THEN 0 ELSE x END",
    }
    where = "CASE WHEN b THEN id % 2 = 0 ELSE id % 3 = 0 END"
    t.update(values, where=where)
    con = duckdb.connect()
    con.register("src", data)
    con.execute("CREATE TABLE d AS SELECT * FROM src")
    con.execute(f"UPDATE d SET s = {values['s']}, x = {values['x']} WHERE {where}")
    want = con.execute("SELECT id, i, x, s, b FROM d ORDER BY id").fetchall()
    got = t.scan().to_arrow().sort_by("id")
    assert [tuple(r.values()) for r in got.to_pylist()] == want
    assert sum(1 for r in want if r[3] in ("high", "low")) > 10  # rows really changed


def test_case_prunes_nothing_it_must_read(tmp_path: Path) -> None:
    """The rows with id >= 200 live in the third file only: CASE must not let
    statistics drop that file (a CASE leaf is computed; it says nothing about
    min/max), and an AND beside it still prunes by its own column."""
    data = _data(3)
    t = _table(tmp_path, data)
    schema = data.schema
    case = bind(parse_sql("CASE WHEN id >= 200 THEN 'late' ELSE 'early' END = 'late'"), schema)
    stats_first_file = {"id": caslake.expr.ColumnStats(min=0, max=79, null_count=0)}
    assert might_match(case, stats_first_file, 80)  # cannot be ruled out from stats
    narrowed = bind(parse_sql("id >= 200 AND CASE WHEN i > 0 THEN 1 ELSE 0 END = 1"), schema)
    assert not might_match(narrowed, stats_first_file, 80)  # the plain leaf still prunes
    got = t.scan(where="CASE WHEN id >= 200 THEN 'late' ELSE 'early' END = 'late'").to_arrow()
    assert sorted(got.column("id").to_pylist()) == list(range(200, 240))


@pytest.mark.parametrize("text,named", [
    ("CASE WHEN i > 1 THEN 'x' ELSE 2 END = 'x'", "CASE"),
    ("CASE WHEN i THEN 1 END = 1", "i"),
    ("CASE WHEN nope > 1 THEN 1 END = 1", "nope"),
])
def test_case_type_errors_are_typed(text: str, named: str) -> None:
    with pytest.raises(InvalidPredicate) as e:
        bind(parse_sql(text), _data(1).schema)
    assert named in str(e.value)


def test_case_value_types() -> None:
    schema = _data(1).schema
    assert caslake.expr.bind_value(parse_sql_value(
        "CASE WHEN i > 1 THEN i ELSE 0 END"), schema)[1] == pa.int64()
    assert caslake.expr.bind_value(parse_sql_value(
        "CASE WHEN i > 1 THEN 1.25 ELSE i END"), schema)[1] == pa.decimal128(21, 2)
    assert caslake.expr.bind_value(parse_sql_value(
        "CASE WHEN i > 1 THEN NULL ELSE s END"), schema)[1] == pa.string()
