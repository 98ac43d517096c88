"""Types at the edges (issue 32): an append casts a column to the table's type
when no value changes, checked on the values; otherwise a SchemaMismatch names
the column (full path when nested) and its first offending value.

Every accepted case is compared with DuckDB doing the same CAST on the same
values; every refused value is one DuckDB's CAST changes (or refuses).
"""

from __future__ import annotations

import math
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caslake
from caslake.errors import SchemaMismatch


def _table(tmp: Path, schema: pa.Schema) -> caslake.Table:
    return caslake.Table.create(f"file://{tmp}/{uuid.uuid4().hex}", schema)


def _duck_cast(values: list[Any], src_sql: str, dst_sql: str) -> list[Any]:
    """DuckDB's CAST of ``values`` (given as ``src_sql``) to ``dst_sql``."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (i INTEGER, v {src_sql})")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(values)))
    con.execute(f"CREATE TABLE u (i INTEGER, v {dst_sql})")
    con.execute("INSERT INTO u SELECT i, v FROM t")  # DuckDB's implicit INSERT cast
    return [r[0] for r in con.execute("SELECT v FROM u ORDER BY i").fetchall()]


def _appended(tmp: Path, data: Any, field: pa.Field[Any]) -> list[Any]:
    t = _table(tmp, pa.schema([field]))
    t.append(data)
    return t.to_arrow().column(field.name).to_pylist()


def test_pandas_float_nan_into_int64_is_null(tmp_path: Path) -> None:
    # what pyarrow's to_pandas() makes of a nullable int64 column
    src = pa.table({"n": pa.array([1, None, -(2**53), 7], pa.int64())})
    df = src.to_pandas()
    assert str(df["n"].dtype) == "float64"
    got = _appended(tmp_path, df, pa.field("n", pa.int64()))
    assert got == src.column("n").to_pylist()
    con = duckdb.connect()
    con.register("df", df)
    assert got == [r[0] for r in con.execute("SELECT CAST(n AS BIGINT) FROM df").fetchall()]


def test_pandas_nullable_Int64(tmp_path: Path) -> None:
    df = pd.DataFrame({"n": pd.array([5, None, 2**62], dtype="Int64")})
    assert _appended(tmp_path, df, pa.field("n", pa.int64())) == [5, None, 2**62]
    # and into a narrower integer when every value fits
    df = pd.DataFrame({"n": pd.array([5, None, -7], dtype="Int64")})
    assert _appended(tmp_path, df, pa.field("n", pa.int16())) == _duck_cast(
        [5, None, -7], "BIGINT", "SMALLINT")


def test_pandas_float_with_fraction_into_int_names_value(tmp_path: Path) -> None:
    df = pd.DataFrame({"n": [1.0, None, 2.5, 3.5]})
    t = _table(tmp_path, pa.schema([pa.field("n", pa.int64())]))
    with pytest.raises(SchemaMismatch) as e:
        t.append(df)
    assert e.value.column == "n" and "2.5" in str(e.value)
    assert _duck_cast([2.5], "DOUBLE", "BIGINT") != [2.5]  # DuckDB rounds: a changed value
    assert t.to_arrow().num_rows == 0


def test_duckdb_decimal_18_3_into_decimal_10_2(tmp_path: Path) -> None:
    rel = duckdb.sql("SELECT * FROM (VALUES (1.250::DECIMAL(18,3)), (NULL), "
                     "(-12345678.990::DECIMAL(18,3))) t(p)")
    got = _appended(tmp_path, rel, pa.field("p", pa.decimal128(10, 2)))
    assert got == [Decimal("1.25"), None, Decimal("-12345678.99")]
    assert got == _duck_cast([Decimal("1.250"), None, Decimal("-12345678.990")],
                             "DECIMAL(18,3)", "DECIMAL(10,2)")


@pytest.mark.parametrize("value,why", [("1.255", "digit"), ("123456789.000", "precision")])
def test_duckdb_decimal_losing_a_digit_is_refused(tmp_path: Path, value: str, why: str) -> None:
    rel = duckdb.sql(f"SELECT * FROM (VALUES (1.000::DECIMAL(18,3)), "
                     f"({value}::DECIMAL(18,3))) t(p)")
    t = _table(tmp_path, pa.schema([pa.field("p", pa.decimal128(10, 2))]))
    with pytest.raises(SchemaMismatch) as e:
        t.append(rel)
    assert e.value.column == "p" and value in str(e.value)
    try:
        changed = _duck_cast([Decimal(value)], "DECIMAL(18,3)", "DECIMAL(10,2)") != [
            Decimal(value)]
    except duckdb.Error:
        changed = True  # DuckDB refuses it too
    assert changed


def test_duckdb_hugeint_sum_into_int64(tmp_path: Path) -> None:
    rel = duckdb.sql("SELECT x % 3 AS g, sum(x) AS s FROM range(1000) t(x) GROUP BY g "
                     "ORDER BY g")
    assert "decimal128(38, 0)" in str(rel.arrow().schema.field("s").type)
    schema = pa.schema([pa.field("g", pa.int64()), pa.field("s", pa.int64())])
    t = _table(tmp_path, schema)
    t.append(rel)
    want = duckdb.sql("SELECT CAST(sum(x) AS BIGINT) FROM range(1000) t(x) GROUP BY x % 3 "
                      "ORDER BY x % 3").fetchall()
    assert t.to_arrow().column("s").to_pylist() == [r[0] for r in want]


def test_hugeint_beyond_int64_is_refused(tmp_path: Path) -> None:
    rel = duckdb.sql("SELECT (9223372036854775807::HUGEINT + x) AS s FROM range(2) t(x)")
    t = _table(tmp_path, pa.schema([pa.field("s", pa.int64())]))
    with pytest.raises(SchemaMismatch) as e:
        t.append(rel)
    assert e.value.column == "s" and "9223372036854775808" in str(e.value)
    with pytest.raises(duckdb.Error):
        _duck_cast([2**63], "HUGEINT", "BIGINT")


def test_float_into_decimal_when_exact(tmp_path: Path) -> None:
    values = [1.25, None, 0.1, -3.0, 99999999.99]
    got = _appended(tmp_path, pa.table({"p": values}), pa.field("p", pa.decimal128(10, 2)))
    assert got == _duck_cast(values, "DOUBLE", "DECIMAL(10,2)")
    t = _table(tmp_path, pa.schema([pa.field("p", pa.decimal128(10, 2))]))
    with pytest.raises(SchemaMismatch) as e:
        t.append(pa.table({"p": [1.0, 1.005]}))
    assert e.value.column == "p" and "1.005" in str(e.value)
    assert _duck_cast([1.005], "DOUBLE", "DECIMAL(10,2)")[0] != Decimal("1.005")


def test_nested_misfit_names_full_path(tmp_path: Path) -> None:
    item = pa.struct([pa.field("price", pa.decimal128(10, 2))])
    t = _table(tmp_path, pa.schema([pa.field("o", pa.struct([
        pa.field("items", pa.list_(item))]))]))
    ok = pa.table({"o": [{"items": [{"price": 1.5}, None]}, None]})
    t.append(ok)
    assert t.to_arrow().column("o").to_pylist() == [
        {"items": [{"price": Decimal("1.50")}, None]}, None]
    with pytest.raises(SchemaMismatch) as e:
        t.append(pa.table({"o": [{"items": [{"price": 2.0}, {"price": 0.125}]}]}))
    assert e.value.column == "o.items.element.price" and "0.125" in str(e.value)


def _refused_as_duckdb_changes(t: caslake.Table, data: pa.Table, first: Any, src_sql: str,
                               dst_sql: str) -> None:
    """The append is refused naming ``first``, a value DuckDB's cast changes or refuses;
    nothing is written."""
    with pytest.raises(SchemaMismatch) as e:
        t.append(data)
    assert (repr(first) if isinstance(first, float) else str(first)) in str(e.value)
    assert t.to_arrow().num_rows == 0
    try:
        kept = _duck_cast([first], src_sql, dst_sql) == [first]
    except duckdb.Error:
        kept = False
    assert not kept


# --- the rule as a property: accepted exactly when DuckDB's cast keeps the value -------

_PROPERTY = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
_INTS = st.integers(min_value=-(2**70), max_value=2**70)


def _fits_int(v: int, bits: int) -> bool:
    return -(2 ** (bits - 1)) <= v < 2 ** (bits - 1)


@_PROPERTY
@given(values=st.lists(st.one_of(st.none(), _INTS), min_size=1, max_size=8),
       bits=st.sampled_from([8, 16, 32, 64]))
def test_property_hugeint_into_int(tmp_path: Path, values: list[int | None], bits: int) -> None:
    sql = {8: "TINYINT", 16: "SMALLINT", 32: "INTEGER", 64: "BIGINT"}[bits]
    data = pa.table({"v": pa.array([None if v is None else Decimal(v) for v in values],
                                   pa.decimal128(38, 0))})
    t = _table(tmp_path, pa.schema([pa.field("v", getattr(pa, f"int{bits}")())]))
    bad = [v for v in values if v is not None and not _fits_int(v, bits)]
    if bad:
        with pytest.raises(SchemaMismatch) as e:
            t.append(data)
        assert str(bad[0]) in str(e.value)
        with pytest.raises(duckdb.Error):
            _duck_cast([bad[0]], "HUGEINT", sql)
    else:
        t.append(data)
        assert t.to_arrow().column("v").to_pylist() == _duck_cast(values, "HUGEINT", sql)


_DECIMALS = st.decimals(min_value=Decimal("-99999999999.999"),
                        max_value=Decimal("99999999999.999"), places=3,
                        allow_nan=False, allow_infinity=False)


@_PROPERTY
@given(values=st.lists(st.one_of(st.none(), _DECIMALS), min_size=1, max_size=8))
def test_property_decimal_narrowing(tmp_path: Path, values: list[Decimal | None]) -> None:
    data = pa.table({"v": pa.array(values, pa.decimal128(18, 3))})
    t = _table(tmp_path, pa.schema([pa.field("v", pa.decimal128(10, 2))]))
    keeps = [v is None or (v == round(v, 2) and abs(v) < Decimal("1e8")) for v in values]
    if all(keeps):
        t.append(data)
        assert t.to_arrow().column("v").to_pylist() == _duck_cast(
            values, "DECIMAL(18,3)", "DECIMAL(10,2)")
    else:
        first = values[keeps.index(False)]
        _refused_as_duckdb_changes(t, data, first, "DECIMAL(18,3)", "DECIMAL(10,2)")


@_PROPERTY
@given(values=st.lists(st.one_of(
    st.none(), st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9),
    st.integers(-10**8, 10**8).map(lambda n: n / 100)), min_size=1, max_size=8))
def test_property_float_into_decimal(tmp_path: Path, values: list[float | None]) -> None:
    data = pa.table({"v": pa.array(values, pa.float64())})
    t = _table(tmp_path, pa.schema([pa.field("v", pa.decimal128(12, 2))]))
    # the float's shortest text has at most 2 decimals and 10 whole digits
    keeps = [v is None or (Decimal(repr(v)) == round(Decimal(repr(v)), 2)
                           and abs(v) < 1e10) for v in values]
    if all(keeps):
        t.append(data)
        got = t.to_arrow().column("v").to_pylist()
        assert got == _duck_cast(values, "DOUBLE", "DECIMAL(12,2)")
        assert all(g is None or float(g) == v for g, v in zip(got, values, strict=True))
    else:
        _refused_as_duckdb_changes(t, data, values[keeps.index(False)], "DOUBLE",
                                   "DECIMAL(12,2)")


@_PROPERTY
@given(values=st.lists(st.one_of(st.none(), st.integers(-(2**20), 2**20).map(float),
                                 st.floats(allow_infinity=False, width=64)),
                       min_size=1, max_size=8))
def test_property_float_into_int(tmp_path: Path, values: list[float | None]) -> None:
    data = pa.table({"v": pa.array(values, pa.float64(), from_pandas=False)})
    t = _table(tmp_path, pa.schema([pa.field("v", pa.int32())]))
    keeps = [v is None or (not math.isnan(v) and v == int(v) and _fits_int(int(v), 32))
             for v in values]
    if all(keeps):
        t.append(data)
        assert t.to_arrow().column("v").to_pylist() == _duck_cast(values, "DOUBLE", "INTEGER")
    else:
        _refused_as_duckdb_changes(t, data, values[keeps.index(False)], "DOUBLE", "INTEGER")
