"""Translate Spark's pushed-down filters into caslake predicates.

Only filters caslake evaluates with exactly Spark's semantics are translated
(and so absorbed by the reader); everything else is returned to Spark:

* comparisons (``=``, ``<``, ``<=``, ``>``, ``>=``), ``IN``, ``IS [NOT] NULL``
  and ``NOT`` of those, on top-level columns;
* values whose Python type matches the column (int for integer columns, str
  for strings, bool for booleans, ``date`` for dates, aware ``datetime`` for
  instants, naive ``datetime`` for wall-clock timestamps).

Not translated: float/double comparisons (Spark orders NaN above every value
and treats NaN = NaN as true; Arrow does not), decimal values, binary
values, ``EqualNullSafe``, the ``LIKE`` family, ``IN`` lists holding NULL,
and nested column paths.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from caslake.errors import InvalidPredicate
from caslake.expr import Expr, col, compile_where


def _value_fits(t: pa.DataType, value: Any) -> bool:
    if value is None:
        return False
    if pa.types.is_boolean(t):
        return isinstance(value, bool)
    if pa.types.is_integer(t):
        return isinstance(value, int) and not isinstance(value, bool)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return isinstance(value, str)
    if pa.types.is_date32(t):
        return isinstance(value, dt.date) and not isinstance(value, dt.datetime)
    if pa.types.is_timestamp(t):
        if not isinstance(value, dt.datetime):
            return False
        return (value.tzinfo is not None) == (t.tz is not None)
    return False  # floats (NaN ordering), decimals, binary: left to Spark


def _column(f: Filter, schema: pa.Schema) -> str | None:
    path = getattr(f, "attribute", None)
    if not isinstance(path, tuple) or len(path) != 1 or path[0] not in schema.names:
        return None
    return str(path[0])


def _translate(f: Filter, schema: pa.Schema) -> Expr | None:
    if isinstance(f, Not):
        inner = _translate(f.child, schema)
        return ~inner if inner is not None else None
    name = _column(f, schema)
    if name is None:
        return None
    c = col(name)
    if isinstance(f, IsNull):
        return c.is_null()
    if isinstance(f, IsNotNull):
        return c.is_not_null()
    t = schema.field(name).type
    if isinstance(f, In):
        values = tuple(f.value)
        if not values or not all(_value_fits(t, v) for v in values):
            return None
        return c.isin(values)
    if not isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
        return None
    if not _value_fits(t, f.value):
        return None
    if pa.types.is_boolean(t) and not isinstance(f, EqualTo):
        return None
    v: object = f.value
    if isinstance(f, EqualTo):
        return c == v
    if isinstance(f, GreaterThan):
        return c > v
    if isinstance(f, GreaterThanOrEqual):
        return c >= v
    if isinstance(f, LessThan):
        return c < v
    return c <= v


def translate_filter(f: Filter, schema: pa.Schema) -> Expr | None:
    """The caslake predicate equivalent to ``f`` on a table of ``schema``, or None."""
    expr = _translate(f, schema)
    if expr is None:
        return None
    try:
        compile_where(expr, schema)  # binds: rejects anything caslake cannot evaluate
    except InvalidPredicate:
        return None
    return expr


def split_filters(filters: list[Filter], schema: pa.Schema
                  ) -> tuple[Expr | None, list[Filter]]:
    """``(the AND of the translated filters, the filters Spark must still apply)``."""
    absorbed: list[Expr] = []
    rest: list[Filter] = []
    for f in filters:
        expr = translate_filter(f, schema)
        if expr is None:
            rest.append(f)
        else:
            absorbed.append(expr)
    where: Expr | None = None
    for e in absorbed:
        where = e if where is None else where & e
    return where, rest
