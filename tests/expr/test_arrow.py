"""to_arrow: SQL NULL semantics, IEEE NaN, exact numerics, time zones, dataset filters."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from caslake.errors import InvalidPredicate
from caslake.expr import Expr, bind, col, compile_where, to_arrow


def kept(table: pa.Table, where: str | Expr, column: str = "k") -> list[object]:
    bound = compile_where(where, table.schema)
    assert bound is not None
    result: list[object] = table.filter(to_arrow(bound)).column(column).to_pylist()
    return result


def negated(table: pa.Table, where: str | Expr, column: str = "k") -> list[object]:
    bound = compile_where(where, table.schema)
    assert bound is not None
    result: list[object] = table.filter(~to_arrow(bound)).column(column).to_pylist()
    return result


NULLS = pa.table({"k": [1, 2, 3, 4], "x": [1, None, 10, None], "s": ["a", None, "b", "c"]})


@pytest.mark.parametrize(
    ("where", "rows"),
    [
        ("x > 5", [3]),
        ("NOT (x > 5)", [1]),
        ("NOT x > 5 OR s = 'c'", [1, 4]),
        ("x IN (1, 10)", [1, 3]),
        ("x NOT IN (1, 10)", []),
        ("x NOT IN (1, 7)", [3]),
        ("x IS NULL", [2, 4]),
        ("x IS NOT NULL", [1, 3]),
        ("NOT (x IS NULL AND s IS NULL)", [1, 3, 4]),
        ("x BETWEEN 0 AND 5", [1]),
        ("x NOT BETWEEN 0 AND 5", [3]),
        ("x = 1.5", []),
        ("x != 1.5", [1, 3]),
        ("NOT x = 1.5", [1, 3]),
        ("x > 5 OR s = 'c'", [3, 4]),
        ("NOT (x > 5 AND s = 'c')", [1, 3]),  # 2: NOT (NULL AND NULL); 4: NOT (NULL AND TRUE)
        ("TRUE", [1, 2, 3, 4]),
        ("FALSE", []),
        ("NOT x IS NOT NULL", [2, 4]),
    ],
)
def test_null_rows_are_dropped_and_not_of_null_is_null(where: str, rows: list[int]) -> None:
    assert kept(NULLS, where) == rows


def test_negating_the_arrow_expression_is_sql_not() -> None:
    # ~expr keeps the rows where the predicate is FALSE, never the NULL ones.
    assert negated(NULLS, "x > 5") == [1]
    assert negated(NULLS, "x IN (1, 10)") == []
    assert negated(NULLS, "x = 1.5") == [1, 3]
    assert negated(NULLS, "x != 1.5") == []
    assert negated(NULLS, "x IS NULL") == [1, 3]


FLOATS = pa.table({
    "k": list(range(1, 8)),
    "f": [1.0, math.nan, None, -0.0, 0.0, math.inf, -math.inf],
})


@pytest.mark.parametrize(
    ("where", "rows"),
    [
        ("f = 1", [1]),
        ("f != 1", [2, 4, 5, 6, 7]),  # NaN != 1 holds
        ("f < 1", [4, 5, 7]),
        ("NOT f < 1", [1, 2, 6]),  # NaN: NOT FALSE
        ("f >= 1", [1, 6]),
        ("f = 0", [4, 5]),  # -0.0 = 0
        ("f IN (0.0, 1)", [1, 4, 5]),
        ("f IN (-0.0, 7)", [4, 5]),
        ("f NOT IN (0.0, 1)", [2, 6, 7]),
        ("f BETWEEN -1 AND 1", [1, 4, 5]),
        ("f NOT BETWEEN -1 AND 1", [2, 6, 7]),
        ("f IS NULL", [3]),  # NaN is not NULL
        ("f > 1e308", [6]),
        ("f < " + "9" * 400, [1, 4, 5, 7]),
    ],
)
def test_float_nan_follows_ieee(where: str, rows: list[int]) -> None:
    assert kept(FLOATS, where) == rows


@pytest.mark.parametrize(
    ("build", "rows"),
    [
        (lambda: col("f") == math.nan, []),
        (lambda: col("f") != math.nan, [1, 2, 4, 5, 6, 7]),
        (lambda: ~(col("f") < math.nan), [1, 2, 4, 5, 6, 7]),
        (lambda: col("f") == math.inf, [6]),
        (lambda: col("f").isin([math.nan]), []),
    ],
)
def test_nan_literals(build: object, rows: list[int]) -> None:
    assert kept(FLOATS, build()) == rows  # type: ignore[operator]


def test_integers_compare_exactly_with_floats() -> None:
    big = 2**53
    table = pa.table({"k": [1, 2, 3, 4], "id": [big, big + 1, 1, 2**63 - 1]})
    assert kept(table, "id = 9007199254740992.0") == [1]
    assert kept(table, "id > 9007199254740992.0") == [2, 4]
    assert kept(table, "id < 1.5") == [3]
    assert kept(table, "id >= 1.5") == [1, 2, 4]
    assert kept(table, "id < 9223372036854775808") == [1, 2, 3, 4]
    assert kept(table, "id >= 9223372036854775807") == [4]
    floats = pa.table({"k": [1, 2], "f": [float(big), 1.0]})
    assert kept(floats, f"f = {big + 1}") == []
    assert kept(floats, f"f < {big + 1}") == [1, 2]
    assert kept(floats, f"f > {big + 1}") == []


def test_small_and_unsigned_integer_types() -> None:
    table = pa.table({
        "k": [1, 2, 3],
        "i8": pa.array([-128, 0, 127], pa.int8()),
        "u64": pa.array([0, 2**63, 2**64 - 1], pa.uint64()),
    })
    assert kept(table, "i8 < 1000") == [1, 2, 3]
    assert kept(table, "i8 > -1000 AND i8 != 0") == [1, 3]
    assert kept(table, "u64 >= 9223372036854775808") == [2, 3]
    assert kept(table, "u64 = 18446744073709551615") == [3]
    assert kept(table, "u64 > -5") == [1, 2, 3]


def test_float32_columns_compare_in_exact_value() -> None:
    table = pa.table({"k": [1, 2], "f": pa.array([0.1, 0.5], pa.float32())})
    assert kept(table, "f = 0.1e0") == []  # float32(0.1) is not the double 0.1
    assert kept(table, "f > 0.1e0") == [1, 2]
    assert kept(table, "f = 0.10000000149011612e0") == [1]
    # 0.1 alone is a DECIMAL literal: cast to the column's type, as DuckDB does
    assert kept(table, "f = 0.1") == [1]
    assert kept(table, "f > 0.1") == [2]
    assert kept(table, "f < 0.5") == [1]


def test_strings_and_booleans() -> None:
    table = pa.table({
        "k": [1, 2, 3, 4],
        "s": pa.array(["a", "B", "é", None], pa.large_string()),
        "b": [True, False, None, True],
    })
    assert kept(table, "s < 'b'") == [1, 2]  # byte order: 'B' < 'a' < 'b' < 'é'
    assert kept(table, "s > 'z'") == [3]
    assert kept(table, "s IN ('é', 'x')") == [3]
    assert kept(table, "b") == [1, 4]
    assert kept(table, "NOT b") == [2]
    assert kept(table, "b < TRUE") == [2]


def test_dates_and_timestamps() -> None:
    table = pa.table({
        "k": [1, 2, 3],
        "d": pa.array([date(2020, 1, 1), date(2020, 1, 2), None], pa.date32()),
        "ts": pa.array([datetime(2020, 1, 1, 12), datetime(2020, 1, 2), None],
                       pa.timestamp("us")),
        "tz": pa.array([datetime(2020, 1, 1, 12, tzinfo=UTC), datetime(2020, 1, 2, tzinfo=UTC),
                        None], pa.timestamp("ns", tz="UTC")),
        "ny": pa.array([datetime(2020, 1, 1, 12, tzinfo=UTC), datetime(2020, 1, 2, tzinfo=UTC),
                        None], pa.timestamp("s", tz="America/New_York")),
    })
    assert kept(table, "d = '2020-01-02'") == [2]
    assert kept(table, "d > TIMESTAMP '2020-01-01 10:00:00'") == [2]
    assert kept(table, "d < TIMESTAMP '2020-01-01 10:00:00'") == [1]
    assert kept(table, "ts >= DATE '2020-01-02'") == [2]
    assert kept(table, "ts = '2020-01-01T13:00:00+01:00'") == [1]
    assert kept(table, "tz = TIMESTAMP '2020-01-01 12:00:00'") == [1]  # naive = UTC
    assert kept(table, "tz = TIMESTAMP '2020-01-01 07:00:00-05:00'") == [1]
    assert kept(table, "ny = TIMESTAMP '2020-01-01 12:00:00'") == [1]
    assert kept(table, "ny < '2020-01-01 19:00:00-05:00'") == [1]
    assert kept(table, "ny <= '2020-01-01 19:00:00-05:00'") == [1, 2]
    new_york = datetime(2020, 1, 1, 7, tzinfo=ZoneInfo("America/New_York"))
    assert kept(table, col("ny") == new_york) == [1]
    assert kept(table, "tz < TIMESTAMP '3000-01-01 00:00:00'") == [1, 2]  # ns range
    assert kept(table, "tz BETWEEN '2020-01-01' AND '2020-01-01 23:59:59.999999'") == [1]


def test_binary_is_null() -> None:
    table = pa.table({"k": [1, 2], "bin": pa.array([b"x", None], pa.binary())})
    assert kept(table, "bin IS NULL") == [2]
    assert kept(table, "bin IS NOT NULL") == [1]


def test_works_on_empty_tables_and_constant_predicates() -> None:
    empty = NULLS.slice(0, 0)
    for where in ["x > 1", "TRUE", "FALSE", "x IN (1, 2)", "x = 1.5"]:
        assert kept(empty, where) == []


PREDICATES = [
    "x > 5", "NOT (x > 5)", "x IN (1, 10)", "x NOT IN (1, 7)", "x = 1.5", "x != 1.5",
    "x IS NULL", "TRUE", "FALSE", "s IN ('a', 'c') OR x BETWEEN 2 AND 20", "NOT s < 'b'",
]


@pytest.mark.parametrize("where", PREDICATES)
def test_dataset_filters_agree_with_table_filter(where: str, tmp_path: Path) -> None:
    table = pa.table({"k": list(range(12)), "x": [1, None, 10, None] * 3,
                      "s": ["a", None, "b", "c"] * 3})
    pq.write_table(table, tmp_path / "data.parquet", row_group_size=3)
    bound = compile_where(where, table.schema)
    assert bound is not None
    expected = table.filter(to_arrow(bound)).column("k").to_pylist()
    dataset = ds.dataset(tmp_path / "data.parquet", format="parquet")
    got: list[int] = dataset.to_table(filter=to_arrow(bound)).column("k").to_pylist()
    assert sorted(got) == expected
    via_reader = pq.read_table(tmp_path / "data.parquet", filters=to_arrow(bound))
    read: list[int] = via_reader.column("k").to_pylist()
    assert sorted(read) == expected
    not_got: list[int] = dataset.to_table(filter=~to_arrow(bound)).column("k").to_pylist()
    assert sorted(not_got) == table.filter(~to_arrow(bound)).column("k").to_pylist()


def test_expression_is_an_arrow_expression() -> None:
    bound = bind(col("x") > 1, NULLS.schema)
    expr = to_arrow(bound)
    assert isinstance(expr, pc.Expression)
    assert "x" in str(expr)


def test_to_arrow_needs_a_bound_expression() -> None:
    with pytest.raises(InvalidPredicate, match="bound"):
        to_arrow(col("x") > 1)  # type: ignore[arg-type]
