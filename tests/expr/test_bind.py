"""bind / compile_where: schema checks, literal coercion and the normalised bound tree."""

from __future__ import annotations

import math
import struct
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from caslake.errors import (
    AmbiguousColumn,
    InvalidArgument,
    InvalidPredicate,
    PredicateEvaluationError,
    UnknownColumn,
    UnknownFunction,
)
from caslake.expr import (
    FALSE,
    TRUE,
    And,
    BoundExpr,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    bind,
    col,
    compile_where,
    filter_table,
    func,
    parse_sql,
    to_arrow,
)

SCHEMA = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("i8", pa.int8()),
    pa.field("u64", pa.uint64()),
    pa.field("f", pa.float64()),
    pa.field("f32", pa.float32()),
    pa.field("s", pa.string()),
    pa.field("ls", pa.large_string()),
    pa.field("flag", pa.bool_()),
    pa.field("d", pa.date32()),
    pa.field("ts", pa.timestamp("us")),
    pa.field("ts_s", pa.timestamp("s")),
    pa.field("ts_ms", pa.timestamp("ms")),
    pa.field("ts_ns", pa.timestamp("ns")),
    pa.field("tz", pa.timestamp("us", tz="UTC")),
    pa.field("ny", pa.timestamp("ms", tz="America/New_York")),
    pa.field("bin", pa.binary()),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("amount", pa.decimal128(10, 2)),
])


def bound_of(where: str | Expr) -> Expr:
    result = compile_where(where, SCHEMA)
    assert result is not None
    return result.expr


# --- unknown columns and type errors ---------------------------------------------


@pytest.mark.parametrize(
    "where",
    ["nope = 1", "id = 1 AND nope IS NULL", "NOT (id = 1 OR nope IN (1, 2))",
     "nope BETWEEN 1 AND 2", '"id " = 1'],
)
def test_unknown_column(where: str) -> None:
    with pytest.raises(UnknownColumn) as info:
        compile_where(where, SCHEMA)
    assert info.value.column in ("nope", "ID", "id ")
    assert info.value.column in str(info.value)
    assert info.value.available == SCHEMA.names
    assert "id, i8" in str(info.value)
    assert isinstance(info.value, InvalidPredicate)


def test_unknown_column_through_the_python_api() -> None:
    with pytest.raises(UnknownColumn, match="'missing'"):
        bind(col("missing").is_null(), SCHEMA)


@pytest.mark.parametrize(
    ("where", "fragments"),
    [
        ("id = 'abc'", ["'id'", "int64", "'abc'"]),
        ("id > TRUE", ["'id'", "int64", "TRUE"]),
        ("id < DATE '2020-01-01'", ["'id'", "int64", "DATE '2020-01-01'"]),
        ("f = '1.5'", ["'f'", "double", "'1.5'"]),
        ("s = 5", ["'s'", "string", "5"]),
        ("s IN ('a', 1)", ["'s'", "string", "1 (an integer)"]),
        ("flag = 1", ["'flag'", "bool", "1"]),
        ("d = 'yesterday'", ["'d'", "date32", "'yesterday'", "YYYY-MM-DD"]),
        ("d = 20200101", ["'d'", "date32", "20200101"]),
        ("ts > 5", ["'ts'", "timestamp[us]", "5"]),
        ("tz = 'not a time'", ["'tz'", "timestamp[us, tz=UTC]", "'not a time'"]),
        ("ts BETWEEN 'a' AND 'b'", ["'ts'", "'a'"]),
        ("bin = 'x'", ["'bin'", "binary", "IS NULL"]),
        ("tags IN ('a')", ["'tags'", "list", "IS NULL"]),
        ("amount > 'x'", ["'amount'", "decimal", "'x'"]),
        ("bin > 'x'", ["'bin'", "binary", "IS NULL"]),
    ],
)
def test_literal_type_errors_name_column_type_and_literal(where: str,
                                                          fragments: list[str]) -> None:
    with pytest.raises(InvalidPredicate) as info:
        compile_where(where, SCHEMA)
    assert not isinstance(info.value, UnknownColumn)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_lone_surrogate_strings_are_rejected() -> None:
    with pytest.raises(InvalidPredicate, match="surrogate"):
        bind(col("s") == "\ud800", SCHEMA)


def test_is_null_works_on_any_type() -> None:
    for name in ("bin", "tags", "amount"):
        assert bound_of(f"{name} IS NULL") == IsNull(col(name))
        assert bound_of(f"{name} IS NOT NULL") == Not(IsNull(col(name)))


def test_null_comparisons_are_rejected_everywhere() -> None:
    with pytest.raises(InvalidPredicate, match="IS NULL"):
        compile_where("id = NULL", SCHEMA)
    with pytest.raises(InvalidPredicate, match="IS NULL"):
        compile_where(col("id") != None, SCHEMA)  # noqa: E711


def test_ambiguous_column() -> None:
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("a", pa.string())])
    with pytest.raises(InvalidPredicate, match="ambiguous"):
        bind(col("a") > 1, schema)


def test_bad_arguments() -> None:
    with pytest.raises(InvalidArgument):
        bind(col("id") > 1, {"id": pa.int64()})  # type: ignore[arg-type]
    with pytest.raises(InvalidPredicate):
        bind("id > 1", SCHEMA)  # type: ignore[arg-type]


# --- exact numeric coercion -----------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("id < 1.5", col("id") <= 1),
        ("id <= 1.5", col("id") <= 1),
        ("id > 1.5", col("id") > 1),
        ("id >= 1.5", col("id") > 1),
        ("id < -1.5", col("id") <= -2),
        ("id > -1.5", col("id") > -2),
        ("id = 2.0", col("id") == 2),
        ("id = 1.5", Const(False, col("id"))),
        ("id != 1.5", Const(True, col("id"))),
        ("NOT id = 1.5", Const(True, col("id"))),
        ("id < 1e30", Const(True, col("id"))),
        ("id > 1e30", Const(False, col("id"))),
        ("id >= -1e30", Const(True, col("id"))),
        ("id = 9223372036854775808", Const(False, col("id"))),
        ("id <= 9223372036854775807", col("id") <= 2**63 - 1),
        ("i8 < 1000", Const(True, col("i8"))),
        ("i8 = -129", Const(False, col("i8"))),
        ("i8 > 126.5", col("i8") > 126),
        ("i8 > 127.5", Const(False, col("i8"))),
        ("u64 > -1", Const(True, col("u64"))),
        ("u64 = 18446744073709551615", col("u64") == 2**64 - 1),
        ("f = 1", col("f") == 1.0),
        ("f = 9007199254740993", Const(False, col("f"))),
        ("f < 9007199254740993", col("f") <= 9007199254740992.0),
        ("f > 9007199254740993", col("f") > 9007199254740992.0),
        ("f < " + "9" * 400, col("f") <= 1.7976931348623157e308),
        ("f > -" + "9" * 400, col("f") > -math.inf),
        ("f32 = 0.5", col("f32") == 0.5),
        ("f32 = 0.1e0", Const(False, col("f32"))),
        # a DECIMAL literal is cast to the float column's type, as in DuckDB
        ("f32 = 0.1", col("f32") == struct.unpack("<f", struct.pack("<f", 0.1))[0]),
        ("f32 = 16777217", Const(False, col("f32"))),
        ("f32 <= 3.5e38", col("f32") <= struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]),
        ("id IN (1, 1.5, 2.0, 1)", col("id").isin([1, 2])),
        ("id IN (1.5, 2.5)", Const(False, col("id"))),
        ("id NOT IN (1.5, 2.5)", Const(True, col("id"))),
        ("id IN (7, 7.5)", col("id") == 7),
        ("f IN (0.0, -0.0)", col("f") == 0.0),
    ],
)
def test_numeric_literals_are_exact(where: str, expected: Expr) -> None:
    assert bound_of(where) == expected


def test_f32_gap_lower_neighbour_is_the_float32_below() -> None:
    bound = bound_of("f32 < 0.1e0")
    assert isinstance(bound, Compare) and bound.op == "<="
    below = bound.right.value
    assert isinstance(below, float)
    assert below < 0.1 < struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert struct.unpack("<f", struct.pack("<f", below))[0] == below


def test_nan_literals_follow_ieee() -> None:
    assert bound_of(col("f") == math.nan) == Const(False, col("f"))
    assert bound_of(col("f") < math.nan) == Const(False, col("f"))
    assert bound_of(col("f") != math.nan) == Const(True, col("f"))
    assert bound_of(~(col("f") > math.nan)) == Const(True, col("f"))
    assert bound_of(col("id") == math.nan) == Const(False, col("id"))
    assert bound_of(col("f").isin([math.nan, 1.0])) == (col("f") == 1.0)
    assert bound_of(col("f") <= math.inf) == (col("f") <= math.inf)


# --- temporal coercion ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("d = '2020-01-02'", col("d") == date(2020, 1, 2)),
        ("d = DATE '2020-01-02'", col("d") == date(2020, 1, 2)),
        ("d = TIMESTAMP '2020-01-02 00:00:00'", col("d") == date(2020, 1, 2)),
        ("d = TIMESTAMP '2020-01-02 10:00:00'", Const(False, col("d"))),
        ("d < TIMESTAMP '2020-01-02 10:00:00'", col("d") <= date(2020, 1, 2)),
        ("d >= TIMESTAMP '2020-01-02 10:00:00'", col("d") > date(2020, 1, 2)),
        ("d = '2020-01-02T00:00:00+02:00'", Const(False, col("d"))),
        ("d <= '2020-01-02T01:00:00+02:00'", col("d") <= date(2020, 1, 1)),
        ("ts = DATE '2020-01-02'", col("ts") == datetime(2020, 1, 2)),
        ("ts = '2020-01-02 03:04:05.5'", col("ts") == datetime(2020, 1, 2, 3, 4, 5, 500000)),
        ("ts = TIMESTAMP '2020-01-02 03:00:00+01:00'", col("ts") == datetime(2020, 1, 2, 2)),
        ("tz = TIMESTAMP '2020-01-02 03:00:00'",
         col("tz") == datetime(2020, 1, 2, 3, tzinfo=UTC)),
        ("tz = '2020-01-02 03:00:00-05:00'", col("tz") == datetime(2020, 1, 2, 8, tzinfo=UTC)),
        ("tz < DATE '2020-01-02'", col("tz") < datetime(2020, 1, 2, tzinfo=UTC)),
        ("ny = TIMESTAMP '2020-01-02 03:00:00'",
         col("ny") == datetime(2020, 1, 2, 3, tzinfo=UTC)),
        ("ts_s = TIMESTAMP '2020-01-02 03:00:00.5'", Const(False, col("ts_s"))),
        ("ts_s < TIMESTAMP '2020-01-02 03:00:00.5'", col("ts_s") <= datetime(2020, 1, 2, 3)),
        ("ts_s > TIMESTAMP '1969-12-31 23:59:59.5'",
         col("ts_s") > datetime(1969, 12, 31, 23, 59, 59)),
        ("ts_ms = TIMESTAMP '2020-01-02 03:00:00.001'",
         col("ts_ms") == datetime(2020, 1, 2, 3, 0, 0, 1000)),
        ("ts_ms != TIMESTAMP '2020-01-02 03:00:00.0015'", Const(True, col("ts_ms"))),
        ("ts_ns = TIMESTAMP '2020-01-02 03:00:00.000001'",
         col("ts_ns") == datetime(2020, 1, 2, 3, 0, 0, 1)),
        ("ts_ns < TIMESTAMP '3000-01-01 00:00:00'", Const(True, col("ts_ns"))),
        ("ts_ns > TIMESTAMP '3000-01-01 00:00:00'", Const(False, col("ts_ns"))),
        ("ts_ns > TIMESTAMP '1000-01-01 00:00:00'", Const(True, col("ts_ns"))),
    ],
)
def test_temporal_literals(where: str, expected: Expr) -> None:
    assert bound_of(where) == expected


def test_tz_literal_values_are_utc_aware_and_naive_columns_get_naive() -> None:
    tz_bound = bound_of("tz = '2020-01-02 03:00:00+05:00'")
    assert isinstance(tz_bound, Compare)
    assert tz_bound.right.value == datetime(2020, 1, 1, 22, tzinfo=UTC)
    assert tz_bound.right.value.utcoffset() == timedelta(0)  # type: ignore[union-attr]
    naive = bound_of(col("ts") == datetime(2020, 1, 2, tzinfo=timezone(timedelta(hours=1))))
    assert isinstance(naive, Compare)
    assert naive.right.value == datetime(2020, 1, 1, 23)
    assert naive.right.value.tzinfo is None  # type: ignore[union-attr]


def test_literal_value_types_match_the_column() -> None:
    cases = {
        "id = 3.0": int, "f = 3": float, "f32 = 3": float, "d = '2020-01-01'": date,
        "ts = DATE '2020-01-01'": datetime, "ls = 'x'": str, "flag = TRUE": bool,
    }
    for where, kind in cases.items():
        bound = bound_of(where)
        assert isinstance(bound, Compare)
        assert type(bound.right.value) is kind, where


# --- normal form -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("NOT id < 5", col("id") >= 5),
        ("NOT id = 5", col("id") != 5),
        ("NOT id != 5", col("id") == 5),
        ("NOT NOT id < 5", col("id") < 5),
        ("NOT s > 'a'", col("s") <= "a"),
        ("NOT f < 5", ~(col("f") < 5.0)),
        ("NOT f = 5", col("f") != 5.0),
        ("NOT f != 5", col("f") == 5.0),
        ("NOT (id < 5 AND s = 'a')", (col("id") >= 5) | (col("s") != "a")),
        ("NOT (id < 5 OR s IS NULL)", (col("id") >= 5) & col("s").is_not_null()),
        ("id BETWEEN 1 AND 5", (col("id") >= 1) & (col("id") <= 5)),
        ("id NOT BETWEEN 1 AND 5", (col("id") < 1) | (col("id") > 5)),
        ("id NOT IN (1, 2)", ~col("id").isin([1, 2])),
        ("NOT id NOT IN (1, 2)", col("id").isin([1, 2])),
        ("id IN (3)", col("id") == 3),
        ("id NOT IN (3)", col("id") != 3),
        ("NOT id IS NULL", col("id").is_not_null()),
        ("TRUE", TRUE),
        ("NOT TRUE", FALSE),
        ("TRUE AND id = 1", col("id") == 1),
        ("FALSE AND id = 1", FALSE),
        ("FALSE OR id = 1", col("id") == 1),
        ("TRUE OR id = 1", TRUE),
        ("NOT (FALSE OR id = 1)", col("id") != 1),
        ("id = 1.5 AND id = 2", Const(False, col("id")) & (col("id") == 2)),
        ("flag", col("flag") == True),  # noqa: E712
        ("NOT flag", col("flag") != True),  # noqa: E712
    ],
)
def test_normal_form(where: str, expected: Expr) -> None:
    assert bound_of(where) == expected


def test_empty_isin_matches_nothing_and_its_negation_everything() -> None:
    assert bound_of(col("id").isin([])) == FALSE
    assert bound_of(~col("id").isin([])) == TRUE


def _depth(expr: Expr) -> int:
    if isinstance(expr, (And, Or)):
        return 1 + max(_depth(expr.left), _depth(expr.right))
    if isinstance(expr, Not):
        return 1 + _depth(expr.expr)
    return 1


def _assert_negation_normal_form(expr: Expr) -> None:
    if isinstance(expr, (And, Or)):
        _assert_negation_normal_form(expr.left)
        _assert_negation_normal_form(expr.right)
    elif isinstance(expr, Not):
        assert isinstance(expr.expr, (IsNull, In, Compare)), expr


def test_long_chains_are_balanced_and_bind_without_recursion_errors() -> None:
    table = pa.table({"id": [1, 5001], "s": ["1", "x"]})
    chain: Expr = col("id") != 0
    for i in range(1, 5000):
        chain = chain & (col("id") != i)
    bound = bind(chain, SCHEMA)
    assert _depth(bound.expr) <= 14
    assert table.filter(to_arrow(bind(chain, table.schema))).column("id").to_pylist() == [5001]


def test_deep_not_chain_binds() -> None:
    expr: Expr = col("id") < 5
    for _ in range(5001):
        expr = ~expr
    assert bind(expr, SCHEMA).expr == (col("id") >= 5)


def test_deep_alternating_nesting_is_invalid_predicate_not_recursion_error() -> None:
    expr: Expr = col("id") < 5
    for i in range(20_000):
        expr = (expr | (col("id") == i)) if i % 2 else ((col("id") == i) & expr)
    try:
        bind(expr, SCHEMA)
    except InvalidPredicate as exc:
        assert "nested too deeply" in str(exc)


def test_bound_trees_are_in_negation_normal_form() -> None:
    where = ("NOT (id < 5 AND NOT (f > 1 OR s IN ('a', 'b')) OR NOT d BETWEEN "
             "'2020-01-01' AND '2020-02-01' AND ts IS NULL) OR NOT tz IS NOT NULL")
    _assert_negation_normal_form(bound_of(where))


# --- BoundExpr and compile_where -----------------------------------------------------------


def test_bound_expr_surface() -> None:
    bound = compile_where("id > 1.5 AND NOT s IS NULL", SCHEMA)
    assert isinstance(bound, BoundExpr)
    assert bound.columns == frozenset({"id", "s"})
    assert bound.schema is SCHEMA
    assert bound.source == parse_sql("id > 1.5 AND NOT s IS NULL")
    assert str(bound) == "id > 1 AND s IS NOT NULL"
    assert "id > 1" in repr(bound)
    assert bound.field("id").type == pa.int64()
    assert not bound.always_true and not bound.always_false
    assert bind(TRUE | (col("id") > 1), SCHEMA).always_true
    assert bind(col("id").isin([]), SCHEMA).always_false


def test_compile_where_inputs() -> None:
    assert compile_where(None, SCHEMA) is None
    from_sql = compile_where("id > 1", SCHEMA)
    from_api = compile_where(col("id") > 1, SCHEMA)
    assert from_sql is not None and from_api is not None
    assert from_sql.expr == from_api.expr
    assert compile_where(from_sql, SCHEMA) is from_sql
    other = pa.schema([("id", pa.float64())])
    rebound = compile_where(from_sql, other)
    assert rebound is not None and rebound.expr == (col("id") > 1.0)
    assert rebound.schema is other


@pytest.mark.parametrize("where", [True, False, 1, 1.5, b"id > 1", ["id > 1"], col("id")])
def test_compile_where_rejects_other_types(where: object) -> None:
    with pytest.raises(InvalidPredicate, match="where must be"):
        compile_where(where, SCHEMA)  # type: ignore[arg-type]


def test_compile_where_hints_at_python_bools() -> None:
    with pytest.raises(InvalidPredicate, match="compare two columns"):
        compile_where(col("id") == col("s"), SCHEMA)  # type: ignore[arg-type]


def test_literal_nodes_survive_binding_unchanged_when_exact() -> None:
    for where in ["s = 'x'", "ls >= ''", "flag != FALSE", "u64 < 5"]:
        parsed = parse_sql(where)
        assert bound_of(where) == parsed
        assert isinstance(parsed, Compare) and isinstance(parsed.right, Literal)


# --- column names: exact match wins, else a unique case-insensitive match ----------

CASES = pa.schema([pa.field("Origin", pa.string()), pa.field("dest", pa.string()),
                   pa.field("x", pa.int64()), pa.field("X", pa.int64())])


@pytest.mark.parametrize(
    ("where", "expected"),
    [("ORIGIN = 'JFK'", col("Origin") == "JFK"), ("origin = 'JFK'", col("Origin") == "JFK"),
     ("DEST IS NULL", IsNull(col("dest"))), ("x = 1", col("x") == 1), ("X = 1", col("X") == 1),
     ("lower(ORIGIN) = 'jfk'", func("lower", col("Origin")) == "jfk")],
)
def test_column_names_resolve_case_insensitively_when_unambiguous(where: str,
                                                                   expected: Expr) -> None:
    bound = compile_where(where, CASES)
    assert bound is not None and bound.expr == expected
    assert bound.columns <= set(CASES.names)


def test_ambiguous_column_is_a_typed_error_naming_the_candidates() -> None:
    with pytest.raises(AmbiguousColumn) as info:
        compile_where('"x " = 1 OR dest = \'a\' OR DEST = \'b\' OR Dest IS NULL', pa.schema(
            [pa.field("Dest", pa.string()), pa.field("DEST", pa.string()),
             pa.field("x ", pa.int8()), pa.field("dEsT", pa.string())]))
    assert info.value.column == "dest" and "'Dest'" in str(info.value)
    assert isinstance(info.value, InvalidPredicate)


# --- decimals: exact, never through float --------------------------------------------


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("amount = 0.05", col("amount") == Decimal("0.05")),
        ("amount < 24", col("amount") < Decimal("24.00")),
        ("amount = 0.055", Const(False, col("amount"))),
        ("amount < 0.055", col("amount") <= Decimal("0.05")),
        ("amount >= 0.055", col("amount") > Decimal("0.05")),
        ("amount > 100000000", Const(False, col("amount"))),
        ("amount <= 1e30", Const(True, col("amount"))),
        ("amount IN (1, 0.05, 0.051, 1.00)", col("amount").isin([Decimal("1.00"),
                                                               Decimal("0.05")])),
        (col("amount") == 0.05, col("amount") == Decimal("0.05")),  # a float's decimal spelling
        (col("amount") == Decimal("0.050"), col("amount") == Decimal("0.05")),
        ("amount BETWEEN 0.05 AND 0.07", (col("amount") >= Decimal("0.05"))
         & (col("amount") <= Decimal("0.07"))),
        ("id < 1.5", col("id") <= 1),
        ("id = 1.0", col("id") == 1),
        ("f = 0.5", col("f") == 0.5),
    ],
)
def test_decimal_literals_are_exact(where: str | Expr, expected: Expr) -> None:
    assert bound_of(where) == expected


def test_decimal_filter_is_exact_at_scale_boundaries() -> None:
    values = [Decimal("0.04"), Decimal("0.05"), Decimal("0.06"), Decimal("0.07"),
              Decimal("0.08"), None, Decimal("-0.05")]
    table = pa.table({"amount": pa.array(values, pa.decimal128(10, 2))})
    schema = table.schema
    def rows(where: str) -> list[object]:
        bound = compile_where(where, schema)
        assert bound is not None
        return filter_table(table, bound).column("amount").to_pylist()
    assert rows("amount BETWEEN 0.05 AND 0.07") == values[1:4]
    assert rows("amount NOT BETWEEN 0.05 AND 0.07") == [values[0], values[4], values[6]]
    assert rows("amount IN (0.05, -0.05)") == [values[1], values[6]]
    assert rows("amount > 0.065") == [Decimal("0.07"), Decimal("0.08")]
    assert rows("amount * 100 = 5") == [Decimal("0.05")]
    assert rows("amount > -1 AND amount < 0") == [Decimal("-0.05")]


# --- computed values: column against column, arithmetic, functions, CAST, LIKE ----------


@pytest.mark.parametrize(
    ("where", "fragment"),
    [
        ("s > id", "cannot compare"),
        ("lower(id) = 'a'", "lower()"),
        ("s + 1 > 2", "+ operator"),
        ("length(s) = 'x'", "cannot compare"),
        ("id LIKE 'a%'", "LIKE needs a string"),
        ("substr(s, 0) = 'a'", "start must be 1"),
        ("substr(s, id) = 'a'", "integer literals"),
        ("CAST(s AS INTEGER) = 'x'", "cannot compare"),
        ("CAST('abc' AS INTEGER) = 1", "CAST"),
        ("year(s) = 2020", "year()"),
        ("ts > d", "cannot compare"),
    ],
)
def test_computed_type_errors_are_invalid_predicate(where: str, fragment: str) -> None:
    with pytest.raises(InvalidPredicate, match=fragment.replace("(", r"\(").replace(")", r"\)")
                       .replace("+", r"\+")):
        compile_where(where, SCHEMA)


def test_unknown_function_is_typed() -> None:
    with pytest.raises(UnknownFunction) as info:
        compile_where("sqrt(f) > 1", SCHEMA)
    assert info.value.function == "sqrt" and "lower" in str(info.value)


def test_like_prefix_becomes_a_prunable_range() -> None:
    assert bound_of("s LIKE 'N1%'") == (col("s") >= "N1") & (col("s") < "N2")
    assert bound_of("s LIKE 'abc'") == (col("s") == "abc")
    assert bound_of("s LIKE 'a!%b%' ESCAPE '!'") == (col("s") >= "a%b") & (col("s") < "a%c")
    assert bound_of("s LIKE 'a!%b_' ESCAPE '!'") == (
        (col("s") >= "a%b") & ((col("s") < "a%c") & Like(col("s"), "a!%b_", "!")))
    assert bound_of("s LIKE '%x'") == Like(col("s"), "%x")
    assert bound_of("s ILIKE 'a%'") == Like(col("s"), "a%", case_insensitive=True)
    negated = bound_of("s NOT LIKE 'N1_'")
    assert negated == (col("s") < "N1") | ((col("s") >= "N2") | ~Like(col("s"), "N1_"))


def test_evaluation_failure_is_a_typed_error() -> None:
    table = pa.table({"s": ["1", "x"]})
    bound = compile_where("CAST(s AS INTEGER) > 0", table.schema)
    assert bound is not None
    with pytest.raises(PredicateEvaluationError, match=r"CAST|parse"):
        filter_table(table, bound)


def test_cast_rounding_a_decimal_can_carry_into_a_new_digit() -> None:
    # pyarrow's round keeps the precision: 9999999.99 rounded in decimal(9, 2) wraps to
    # 0.00 unless widened first (found by the property test).
    values = [Decimal("9999999.99"), Decimal("-9999999.99"), Decimal("0.50"), Decimal("0.49")]
    table = pa.table({"d": pa.array(values, pa.decimal128(9, 2))})
    def rows(where: str) -> list[object]:
        bound = compile_where(where, table.schema)
        assert bound is not None
        return filter_table(table, bound).column("d").to_pylist()
    assert rows("CAST(d AS BIGINT) = 10000000") == [values[0]]
    assert rows("CAST(d AS BIGINT) < 1") == [values[1], values[3]]
    assert rows("CAST(d AS DECIMAL(9,1)) = 10000000.0") == [values[0]]


@pytest.mark.parametrize("column", ["id", "i8", "u64"])
def test_long_integer_in_lists_bind_like_the_general_rule(column: str) -> None:
    """An IN list of whole numbers on an integer column (the fast case) binds to
    the same tree as the general per-value rule, which a Decimal in the list
    takes: out-of-range values dropped, duplicates once, order kept."""
    import random

    rng = random.Random(3)
    for _ in range(50):
        n = rng.randint(1, 40)
        values = [rng.choice([rng.randint(-300, 300), rng.randint(-2**70, 2**70)])
                  for _ in range(n)]
        values += values[: rng.randint(0, n)]  # duplicates
        general = [Decimal(values[0]), *values[1:]]
        assert bind(col(column).isin(values), SCHEMA).expr == \
            bind(col(column).isin(general), SCHEMA).expr
        assert bind(~col(column).isin(values), SCHEMA).expr == \
            bind(~col(column).isin(general), SCHEMA).expr
