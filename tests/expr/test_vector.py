"""The numpy evaluation of simple predicates (caslake.expr.vector) is exact.

* Property: on random tables -- NULLs, NaN, -0.0, negative and extreme
  decimals, several chunks per column, arrays sliced so their buffers start at
  an offset -- and random simple predicates, ``predicate_mask`` (numpy) equals
  ``kernel_mask`` (Arrow compute) row by row, NULL vs FALSE included, and the
  plain-Python oracle of ``reference.py``.
* ``filter_table`` equals DuckDB's ``WHERE`` on the same data for fixed
  predicates, decimal ones included.
* Decimal literals the binder would have normalised (more fractional digits
  than the scale, beyond int64) are still placed exactly.
* Literals built from buffers equal pyarrow's conversion, and a fresh process
  scanning with a simple predicate never imports pandas.
"""

from __future__ import annotations

import functools
import itertools
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import caslake
from caslake.errors import InvalidPredicate
from caslake.expr import bind, col, compile_where, filter_table, predicate_mask
from caslake.expr.arrow import kernel_mask
from caslake.expr.functions import literal_array, literal_scalar, null_scalar
from caslake.expr.nodes import Column, Compare, Expr, In, Literal, Not
from caslake.expr.vector import arrow_mask, evaluate

from .reference import SCHEMA, Pred, predicates, rows_where, tables, to_api
from .test_properties import EXAMPLES, SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def _values(mask: Any, rows: int) -> list[bool | None]:
    if isinstance(mask, pa.Scalar):
        return [mask.as_py()] * rows
    values: list[bool | None] = mask.to_pylist()
    return values


@st.composite
def _relaid(draw: st.DrawFn, table: pa.Table) -> pa.Table:
    """``table`` with the same rows, each column cut into its own chunks whose
    buffers start at an offset (a slice of a longer array)."""
    lead = draw(st.integers(0, 9))
    arrays = []
    for i, field in enumerate(table.schema):
        values = table.column(i).to_pylist()
        padded = pa.array([None] * lead + values, type=field.type).slice(lead)
        cuts = sorted(draw(st.sets(st.integers(0, len(values)), max_size=3)))
        edges = [0, *cuts, len(values)]
        arrays.append(pa.chunked_array(
            [padded.slice(a, b - a) for a, b in itertools.pairwise(edges) if b >= a],
            type=field.type))
    return pa.Table.from_arrays(arrays, schema=table.schema)


def _check(table: pa.Table, bound: Any) -> list[bool | None]:
    fast = _values(predicate_mask(table, bound), table.num_rows)
    assert fast == _values(kernel_mask(table, bound), table.num_rows)
    return fast


FEWER = settings(SETTINGS, max_examples=max(1, EXAMPLES // 4))


@FEWER
@given(data=st.data(), table=tables(), pred=predicates(computed=False))
def test_numpy_mask_equals_arrow_kernels_and_the_oracle(
    data: st.DataObject, table: pa.Table, pred: Pred
) -> None:
    relaid = data.draw(_relaid(table))
    try:
        api = to_api(pred)
        bound, negated = bind(api, SCHEMA), bind(~api, SCHEMA)
    except InvalidPredicate:
        assume(False)
        raise
    note(f"bound: {bound}")
    rows = table.to_pylist()
    mask = _check(relaid, bound)
    assert [i for i, v in enumerate(mask) if v is True] == rows_where(pred, rows, True)
    assert [i for i, v in enumerate(mask) if v is False] == rows_where(pred, rows, False)
    assert _check(relaid, negated) == [None if v is None else not v for v in mask]


# Types reference.py does not cover: unsigned 64-bit, the widest int64-backed
# decimal, a decimal too wide for the numpy path (Arrow's kernels evaluate it).
WIDE = pa.schema([("u", pa.uint64()), ("d18", pa.decimal128(18, 3)),
                  ("d0", pa.decimal128(18, 0)), ("d38", pa.decimal128(38, 2)),
                  ("tns", pa.timestamp("ns")), ("tms", pa.timestamp("ms", tz="UTC"))])
_T0 = datetime(1969, 12, 31, 23, 59, 59)
_TIMES = [_T0 + timedelta(microseconds=us) for us in (0, 1, 999, 1000, 1001, 2_000_000)]
_D18 = [Decimal(t) for t in ("999999999999999.999", "-999999999999999.999", "0.000", "-0.001",
                             "0.055", "1.500", "-1.500", "24.000")]
_D0 = [Decimal(t) for t in ("999999999999999999", "-999999999999999999", "0", "-1", "7")]
_D38 = [Decimal(t) for t in ("999999999999999999999999999999999999.99", "-0.01", "0.05", "1.50")]
_WIDE_DATA: dict[str, list[Any]] = {
    "u": [0, 1, 2**63, 2**64 - 1, 7], "d18": _D18, "d0": _D0, "d38": _D38, "tns": _TIMES,
    "tms": [t.replace(tzinfo=UTC) for t in _TIMES if t.microsecond % 1000 == 0]}
_WIDE_LITERALS: dict[str, st.SearchStrategy[Any]] = {
    "u": st.sampled_from([0, 1, 7, 2**63, 2**64 - 1, 2**64, -1, 0.5]),
    "d18": st.one_of(st.sampled_from(_D18), st.sampled_from(
        [Decimal("0.0555"), Decimal("-0.0005"), Decimal("1E+20"), 3, -2, 0.055])),
    "d0": st.one_of(st.sampled_from(_D0), st.sampled_from(
        [Decimal("0.5"), Decimal("-0.5"), 10**18, -(10**18), 2**63, -(2**63) - 1])),
    "d38": st.one_of(st.sampled_from(_D38), st.sampled_from([Decimal("0.055"), 2, -1])),
    "tns": st.one_of(st.sampled_from(_TIMES), st.sampled_from(
        [datetime(2262, 4, 12), datetime(1677, 9, 21), datetime(1970, 1, 1, tzinfo=UTC)])),
    "tms": st.one_of(st.sampled_from(_TIMES), st.sampled_from(
        [_T0.replace(tzinfo=timezone(timedelta(hours=-2))), datetime(9999, 12, 31)])),
}


@st.composite
def _wide_tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 10))
    return pa.table({name: pa.array(draw(st.lists(st.one_of(st.none(), st.sampled_from(data)),
                                                  min_size=n, max_size=n)), WIDE.field(name).type)
                     for name, data in _WIDE_DATA.items()})


@st.composite
def _wide_predicates(draw: st.DrawFn) -> Expr:
    def leaf() -> Expr:
        name = draw(st.sampled_from(list(_WIDE_DATA)))
        kind = draw(st.sampled_from(["cmp", "cmp", "in", "between", "null"]))
        literal = draw(_WIDE_LITERALS[name])
        if kind == "cmp":
            return Compare(draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="])),
                           col(name), Literal(literal))
        if kind == "in":
            return col(name).isin(draw(st.lists(_WIDE_LITERALS[name], max_size=12)))
        if kind == "between":
            return col(name).between(literal, draw(_WIDE_LITERALS[name]))
        return col(name).is_null()
    expr = leaf()
    for _ in range(draw(st.integers(0, 3))):
        other = leaf()
        expr = draw(st.sampled_from([expr & other, expr | other, ~(expr & other)]))
    return expr


@FEWER
@given(data=st.data(), table=_wide_tables(), expr=_wide_predicates())
def test_wide_and_unsigned_columns_equal_arrow_kernels(
    data: st.DataObject, table: pa.Table, expr: Expr
) -> None:
    bound = bind(expr, WIDE)
    note(f"bound: {bound}")
    mask = _check(data.draw(_relaid(table)), bound)
    assert _check(table, bind(~expr, WIDE)) == [None if v is None else not v for v in mask]


# --- decimal literals placed exactly (no binder in between) ----------------------------------

DECIMALS = pa.table({"d": pa.array([Decimal(t) if t else None for t in (
    "0.05", "0.06", "-0.06", "0.07", None, "-9999999999999999.99", "9999999999999999.99")],
    pa.decimal128(18, 2))})


def _raw(node: Expr) -> list[bool | None]:
    """The numpy evaluation of an unbound leaf; any fallback is a failure."""
    def refuse(leaf: Expr) -> Any:
        raise AssertionError(f"{leaf} went to the fallback")
    result: list[bool | None] = arrow_mask(evaluate(DECIMALS, node, refuse),
                                           DECIMALS.num_rows).to_pylist()
    return result


def _truth(op: str, literal: Decimal | int) -> list[bool | None]:
    ops = {"=": Decimal.__eq__, "!=": Decimal.__ne__, "<": Decimal.__lt__,
           "<=": Decimal.__le__, ">": Decimal.__gt__, ">=": Decimal.__ge__}
    return [None if v is None else bool(ops[op](v, Decimal(literal)))
            for v in DECIMALS.column("d").to_pylist()]


@pytest.mark.parametrize("literal", [
    Decimal("0.055"), Decimal("-0.055"), Decimal("0.06"), Decimal("0.0600"), Decimal("-0.061"),
    0, 1, -1, Decimal("-9999999999999999.99"), Decimal("9999999999999999.995"),
    Decimal("92233720368547758.08"), Decimal("-92233720368547758.09"), 10**30, -(10**30),
    Decimal("1E-40"),
])
@pytest.mark.parametrize("op", ["=", "!=", "<", "<=", ">", ">="])
def test_decimal_literals_are_placed_exactly(op: str, literal: Decimal | int) -> None:
    assert _raw(Compare(op, Column("d"), Literal(literal))) == _truth(op, literal)
    assert _raw(Not(Compare(op, Column("d"), Literal(literal)))) == \
        [None if v is None else not v for v in _truth(op, literal)]


def test_decimal_in_drops_values_no_row_can_equal() -> None:
    values = (Decimal("0.055"), Decimal("0.07"), 10**30, Decimal("-0.06"))
    want = [None if v is None else v in (Decimal("0.07"), Decimal("-0.06"))
            for v in DECIMALS.column("d").to_pylist()]
    assert _raw(In(Column("d"), tuple(Literal(v) for v in values))) == want


# --- long IN lists on sorted columns (key-list deletes) ---------------------------------------

def _sorted_keys_table() -> pa.Table:
    """Key-like columns in non-decreasing order within each chunk (repeats and
    a leading NULL run included), cut into chunks that start at an offset."""
    rng = np.random.default_rng(3)
    keys = np.sort(rng.integers(-5_000, 5_000, 4_000))
    table = pa.table({
        "k": pa.array(keys),
        "u": pa.array((keys + 5_000).astype(np.uint32)),
        "d": pa.array([Decimal(int(k)).scaleb(-2) for k in keys], pa.decimal128(15, 2)),
        "day": pa.array((keys + 9_000).astype(np.int32)).cast(pa.date32()),
    })
    nulls = pa.table({name: pa.nulls(5, table.schema.field(name).type)
                      for name in table.column_names})
    padded = pa.concat_tables([nulls, table]).combine_chunks()
    return pa.concat_tables([padded.slice(a, b - a)
                             for a, b in ((0, 3), (3, 1_700), (1_700, 1_701), (1_701, 4_005))])


def _sorted_probe(node: Expr, table: pa.Table) -> list[bool | None]:
    def refuse(leaf: Expr) -> Any:
        raise AssertionError(f"a {type(leaf).__name__} leaf went to the fallback")
    result: list[bool | None] = arrow_mask(evaluate(table, node, refuse),
                                           table.num_rows).to_pylist()
    return result


@pytest.mark.parametrize(("name", "convert"), [
    ("k", int), ("u", lambda k: k + 5_000), ("d", lambda k: Decimal(k).scaleb(-2)),
    ("day", lambda k: (datetime(1970, 1, 1) + timedelta(days=k + 9_000)).date()),
])
def test_long_in_list_on_sorted_chunks_is_a_binary_search_equal_to_arrow(
        name: str, convert: Any) -> None:
    """A 1,500-value IN list (a key-list delete) on a column whose chunks are in
    order is evaluated by binary search, never by the fallback, and equals
    Arrow's kernels: repeated column values, keys absent from the data or
    beyond its range, duplicate keys and NULL rows included."""
    table = _sorted_keys_table()
    rng = np.random.default_rng(4)
    picked = [int(k) for k in rng.integers(-6_000, 6_000, 1_500)] + [-5_000, 4_999, 4_999]
    values = [convert(k) for k in picked]
    if name == "d":
        values += [Decimal("0.005"), 10**30]  # between two cents; beyond int64
    node = In(Column(name), tuple(Literal(v) for v in values))
    got = _sorted_probe(node, table)
    bound = bind(col(name).isin(values), table.schema)
    assert got == _values(kernel_mask(table, bound), table.num_rows)
    assert got.count(None) == 5 and got.count(True) > 100
    assert _sorted_probe(Not(node), table) == [None if v is None else not v for v in got]


def test_long_in_list_on_unsorted_values_still_equals_arrow() -> None:
    """Out-of-order values (one swap deep in a chunk) take Arrow's hash lookup."""
    keys = np.arange(-5_000, 5_000, dtype=np.int64)
    keys[[3_000, 3_001]] = keys[[3_001, 3_000]]
    table = pa.table({"k": pa.array(keys)})
    values = list(range(-5_000, 5_000, 7))
    bound = bind(col("k").isin(values), table.schema)
    got = _values(predicate_mask(table, bound), table.num_rows)
    assert got == _values(kernel_mask(table, bound), table.num_rows)
    assert got.count(True) == len(values)


# --- against DuckDB --------------------------------------------------------------------------


@functools.cache
def _sample() -> pa.Table:
    rng = np.random.default_rng(14)
    n = 3000

    def nulls(values: list[Any]) -> list[Any]:
        return [None if rng.random() < 0.1 else v for v in values]

    cents = rng.integers(-1200, 1200, n)
    table = pa.table({
        "id": pa.array(np.arange(n)),
        "i": pa.array(nulls(rng.integers(-50, 50, n).tolist()), pa.int32()),
        "f": pa.array(nulls((rng.integers(-8, 8, n) / 4).tolist()), pa.float64()),
        "disc": pa.array(nulls([Decimal(int(c)).scaleb(-2) for c in cents]),
                         pa.decimal128(15, 2)),
        "qty": pa.array(nulls([Decimal(int(c)) for c in rng.integers(0, 50, n)]),
                        pa.decimal128(15, 2)),
        "wide": pa.array(nulls([Decimal(int(c)).scaleb(-2) for c in cents]),
                         pa.decimal128(30, 2)),
        "day": pa.array(nulls(rng.integers(8700, 9500, n).tolist()), pa.int32()).cast(pa.date32()),
        "ts": pa.array(nulls((rng.integers(0, 10**6, n) * 10**9).tolist()), pa.timestamp("ns")),
        "flag": pa.array(nulls((rng.random(n) < 0.5).tolist()), pa.bool_()),
        "s": pa.array(nulls(rng.choice(["MAIL", "SHIP", "AIR"], n).tolist())),
    })
    # Several chunks per column, each starting at an offset in its buffers.
    parts = [table.slice(a, b - a) for a, b in ((0, 700), (700, 701), (701, 2500), (2500, n))]
    return pa.concat_tables(parts)


@pytest.mark.parametrize("where", [
    "disc >= 0.05 AND disc <= 0.07",
    "disc BETWEEN 0.05 AND 0.07 AND qty < 24",
    "disc > 0.055 OR disc <= -0.055",
    "disc = 0.055 OR disc != 0.07",
    "disc IN (0.05, 0.06, -3.21, 0.055, 100000000000000000000)",
    "disc NOT IN (0.05, 0.06, -3.21)",
    "NOT (disc < 0 OR qty >= 10)",
    "disc < -92233720368547758.09 OR qty > 92233720368547758.08",
    "wide BETWEEN -1 AND 1 OR disc = 0",
    "day >= DATE '1994-01-01' AND day < DATE '1995-01-01' AND disc BETWEEN 0.05 AND 0.07",
    "ts >= TIMESTAMP '1970-01-05 00:00:00' AND ts < TIMESTAMP '1970-01-07 12:00:00.5'",
    "i IN (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12) OR i IS NULL",
    "NOT (i > 0) AND f IS NOT NULL",
    "f IN (0.0, 1.5) OR f < -1",
    "flag = true AND s = 'MAIL' OR NOT (flag = true)",
    "flag = false OR disc IS NULL",
    "NOT (s = 'AIR' AND disc > 0.5)",
])
def test_filter_table_equals_duckdb(where: str) -> None:
    table = _sample()
    bound = compile_where(where, table.schema)
    assert bound is not None
    got = filter_table(table, bound).column("id").to_pylist()
    con = duckdb.connect()
    con.register("t", table)
    want = [r[0] for r in con.execute(f"SELECT id FROM t WHERE {where} ORDER BY id").fetchall()]
    assert got == want


# --- no pandas on the first scan ------------------------------------------------------------

def _loaded_after_scan(path: Path, where: str) -> set[str]:
    probe = (f"import json, sys, caslake\n"
             f"t = caslake.open_table({str(path)!r})\n"
             f"t.scan(where={where}).to_arrow()\n"
             f"print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(("where", "pandas"), [
    ("caslake.col('x') > 1", False),
    ("\"x BETWEEN 1 AND 2 AND d >= 0.05 AND day < DATE '2000-01-01' OR f IS NULL\"", False),
    ("\"s IN ('a', 'b') OR s LIKE 'b%' OR s IS NULL\"", False),
    ("\"lower(s) = 'b'\"", True),  # a computed value: pyarrow converts Python values
])
def test_first_scan_with_a_simple_predicate_does_not_import_pandas(
    tmp_path: Path, where: str, pandas: bool
) -> None:
    table = caslake.create_table(str(tmp_path / "t"), pa.schema([
        ("x", pa.int64()), ("d", pa.decimal128(15, 2)), ("day", pa.date32()),
        ("f", pa.float64()), ("s", pa.string())]))
    table.append(pa.table({
        "x": [1, 2, None], "d": pa.array([Decimal("0.05"), None, Decimal("1.00")],
                                         pa.decimal128(15, 2)),
        "day": pa.array([1, None, 3], pa.date32()), "f": [0.5, None, 1.0], "s": ["a", "b", None],
    }))
    assert ("pandas" in _loaded_after_scan(tmp_path / "t", where)) is pandas


# --- literals built from buffers equal pyarrow's conversion ----------------------------------

_LITERAL_CASES: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.int8(), st.integers(-130, 130)), (pa.uint64(), st.integers(-1, 2**64)),
    (pa.int64(), st.one_of(st.integers(-(2**64), 2**64), st.booleans())),
    (pa.float32(), st.one_of(st.floats(), st.integers(-(2**60), 2**60))),
    (pa.float64(), st.one_of(st.floats(), st.integers(2**53 - 2, 2**53 + 2))),
    (pa.bool_(), st.one_of(st.booleans(), st.integers(0, 1))),
    (pa.string(), st.text(max_size=4)), (pa.large_string(), st.text(max_size=4)),
    (pa.decimal128(9, 2), st.one_of(st.decimals(allow_nan=True, places=3), st.integers(-10, 10),
                                    st.sampled_from([Decimal("9999999.99"), Decimal("1E+7")]))),
    (pa.decimal128(38, 0), st.one_of(st.integers(-(10**38), 10**38), st.decimals(places=0))),
    (pa.decimal256(40, 5), st.decimals(allow_nan=False, allow_infinity=False, places=5)),
    (pa.date32(), st.one_of(st.dates(), st.datetimes())),
    (pa.timestamp("s"), st.datetimes()), (pa.timestamp("ns"), st.datetimes()),
    (pa.timestamp("us", tz="UTC"), st.datetimes(timezones=st.sampled_from([UTC]))),
    (pa.timestamp("us", tz="UTC"), st.datetimes()),
]


def _same(ours: pa.Scalar[Any], theirs: pa.Scalar[Any]) -> bool:
    """Equal values of one type; NaN equals NaN."""
    if ours.type != theirs.type:
        return False
    a, b = ours.as_py(), theirs.as_py()
    return ours.equals(theirs) or (isinstance(a, float) and a != a and b != b)


def _converted(make: Any) -> Any:
    try:
        return make()
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        return type(exc).__name__


@SETTINGS
@given(data=st.data(), case=st.sampled_from(_LITERAL_CASES))
def test_literals_built_from_buffers_equal_pyarrow(
    data: st.DataObject, case: tuple[pa.DataType, st.SearchStrategy[Any]]
) -> None:
    arrow_type, values = case
    value = data.draw(values)
    ours, theirs = (_converted(lambda: literal_scalar(value, arrow_type)),
                    _converted(lambda: pa.scalar(value, type=arrow_type)))
    if isinstance(theirs, str):
        assert isinstance(ours, str)
    else:
        assert isinstance(ours, pa.Scalar) and _same(ours, theirs)
    many = data.draw(st.lists(values, min_size=1, max_size=4))
    built = literal_array(many, arrow_type)
    if built is not None:
        want = pa.array(many, type=arrow_type)
        assert len(built) == len(want)
        assert all(_same(a, b) for a, b in zip(built, want, strict=True))
    assert null_scalar(pa.bool_()).equals(pa.scalar(None, pa.bool_()))
