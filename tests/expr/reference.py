"""Test oracle for caslake.expr: random tables, random predicates, a reference evaluator.

Predicates are generated as this module's own small tuple AST -- not as
caslake nodes -- and then rendered two independent ways: as SQL text
(:func:`to_sql_text`) and through the Python API (:func:`to_api`).  The
reference evaluator (:func:`evaluate`) computes SQL three-valued logic row by
row in plain Python, with its own literal conversions, so it shares no code
with the binder it checks.

Semantics the oracle encodes (the documented contract of caslake.expr):

* comparisons are exact in mathematical value (Python compares int and float
  exactly); NaN follows IEEE (only ``!=`` holds); NULL makes a test NULL;
* a date column compared with a timestamp uses the date's midnight;
* on a tz-aware column a naive literal is UTC; on a naive column an aware
  literal is converted to UTC and made naive;
* ``x IN ()`` is FALSE for every row; ``BETWEEN`` is ``>= AND <=``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from caslake.expr import FALSE, TRUE, Compare, Expr, col, func, lit

Pred = tuple[Any, ...]
Row = dict[str, Any]

# --- the table ----------------------------------------------------------------

BASE = datetime(2020, 1, 1)


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: pa.DataType
    data: st.SearchStrategy[Any]
    literals: st.SearchStrategy[Any]
    kind: str  # int | float | str | bool | date | ts | tstz


def _ints(*values: int) -> st.SearchStrategy[int]:
    return st.sampled_from(values)


_FLOAT_DATA = [-1.5, -0.0, 0.0, 0.5, 1.0, 2.0, 2.5, math.nan, math.inf, -math.inf,
               9007199254740992.0, 1.7976931348623157e308]
_F32_DATA = [0.5, 0.10000000149011612, 16777216.0, 3.4028234663852886e38, -0.0, 1.0, math.nan]
_STRINGS = st.text(alphabet="abA'é Z\x00\"", max_size=3)
_DATES = st.sampled_from([date(2019, 12, 31) + timedelta(days=k) for k in range(4)])
_TIMES = st.sampled_from([BASE + timedelta(seconds=s, microseconds=us)
                          for s in (-1, 0, 1, 3600) for us in (0, 1, 500_000)])
_WHOLE_SECONDS = st.sampled_from([BASE + timedelta(seconds=s) for s in (-1, 0, 1, 2)])


def _temporal_literals() -> st.SearchStrategy[Any]:
    offsets = st.sampled_from([None, UTC, timezone(timedelta(hours=2)),
                               timezone(timedelta(hours=-5, minutes=-30))])
    datetimes = st.builds(lambda t, tz: t if tz is None else t.replace(tzinfo=tz),
                          _TIMES, offsets)
    iso = st.one_of(
        _DATES.map(lambda d: d.isoformat()),
        datetimes.map(lambda t: t.isoformat(sep=" ")),
        datetimes.map(lambda t: t.isoformat()),
    )
    return st.one_of(_DATES, datetimes, iso)


COLUMNS: list[ColumnSpec] = [
    ColumnSpec("i", pa.int64(),
               st.one_of(st.integers(-3, 3), _ints(-(2**63), 2**63 - 1)),
               st.one_of(st.integers(-4, 4),
                         _ints(2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**70),
                         st.sampled_from([-1.5, 0.5, 2.0, 2.5, -0.0, math.nan, math.inf,
                                          -math.inf, 1e19, -1e19])),
               "int"),
    ColumnSpec("i8", pa.int8(),
               st.one_of(st.integers(-3, 3), _ints(-128, 127)),
               st.one_of(st.integers(-3, 3), _ints(-129, -128, 127, 128, 1000),
                         st.sampled_from([0.5, 126.5, 127.5, -128.5, -129.5])),
               "int"),
    ColumnSpec("f", pa.float64(), st.sampled_from(_FLOAT_DATA),
               st.one_of(st.sampled_from(_FLOAT_DATA), st.integers(-3, 3),
                         _ints(2**53, 2**53 + 1, 10**400, -(10**400)),
                         st.floats(allow_nan=False, width=64)),
               "float"),
    ColumnSpec("f32", pa.float32(), st.sampled_from(_F32_DATA),
               st.one_of(st.sampled_from([*_F32_DATA, 0.1, 16777217.0, 3.5e38, 1e-46]),
                         _ints(16777216, 16777217, 0)),
               "float"),
    ColumnSpec("s", pa.string(), _STRINGS, _STRINGS, "str"),
    ColumnSpec("dec", pa.decimal128(9, 2),
               st.sampled_from([Decimal(t) for t in ("0.05", "0.06", "0.07", "-0.05", "24.00",
                                                     "9999999.99", "-9999999.99", "0.00")]),
               st.one_of(st.sampled_from([Decimal(t) for t in (
                   "0.05", "0.06", "0.065", "0.0700", "24", "-0.05", "9999999.99", "10000000",
                   "-10000000.5", "0", "0.001")]),
                   st.integers(-2, 25), st.sampled_from([0.05, 0.07, 0.065, 24.0, -0.05])),
               "dec"),
    ColumnSpec("b", pa.bool_(), st.booleans(), st.booleans(), "bool"),
    ColumnSpec("d", pa.date32(), _DATES, _temporal_literals(), "date"),
    ColumnSpec("ts", pa.timestamp("us"), _TIMES, _temporal_literals(), "ts"),
    ColumnSpec("tz", pa.timestamp("us", tz="UTC"), _TIMES.map(lambda t: t.replace(tzinfo=UTC)),
               _temporal_literals(), "tstz"),
    ColumnSpec("ts_s", pa.timestamp("s"), _WHOLE_SECONDS, _temporal_literals(), "ts"),
]
SPECS = {spec.name: spec for spec in COLUMNS}
SCHEMA = pa.schema([pa.field(spec.name, spec.type) for spec in COLUMNS])


@st.composite
def tables(draw: st.DrawFn, max_rows: int = 12) -> pa.Table:
    """A table of SCHEMA with 0..max_rows rows, nulls in every column."""
    n = draw(st.integers(0, max_rows))
    arrays = []
    for spec in COLUMNS:
        values = draw(st.lists(st.one_of(st.none(), spec.data), min_size=n, max_size=n))
        arrays.append(pa.array(values, type=spec.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


# --- predicates ---------------------------------------------------------------

_OPS = ["=", "!=", "<", "<=", ">", ">="]


@st.composite
def _leaf(draw: st.DrawFn) -> Pred:
    spec = draw(st.sampled_from(COLUMNS))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "between", "in", "isnull"]))
    if kind == "cmp":
        return ("cmp", spec.name, draw(st.sampled_from(_OPS)), draw(spec.literals),
                draw(st.booleans()))
    if kind == "between":
        return ("between", spec.name, draw(spec.literals), draw(spec.literals),
                draw(st.booleans()))
    if kind == "in":
        return ("in", spec.name, tuple(draw(st.lists(spec.literals, max_size=4))),
                draw(st.booleans()))
    return ("isnull", spec.name, draw(st.booleans()))


# Computed leaves: each is (tag, ...), evaluated by _computed() below.
_LIKE_PATTERNS = st.one_of(st.text(alphabet="aAbzZ%_'é", max_size=4),
                           st.sampled_from(["a%", "A%", "%a%", "_", "%A", "a_", "%", "ab%"]))
_COL_PAIRS = [("i", "i8"), ("i8", "f"), ("ts", "ts_s"), ("s", "s"), ("dec", "i8"), ("dec", "dec")]


@st.composite
def _computed_leaf(draw: st.DrawFn) -> Pred:
    kind = draw(st.sampled_from(["like", "like", "colcmp", "arith", "func", "cast"]))
    op = draw(st.sampled_from(_OPS))
    if kind == "like":
        return ("like", draw(_LIKE_PATTERNS), draw(st.booleans()), draw(st.booleans()))
    if kind == "colcmp":
        left, right = draw(st.sampled_from(_COL_PAIRS))
        return ("colcmp", left, op, right)
    if kind == "arith":
        column = draw(st.sampled_from(["i8", "f", "dec"]))
        arith = draw(st.sampled_from(["+", "-", "*", "/"]))
        k = draw(st.sampled_from([1, 2, 3, -1]))
        return ("arith", column, arith, k, op, draw(st.integers(-5, 130)))
    if kind == "func":
        name, column, literals = draw(st.sampled_from([
            ("lower", "s", _STRINGS), ("upper", "s", _STRINGS),
            ("length", "s", st.integers(0, 4)), ("abs", "i8", st.integers(-2, 130)),
            ("year", "d", st.sampled_from([2019, 2020])), ("day", "d", st.integers(1, 31)),
            ("coalesce", "i8", st.integers(-3, 3)),
        ]))
        return ("func", name, column, op, draw(literals))
    target, column, literals = draw(st.sampled_from([
        ("DOUBLE", "i8", st.sampled_from([0.5, 1.0, -128.0])),
        ("VARCHAR", "i8", st.sampled_from(["1", "-1", "10", "127"])),
        ("DATE", "ts", _DATES),
        ("DECIMAL(10,2)", "i8", st.sampled_from([Decimal("1.00"), Decimal("0.5"), 2])),
        ("BIGINT", "dec", st.integers(-2, 25)),
    ]))
    return ("cast", target, column, op, draw(literals))


def predicates(computed: bool = True) -> st.SearchStrategy[Pred]:
    """Random predicates: leaves (simple and, unless ``computed`` is False,
    computed: LIKE, column against column, arithmetic, functions, CAST)
    combined with NOT / AND / OR and constants."""
    leaves = st.one_of(_leaf(), _leaf(), _leaf(), st.booleans().map(lambda b: ("const", b)))
    if computed:
        leaves = st.one_of(leaves, _computed_leaf(), _computed_leaf())
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            inner.map(lambda p: ("not", p)),
            st.tuples(st.just("and"), inner, inner),
            st.tuples(st.just("or"), inner, inner),
        ),
        max_leaves=6,
    )


def _like_regex(pattern: str, case_insensitive: bool) -> re.Pattern[str]:
    parts = [".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if case_insensitive else 0))


def _round_half_away(value: Decimal) -> int:
    return int(value.to_integral_value(rounding="ROUND_HALF_UP"))


def _computed_value(pred: Pred, row: Row) -> Any:
    """The value a computed leaf compares (None for NULL)."""
    tag = pred[0]
    if tag == "arith":
        _, column, arith, k, _op, _lit = pred
        x = row[column]
        if x is None:
            return None
        if arith == "/":
            return float(x) / float(k)
        if isinstance(x, float):
            k = float(k)
        return {"+": x + k, "-": x - k, "*": x * k}[arith]
    if tag == "func":
        _, name, column, _op, _lit = pred
        x = row[column]
        if name == "coalesce":
            return 0 if x is None else x
        if x is None:
            return None
        return {"lower": str.lower, "upper": str.upper, "length": len, "abs": abs,
                "year": lambda d: d.year, "day": lambda d: d.day}[name](x)
    _, target, column, _op, _lit = pred
    x = row[column]
    if x is None:
        return None
    if target == "DOUBLE":
        return float(x)
    if target == "VARCHAR":
        return str(x)
    if target == "DATE":
        return x.date()
    if target == "BIGINT":
        return _round_half_away(x)
    return Decimal(x).quantize(Decimal("0.01"))


def _compare_values(op: str, a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    if isinstance(a, float) and isinstance(b, Decimal):
        b = float(b)  # a decimal literal is cast to the float's type
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, Decimal):
            a = float(a)
        if isinstance(b, Decimal):
            b = float(b)
    if isinstance(a, Decimal) and isinstance(b, float):
        b = Decimal(repr(b))
    return _PY_OPS[op](a, b)


def _evaluate_computed(pred: Pred, row: Row) -> bool | None:
    tag = pred[0]
    if tag == "like":
        _, pattern, negated, case_insensitive = pred
        x = row["s"]
        if x is None:
            return None
        found = _like_regex(pattern, case_insensitive).fullmatch(x) is not None
        return (not found) if negated else found
    if tag == "colcmp":
        _, left, op, right = pred
        a, b = row[left], row[right]
        if a is None or b is None:
            return None
        if isinstance(a, float) or isinstance(b, float):  # numbers widen to float64
            a, b = float(a), float(b)
        return _PY_OPS[op](a, b)
    op, literal = pred[-2], pred[-1]
    return _compare_values(op, _computed_value(pred, row), literal)


def predicates_simple() -> st.SearchStrategy[Pred]:
    """Predicates with simple leaves only (column against literals)."""
    return predicates(computed=False)


# --- reference evaluation -------------------------------------------------------


def _as_naive_utc(value: datetime) -> datetime:
    return value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)


def _parse_iso(text: str) -> date | datetime:
    if len(text) == 10:
        return date.fromisoformat(text)
    return datetime.fromisoformat(text)


def _comparable(kind: str, x: Any, v: Any) -> tuple[Any, Any]:
    """Map a column value and a literal onto one Python type with exact ordering."""
    if kind == "dec" and isinstance(v, float) and math.isfinite(v):
        return x, Decimal(repr(v))  # a Python float stands for its shortest decimal
    if kind in ("date", "ts", "tstz") and isinstance(v, str):
        v = _parse_iso(v)
    if kind == "date":
        if isinstance(v, datetime):
            return datetime.combine(x, time(0)), _as_naive_utc(v)
        return x, v
    if kind == "ts":
        if not isinstance(v, datetime):
            v = datetime.combine(v, time(0))
        return x, _as_naive_utc(v)
    if kind == "tstz":
        if not isinstance(v, datetime):
            v = datetime.combine(v, time(0))
        if v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        return x, v
    return x, v


_COMPUTED_TAGS = frozenset({"like", "colcmp", "arith", "func", "cast"})
_PY_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: bool(a == b),
    "!=": lambda a, b: bool(a != b),
    "<": lambda a, b: bool(a < b),
    "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b),
    ">=": lambda a, b: bool(a >= b),
}


def _not(a: bool | None) -> bool | None:
    return None if a is None else not a


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _cmp(column: str, op: str, value: Any, row: Row) -> bool | None:
    x = row[column]
    if x is None:
        return None
    a, b = _comparable(SPECS[column].kind, x, value)
    return _PY_OPS[op](a, b)


def evaluate(pred: Pred, row: Row) -> bool | None:
    """SQL value of ``pred`` on ``row``: True, False or None (NULL)."""
    tag = pred[0]
    if tag == "const":
        return bool(pred[1])
    if tag == "not":
        return _not(evaluate(pred[1], row))
    if tag == "and":
        return _and(evaluate(pred[1], row), evaluate(pred[2], row))
    if tag == "or":
        return _or(evaluate(pred[1], row), evaluate(pred[2], row))
    if tag == "cmp":
        _, column, op, value, _flip = pred
        return _cmp(column, op, value, row)
    if tag == "between":
        _, column, low, high, negated = pred
        result = _and(_cmp(column, ">=", low, row), _cmp(column, "<=", high, row))
        return _not(result) if negated else result
    if tag == "in":
        _, column, values, negated = pred
        found: bool | None = False
        for value in values:
            found = _or(found, _cmp(column, "=", value, row))
        return _not(found) if negated else found
    if tag == "isnull":
        _, column, negated = pred
        return (row[column] is not None) if negated else (row[column] is None)
    if tag in _COMPUTED_TAGS:
        return _evaluate_computed(pred, row)
    raise AssertionError(pred)


def rows_where(pred: Pred, rows: list[Row], want: bool | None = True) -> list[int]:
    """Indices of the rows where ``pred`` evaluates to ``want``."""
    return [i for i, row in enumerate(rows) if evaluate(pred, row) is want]


# --- rendering ------------------------------------------------------------------

_FLIPPED = {"=": "=", "!=": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class Unrenderable(Exception):
    """The predicate has a literal SQL cannot spell (NaN, infinity)."""


def _sql_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unrenderable(value)
        return repr(value) + ("" if "e" in repr(value) else "e0")  # 1.5 alone is a DECIMAL
    if isinstance(value, Decimal):
        return format(value, "f") + ("" if "." in format(value, "f") else ".0")
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, datetime):
        return f"timestamp '{value.isoformat()}'"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    raise AssertionError(value)


def to_sql_text(pred: Pred) -> str:
    """``pred`` as SQL text (raises Unrenderable for NaN/infinite literals)."""
    tag = pred[0]
    if tag == "const":
        return "TRUE" if pred[1] else "false"
    if tag == "not":
        return f"NOT ({to_sql_text(pred[1])})"
    if tag in ("and", "or"):
        return f"({to_sql_text(pred[1])}) {tag.upper()} ({to_sql_text(pred[2])})"
    if tag == "cmp":
        _, column, op, value, flip = pred
        if flip:
            return f"{_sql_value(value)} {_FLIPPED[op]} {column}"
        return f"{column} {'==' if op == '=' else op} {_sql_value(value)}"
    if tag == "between":
        _, column, low, high, negated = pred
        word = "not between" if negated else "BETWEEN"
        return f"{column} {word} {_sql_value(low)} and {_sql_value(high)}"
    if tag == "in":
        _, column, values, negated = pred
        if not values:
            return "TRUE" if negated else "FALSE"
        word = "NOT IN" if negated else "in"
        return f"{column} {word} ({', '.join(_sql_value(v) for v in values)})"
    if tag == "isnull":
        _, column, negated = pred
        return f"{column} IS {'NOT ' if negated else ''}NULL"
    if tag == "like":
        _, pattern, negated, ci = pred
        word = ("NOT " if negated else "") + ("ilike" if ci else "LIKE")
        return f"s {word} {_sql_value(pattern)}"
    if tag == "colcmp":
        _, left, op, right = pred
        return f"{left} {op} {right}"
    if tag == "arith":
        _, column, arith, k, op, literal = pred
        return f"{column} {arith} {k} {op} {_sql_value(literal)}"
    if tag == "func":
        _, name, column, op, literal = pred
        call = f"{name}({column}, 0)" if name == "coalesce" else f"{name}({column})"
        return f"{call} {op} {_sql_value(literal)}"
    if tag == "cast":
        _, target, column, op, literal = pred
        return f"CAST({column} AS {target}) {op} {_sql_value(literal)}"
    raise AssertionError(pred)


def _computed_api(pred: Pred) -> Expr:
    tag = pred[0]
    if tag == "like":
        _, pattern, negated, ci = pred
        like = col("s").ilike(pattern) if ci else col("s").like(pattern)
        return ~like if negated else like
    if tag == "colcmp":
        _, left, op, right = pred
        return Compare(op, col(left), col(right))
    if tag == "arith":
        _, column, arith, k, op, literal = pred
        c = col(column)
        value = {"+": c + k, "-": c - k, "*": c * k, "/": c / k}[arith]
        return Compare(op, value, lit(literal))
    if tag == "func":
        _, name, column, op, literal = pred
        args = (col(column), 0) if name == "coalesce" else (col(column),)
        return Compare(op, func(name, *args), lit(literal))
    _, target, column, op, literal = pred
    return Compare(op, col(column).cast(target), lit(literal))


def to_api(pred: Pred) -> Expr:
    """``pred`` built with the Python API."""
    tag = pred[0]
    if tag == "const":
        return TRUE if pred[1] else FALSE
    if tag == "not":
        return ~to_api(pred[1])
    if tag == "and":
        return to_api(pred[1]) & to_api(pred[2])
    if tag == "or":
        return to_api(pred[1]) | to_api(pred[2])
    if tag == "cmp":
        _, column, op, value, flip = pred
        c = col(column)
        if flip:  # literal on the left (c < v is v > c): Python reflects onto the column
            lv = lit(value)
            flipped: dict[str, Callable[[], Expr]] = {
                "=": lambda: lv == c, "!=": lambda: lv != c, "<": lambda: lv > c,
                "<=": lambda: lv >= c, ">": lambda: lv < c, ">=": lambda: lv <= c,
            }
            return flipped[op]()
        direct: dict[str, Callable[[], Expr]] = {
            "=": lambda: c == value, "!=": lambda: c != value, "<": lambda: c < value,
            "<=": lambda: c <= value, ">": lambda: c > value, ">=": lambda: c >= value,
        }
        return direct[op]()
    if tag == "between":
        _, column, low, high, negated = pred
        expr = col(column).between(low, high)
        return ~expr if negated else expr
    if tag == "in":
        _, column, values, negated = pred
        in_expr = col(column).isin(list(values))
        return ~in_expr if negated else in_expr
    if tag == "isnull":
        _, column, negated = pred
        return col(column).is_not_null() if negated else col(column).is_null()
    if tag in _COMPUTED_TAGS:
        return _computed_api(pred)
    raise AssertionError(pred)
