"""might_match: pruning really prunes, and stays sound at every edge it knows about."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

from caslake.errors import InvalidPredicate
from caslake.expr import ColumnStats, Expr, bind, col, compile_where, might_match

SCHEMA = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("f", pa.float64()),
    pa.field("s", pa.string()),
    pa.field("d", pa.date32()),
    pa.field("tz", pa.timestamp("us", tz="UTC")),
    pa.field("ts", pa.timestamp("us")),
    pa.field("flag", pa.bool_()),
    pa.field("bin", pa.binary()),
])

ROWS = 100


def mm(where: str | Expr, rows: int = ROWS, **stats: ColumnStats) -> bool:
    bound = compile_where(where, SCHEMA)
    assert bound is not None
    return might_match(bound, stats, rows)


ID_1_50 = ColumnStats(min=1, max=50, null_count=0)
ID_1_50_NULLS = ColumnStats(min=1, max=50, null_count=10)
ALL_NULL = ColumnStats(min=None, max=None, null_count=ROWS)
UNKNOWN = ColumnStats(min=None, max=None, null_count=None)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("id > 100", False),
        ("id > 50", False),
        ("id >= 50", True),
        ("id > 49", True),
        ("id < 1", False),
        ("id <= 1", True),
        ("id < 0", False),
        ("id = 0", False),
        ("id = 51", False),
        ("id = 25", True),
        ("id != 25", True),
        ("id BETWEEN 60 AND 70", False),
        ("id BETWEEN 40 AND 70", True),
        ("id BETWEEN 70 AND 40", False),
        ("id IN (0, 51, 99)", False),
        ("id IN (0, 50)", True),
        ("id > 100 OR id < 0", False),
        ("id > 100 OR id < 2", True),
        ("id > 10 AND id < 5", True),  # each side alone might match; stats cannot tell
        ("id > 10 AND id > 100", False),
        ("id IS NULL", False),
        ("id IS NOT NULL", True),
        ("NOT id < 60", False),  # id >= 60
        ("NOT id > 0", False),  # id <= 0
        ("NOT id >= 1", False),
        ("NOT id < 10", True),
        ("id NOT BETWEEN 0 AND 60", False),
        ("id NOT BETWEEN 10 AND 60", True),
        ("NOT (id > 0 AND id < 100)", False),
        ("NOT (id > 0 OR id < 100)", False),
        ("id = 1.5", False),
        ("id != 1.5", True),
        ("id < 1.5", True),
        ("id > 50.5", False),
        ("TRUE", True),
        ("FALSE", False),
    ],
)
def test_integer_pruning(where: str, expected: bool) -> None:
    assert mm(where, id=ID_1_50) is expected


def test_single_valued_chunks() -> None:
    five = ColumnStats(min=5, max=5, null_count=0)
    assert not mm("id != 5", id=five)
    assert not mm("NOT id = 5", id=five)
    assert not mm("id NOT IN (4, 5)", id=five)
    assert mm("id NOT IN (4, 6)", id=five)
    # NULL rows never satisfy != either.
    assert not mm("id != 5", id=ColumnStats(min=5, max=5, null_count=40))
    assert mm("id != 5 OR id IS NULL", id=ColumnStats(min=5, max=5, null_count=40))


def test_missing_or_partial_statistics_mean_might_match() -> None:
    assert mm("id > 100")  # no stats at all
    assert mm("id > 100", id=UNKNOWN)
    assert mm("id > 100", id=ColumnStats(min=1, max=None, null_count=0))
    assert not mm("id < 0", id=ColumnStats(min=1, max=None, null_count=0))
    assert not mm("id > 100", id=ColumnStats(min=None, max=50, null_count=None))
    assert mm("id = 0", id=ColumnStats(min=None, max=50, null_count=None))
    assert mm("id IS NULL", id=ColumnStats(min=1, max=50, null_count=None))
    assert mm("id IS NOT NULL", id=ColumnStats(min=None, max=None, null_count=None))
    # Other columns' stats do not help a predicate on id.
    assert mm("id > 100", s=ColumnStats(min="a", max="b", null_count=0))


def test_all_null_columns() -> None:
    assert not mm("id > 0", id=ALL_NULL)
    assert not mm("id != 0", id=ALL_NULL)
    assert not mm("NOT id > 0", id=ALL_NULL)
    assert not mm("id IN (1, 2)", id=ALL_NULL)
    assert not mm("id NOT IN (1, 2)", id=ALL_NULL)
    assert not mm("id IS NOT NULL", id=ALL_NULL)
    assert mm("id IS NULL", id=ALL_NULL)
    assert mm("NOT id IS NOT NULL", id=ALL_NULL)
    assert not mm("f != 1", f=ALL_NULL)
    assert not mm("NOT f < 1", f=ALL_NULL)
    assert not mm("id != 1.5", id=ALL_NULL)  # TRUE unless NULL
    assert mm("id > 0 OR id IS NULL", id=ALL_NULL)


def test_null_counts() -> None:
    no_nulls = ColumnStats(min=1, max=50, null_count=0)
    assert not mm("id IS NULL", id=no_nulls)
    assert mm("id IS NULL", id=ID_1_50_NULLS)
    assert mm("id IS NOT NULL", id=ID_1_50_NULLS)
    assert mm("NOT id IS NULL", id=no_nulls)


def test_empty_chunks_match_nothing() -> None:
    assert not mm("TRUE", rows=0)
    assert not mm("id IS NULL", rows=0, id=ColumnStats(None, None, 0))


def test_floats_and_nan() -> None:
    one_to_four = ColumnStats(min=1.0, max=4.0, null_count=0)
    assert not mm("f > 5", f=one_to_four)
    assert not mm("f = 0", f=one_to_four)
    assert not mm("f IN (0, 10)", f=one_to_four)
    assert mm("f = 2", f=one_to_four)
    # Predicates a NaN satisfies cannot be pruned with min/max: NaN is not in them.
    assert mm("NOT f < 5", f=one_to_four)
    assert mm("f NOT BETWEEN 0 AND 5", f=one_to_four)
    assert mm("f NOT IN (1.0)", f=ColumnStats(1.0, 1.0, 0))
    assert mm("f != 1", f=ColumnStats(1.0, 1.0, 0))
    # NaN bounds are unknown bounds.
    nan_bounds = ColumnStats(min=math.nan, max=math.nan, null_count=0)
    assert mm("f > 5", f=nan_bounds)
    assert mm("f < -5", f=ColumnStats(min=math.nan, max=4.0, null_count=0))
    assert not mm("f > 5", f=ColumnStats(min=math.nan, max=4.0, null_count=0))
    # NaN literals
    assert not mm(col("f") == math.nan, f=UNKNOWN)
    assert not mm(col("f") > math.nan, f=UNKNOWN)
    assert mm(col("f") != math.nan, f=one_to_four)
    assert not mm(col("f") != math.nan, f=ALL_NULL)
    # infinities are ordinary bounds
    assert mm("f > 1e308", f=ColumnStats(min=1.0, max=math.inf, null_count=0))
    assert not mm("f < " + "9" * 400, f=ColumnStats(min=math.inf, max=math.inf, null_count=0))


def test_truncated_string_bounds_stay_sound() -> None:
    # A writer truncated min "apple pie" to "app" and max "apricot" to "apr" + 1 = "aps".
    truncated = ColumnStats(min="app", max="aps", null_count=0)
    assert mm("s = 'apple pie'", s=truncated)
    assert mm("s = 'apricot'", s=truncated)
    assert mm("s > 'apr'", s=truncated)
    assert not mm("s > 'aps'", s=truncated)
    assert not mm("s < 'app'", s=truncated)
    assert not mm("s = 'b'", s=truncated)
    assert mm("s != 'app'", s=truncated)
    assert mm("s NOT IN ('app', 'aps')", s=truncated)


def test_string_order_is_code_point_order() -> None:
    stats = ColumnStats(min="B", max="a", null_count=0)
    assert mm("s = 'Z'", s=stats)
    assert not mm("s = 'é'", s=stats)  # 'é' sorts after 'a' in UTF-8 and code points


def test_dates_and_timestamps() -> None:
    days = ColumnStats(min=date(2020, 1, 1), max=date(2020, 1, 31), null_count=0)
    assert not mm("d > '2020-02-01'", d=days)
    assert not mm("d > TIMESTAMP '2020-01-31 10:00:00'", d=days)
    assert mm("d >= TIMESTAMP '2020-01-30 10:00:00'", d=days)
    # tz-aware stats in another zone compare by instant.
    new_york = ZoneInfo("America/New_York")
    instants = ColumnStats(min=datetime(2020, 1, 1, 7, tzinfo=new_york),  # 12:00 UTC
                           max=datetime(2020, 1, 1, 8, tzinfo=new_york), null_count=0)
    assert mm("tz = TIMESTAMP '2020-01-01 12:00:00'", tz=instants)
    assert not mm("tz < TIMESTAMP '2020-01-01 11:59:59'", tz=instants)
    assert not mm("tz > '2020-01-01T08:00:00-05:00'", tz=instants)
    assert mm("tz >= '2020-01-01T08:00:00-05:00'", tz=instants)
    naive = ColumnStats(min=datetime(2020, 1, 1), max=datetime(2020, 1, 2), null_count=0)
    assert not mm("ts > DATE '2020-01-03'", ts=naive)
    assert not mm("ts < TIMESTAMP '2020-01-01 02:00:00+03:00'", ts=naive)


def test_booleans() -> None:
    all_true = ColumnStats(min=True, max=True, null_count=0)
    assert not mm("NOT flag", flag=all_true)
    assert not mm("flag = FALSE", flag=all_true)
    assert mm("flag", flag=all_true)


def test_statistics_of_an_unexpected_type_mean_might_match() -> None:
    wrong = ColumnStats(min="1", max="50", null_count=0)
    assert mm("id > 100", id=wrong)
    assert mm("id IN (100)", id=wrong)
    assert mm("id NOT IN (100)", id=wrong)
    dated = ColumnStats(min=datetime(2020, 1, 1), max=datetime(2020, 1, 2), null_count=0)
    assert mm("d > '2021-01-01'", d=dated)  # date vs datetime does not compare
    naive = ColumnStats(min=datetime(2020, 1, 1), max=datetime(2020, 1, 2), null_count=0)
    assert mm("tz > '2021-01-01'", tz=naive)  # naive vs aware does not compare
    assert mm("id = 5", id=ColumnStats(min=5, max=5, null_count=None))
    assert mm("id > 100", id="not stats")  # type: ignore[arg-type]


def test_binary_columns_only_prune_on_nulls() -> None:
    assert not mm("bin IS NULL", bin=ColumnStats(min=b"a", max=b"z", null_count=0))
    assert mm("bin IS NOT NULL", bin=ColumnStats(min=None, max=None, null_count=3))


def test_negation_is_not_the_inverse_of_might_match() -> None:
    # Some rows are < 5 and some are not: both the predicate and its negation
    # might match.  Inverting might_match would wrongly prune the negation.
    stats = {"id": ColumnStats(min=1, max=10, null_count=0)}
    positive = bind(col("id") < 5, SCHEMA)
    negative = bind(~(col("id") < 5), SCHEMA)
    assert might_match(positive, stats, 10)
    assert might_match(negative, stats, 10)


def test_might_match_needs_a_bound_expression() -> None:
    with pytest.raises(InvalidPredicate, match="bound"):
        might_match(col("id") > 1, {}, 10)  # type: ignore[arg-type]


def test_utc_stats_from_pyarrow_compare_with_utc_literals() -> None:
    array = pa.array([datetime(2020, 1, 1, 12, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))
    value = array[0].as_py()
    stats = ColumnStats(min=value, max=value, null_count=0)
    assert not mm("tz > '2020-01-01 12:00:00'", rows=1, tz=stats)
    assert mm("tz = '2020-01-01 12:00:00'", rows=1, tz=stats)
