"""The Python expression API: building, normalising, comparing and rendering trees."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import IntEnum

import pyarrow as pa
import pytest

from caslake.errors import InvalidPredicate
from caslake.expr import (
    FALSE,
    TRUE,
    And,
    Arith,
    Between,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    bind,
    col,
    func,
    lit,
    parse_sql,
    referenced_columns,
)

a, b = col("a"), col("b")


def test_comparisons_build_compare_nodes() -> None:
    assert (a == 1) == Compare("=", a, Literal(1))
    assert (a != 1) == Compare("!=", a, Literal(1))
    assert (a < 1) == Compare("<", a, Literal(1))
    assert (a <= 1) == Compare("<=", a, Literal(1))
    assert (a > 1) == Compare(">", a, Literal(1))
    assert (a >= 1) == Compare(">=", a, Literal(1))


def test_literal_on_the_left_is_normalised() -> None:
    assert (5 < a) == Compare(">", a, Literal(5))  # noqa: SIM300
    assert (lit(5) <= a) == Compare(">=", a, Literal(5))
    assert (lit(5) == a) == Compare("=", a, Literal(5))
    assert Compare("<", Literal(5), a) == Compare(">", a, Literal(5))  # type: ignore[arg-type]
    assert Compare("==", a, Literal(1)).op == "="
    assert Compare("<>", a, Literal(1)).op == "!="


def test_methods() -> None:
    assert a.isin([1, 2]) == In(a, (Literal(1), Literal(2)))
    assert a.isin(x for x in (1, 2)) == In(a, (Literal(1), Literal(2)))
    assert a.isin({3}) == In(a, (Literal(3),))
    assert a.isin([]) == In(a, ())
    assert a.between(1, 5) == Between(a, Literal(1), Literal(5))
    assert a.is_null() == IsNull(a)
    assert a.is_not_null() == Not(IsNull(a))


def test_boolean_operators() -> None:
    p, q = a > 1, b < 2
    assert (p & q) == And(p, q)
    assert (p | q) == Or(p, q)
    assert ~p == Not(p)
    assert (p & q | ~p) == Or(And(p, q), Not(p))


def test_trees_are_immutable_hashable_and_structural() -> None:
    p = (a > 1) & b.isin(["x", "y"])
    assert p == (col("a") > 1) & col("b").isin(["x", "y"])
    assert hash(p) == hash((col("a") > 1) & col("b").isin(["x", "y"]))
    assert len({a > 1, a > 1, a > 2}) == 2
    with pytest.raises(AttributeError):
        p.left = a > 2  # type: ignore[misc]


def test_literal_equality_is_typed() -> None:
    assert Literal(1) != Literal(True)
    assert Literal(1) != Literal(1.0)
    assert Literal(math.nan) == Literal(float("nan"))
    assert hash(Literal(math.nan)) == hash(Literal(float("nan")))
    assert Literal(0.0) == Literal(-0.0)
    assert (a == 1) != (a == True)  # noqa: E712


def test_column_equality_between_columns_is_structural() -> None:
    assert (col("a") == col("a")) is True
    assert (col("a") == col("b")) is False
    assert (col("a") != col("b")) is True


@pytest.mark.parametrize(
    ("build", "text"),
    [
        (lambda: a > b, "a > b"),
        (lambda: a <= col("x"), "a <= x"),
        (lambda: a.between(b, 1), "a BETWEEN b AND 1"),
        (lambda: a.eq(b), "a = b"),
        (lambda: a.ne(b + 1), "a != (b + 1)"),
        (lambda: a / 60 > 5, "(a / 60) > 5"),
        (lambda: 2 * a - 1 < b, "((2 * a) - 1) < b"),
        (lambda: func("lower", a) == "ua", "lower(a) = 'ua'"),
        (lambda: a.cast("bigint") >= 1, "CAST(a AS BIGINT) >= 1"),
        (lambda: a.like("N1%"), "a LIKE 'N1%'"),
        (lambda: ~a.ilike("x_"), "a NOT ILIKE 'x_'"),
        (lambda: -a > 1, "-(a) > 1"),
    ],
)
def test_values_build_predicates(build: Callable[[], Expr], text: str) -> None:
    expr = build()
    assert str(expr) == text
    assert parse_sql(text) == expr


def test_in_list_needs_literals() -> None:
    with pytest.raises(InvalidPredicate, match="literal values"):
        a.isin([b])


@pytest.mark.parametrize(
    "build",
    [
        lambda: a == None,  # noqa: E711
        lambda: a != None,  # noqa: E711
        lambda: a < None,  # type: ignore[operator]
        lambda: a.between(None, 1),
        lambda: a.isin([1, None]),
    ],
)
def test_null_literals_are_rejected_with_a_hint(build: object) -> None:
    with pytest.raises(InvalidPredicate, match="IS NULL"):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    "value",
    [object(), b"bytes", Decimal("NaN"), Decimal("Infinity"), [1], {"k": 1}, 1 + 2j, a > 1],
)
def test_unsupported_literal_types(value: object) -> None:
    with pytest.raises(InvalidPredicate):
        _ = a == value
    with pytest.raises(InvalidPredicate):
        lit(value)


@pytest.mark.parametrize("values", ["abc", 5, None, b"ab", a, a > 1])
def test_isin_needs_a_collection(values: object) -> None:
    with pytest.raises(InvalidPredicate, match="IN needs a collection"):
        a.isin(values)  # type: ignore[arg-type]


def test_bad_column_names() -> None:
    with pytest.raises(InvalidPredicate):
        col("")
    with pytest.raises(InvalidPredicate):
        col(5)  # type: ignore[arg-type]


def test_bad_node_construction() -> None:
    with pytest.raises(InvalidPredicate, match="operator"):
        Compare("~", a, Literal(1))
    with pytest.raises(InvalidPredicate, match="arithmetic operator"):
        Arith("%", a, Literal(1))
    with pytest.raises(InvalidPredicate, match="CAST to unsupported type"):
        a.cast("GEOMETRY")
    with pytest.raises(InvalidPredicate, match="takes 1 arguments"):
        func("lower", a, b)
    with pytest.raises(InvalidPredicate, match="ESCAPE must be one character"):
        a.like("x", escape="ab")
    with pytest.raises(InvalidPredicate, match="ends with the escape"):
        a.like("x!", escape="!")
    with pytest.raises(InvalidPredicate):
        And(a > 1, 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidPredicate):
        Not(a)  # type: ignore[arg-type]
    with pytest.raises(InvalidPredicate):
        IsNull("a")  # type: ignore[arg-type]
    with pytest.raises(InvalidPredicate):
        Const(1)  # type: ignore[arg-type]


def test_python_truthiness_is_refused() -> None:
    p = a > 1
    with pytest.raises(InvalidPredicate, match="'&'"):
        bool(p)
    with pytest.raises(InvalidPredicate):
        _ = (a > 1) and (b < 2)
    with pytest.raises(InvalidPredicate):
        _ = 1 < a < 5  # type: ignore[operator]
    with pytest.raises(InvalidPredicate):
        _ = (a > 1) & True
    with pytest.raises(InvalidPredicate, match="Python bool"):
        _ = (a > 1) | (col("a") == col("b"))
    with pytest.raises(InvalidPredicate):
        _ = a & (b > 1)  # type: ignore[operator]


def test_foreign_scalar_types_are_normalised() -> None:
    class Small(IntEnum):
        ONE = 1

    assert lit(Small.ONE).value == 1 and type(lit(Small.ONE).value) is int
    assert lit(pa.scalar(5)).value == 5
    assert lit(pa.scalar("x")).value == "x"
    numpy = pytest.importorskip("numpy")
    assert type(lit(numpy.int64(7)).value) is int
    assert type(lit(numpy.float32(0.5)).value) is float
    pandas = pytest.importorskip("pandas")
    stamp = lit(pandas.Timestamp("2020-01-01 10:00:00.000001", tz="UTC")).value
    assert type(stamp) is datetime and stamp == datetime(2020, 1, 1, 10, 0, 0, 1, tzinfo=UTC)


def test_referenced_columns() -> None:
    expr = ((a > 1) | ~col("c d").isin([1])) & col("e").is_null() & col("f").between(1, 2)
    assert referenced_columns(expr) == {"a", "c d", "e", "f"}
    assert referenced_columns(TRUE) == set()
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64())])
    bound = bind((a > 1) | (b == 1.5), schema)
    assert referenced_columns(bound) == {"a", "b"}
    with pytest.raises(InvalidPredicate):
        referenced_columns("a > 1")  # type: ignore[arg-type]


def test_referenced_columns_handles_very_long_chains() -> None:
    expr: Expr = a > 0
    for i in range(5000):
        expr = expr & (col(f"c{i % 7}") > i)
    assert referenced_columns(expr) == {"a"} | {f"c{i}" for i in range(7)}


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (a > 5, "a > 5"),
        (col("my col") == "it's", "\"my col\" = 'it''s'"),
        (col('a"b') != 1.5, '"a""b" != 1.5E0'),
        (col("AND") < 1, '"AND" < 1'),
        (col("date") == date(2020, 1, 2), "\"date\" = DATE '2020-01-02'"),
        (a == datetime(2020, 1, 2, 3, 4, 5, 6), "a = TIMESTAMP '2020-01-02 03:04:05.000006'"),
        (a == Decimal("0.05"), "a = 0.05"),
        (a == Decimal("5"), "a = 5.0"),
        (a == 2.5, "a = 2.5E0"),
        (a == True, "a = TRUE"),  # noqa: E712
        (~a.isin([1, 2]), "a NOT IN (1, 2)"),
        (~a.between(1, 2), "a NOT BETWEEN 1 AND 2"),
        (a.is_not_null(), "a IS NOT NULL"),
        (~((a > 1) & (b > 2)), "NOT (a > 1 AND b > 2)"),
        (((a > 1) | (b > 2)) & (a < 9), "(a > 1 OR b > 2) AND a < 9"),
        ((a > 1) | ((b > 2) & (a < 9)), "a > 1 OR b > 2 AND a < 9"),
        ((a > 1) & ((b > 2) & (a < 9)), "a > 1 AND (b > 2 AND a < 9)"),
        (TRUE & FALSE, "TRUE AND FALSE"),
    ],
)
def test_rendering(expr: Expr, text: str) -> None:
    assert str(expr) == text
    assert parse_sql(text) == expr


def test_absurdly_large_integers_are_refused() -> None:
    with pytest.raises(InvalidPredicate, match="too large"):
        _ = a == 10**5000
    assert (a == 2**4000).right.value == 2**4000
