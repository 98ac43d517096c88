"""Simple predicates evaluated with numpy on the Arrow buffers of a table.

This module owns the fast evaluation of a bound predicate whose leaves are
columns against literals (see :func:`caslake.expr.arrow.is_computed`):
comparisons, ``IN``, ``IS NULL``, ``Const`` and ``AND``/``OR``/``NOT`` over
integer, float, bool, date32, timestamp and ``decimal128`` (precision 18 or
less) columns and struct leaves (``device.os``, taken with Arrow's
``struct_field``: NULL where a struct above is NULL).  It reads each chunk's
value buffer in place (offsets respected) and its validity bitmap, and
computes, per row, the exact SQL value (TRUE, FALSE or NULL) as numpy booleans.

* A decimal of precision <= 18 always fits in 64 bits, so the low word of its
  little-endian 128-bit two's-complement value *is* the unscaled integer;
  literals are placed on the column's integer domain exactly (a
  :class:`~fractions.Fraction`, never a float): a literal between two domain
  values makes ``=`` FALSE, ``!=`` TRUE and ``<``/``>`` a test against its
  floor, and one beyond the domain a constant.
* Floats compare as IEEE (NaN is unordered: only ``!=`` holds), as Arrow's
  kernels do, and ``IN`` uses ``==`` so ``0.0`` and ``-0.0`` are one value.
* An ``IN`` list longer than a few values on integer-backed values is a
  binary search of each value when every chunk's non-NULL values are in
  order (data sorted by the column, as a key-list delete on a key often is).
* Any other leaf (a string column, a wide decimal, a long ``IN`` list on
  floats or on values out of order, a literal of an unexpected kind) is
  handed to the caller's ``fallback`` (Arrow compute) and its result joins
  the rest in Kleene logic.

It never builds an Arrow value from Python objects (``pa.scalar``,
``pa.array`` of a list): pyarrow imports pandas on the first such conversion,
and a scan must not pay that.  It never raises for data; it never re-checks
types (binding did).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any, Final, TypeAlias, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from caslake.expr.functions import epoch_days, epoch_ticks
from caslake.expr.nodes import (
    And,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    Value,
    value_path,
)

__all__ = ["Tri", "arrow_mask", "evaluate"]

Bools: TypeAlias = npt.NDArray[np.bool_]
# (rows where the predicate is TRUE, rows where it is FALSE -- None when that
# is every other row, i.e. no row is NULL).  Each array belongs to one node, so
# parents may combine children in place.
Tri: TypeAlias = tuple[Bools, "Bools | None"]
Fallback: TypeAlias = Callable[[Expr], Any]

_MAX_DECIMAL_DIGITS: Final = 18  # every such value fits in an int64
_FEW_VALUES: Final = 8  # IN lists up to this size: one == per value; longer: see _Evaluator.isin
_ORDER_PROBE: Final = 1024  # rows checked for order first (an unsorted chunk shows it early)
_NUMPY_OPS: Final[dict[str, Callable[..., Any]]] = {
    "=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
    ">": np.greater, ">=": np.greater_equal,
}


class _Unsupported(Exception):
    """Internal: this leaf goes to the fallback."""


# --- reading columns ------------------------------------------------------------


def _view(buf: pa.Buffer, dtype: np.dtype[Any], count: int, offset: int) -> npt.NDArray[Any]:
    """``count`` items of ``dtype`` from byte ``offset`` of ``buf``, without a copy."""
    view: npt.NDArray[Any] = np.frombuffer(cast(Any, buf), dtype, count=count, offset=offset)
    return view


def _bits(buf: pa.Buffer | None, offset: int, length: int) -> Bools:
    """``length`` bits of an Arrow bitmap from bit ``offset``, as booleans."""
    assert buf is not None
    shift = offset % 8
    raw = _view(buf, np.dtype(np.uint8), (shift + length + 7) // 8, offset // 8)
    bits = np.unpackbits(raw, count=shift + length, bitorder="little")[shift:]
    return cast(Bools, bits.view(np.bool_))


def _dtype(t: pa.DataType) -> np.dtype[Any] | None:
    """The numpy dtype of the value buffer of a column of type ``t`` (None: not
    read here).  Decimals read their low 64-bit words (see the module docstring)."""
    types = pa.types
    if types.is_integer(t):
        return np.dtype(f"{'i' if types.is_signed_integer(t) else 'u'}{t.bit_width // 8}")
    if types.is_float32(t) or types.is_float64(t):
        return np.dtype(f"f{t.bit_width // 8}")
    if types.is_date32(t):
        return np.dtype("i4")
    if types.is_timestamp(t):
        return np.dtype("i8")
    if types.is_decimal128(t) and t.precision <= _MAX_DECIMAL_DIGITS:
        return np.dtype("i8")
    if types.is_boolean(t):
        return np.dtype("u1")
    return None


def _chunk_values(chunk: pa.Array[Any], t: pa.DataType, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The values of ``chunk`` (garbage where NULL), a view of its buffer if it can be."""
    n, offset = len(chunk), chunk.offset
    buf = chunk.buffers()[1]
    if buf is None:  # e.g. an all-NULL array without a value buffer
        return np.zeros(n, dtype)
    if pa.types.is_boolean(t):
        return _bits(buf, offset, n).view(np.uint8)
    if pa.types.is_decimal(t):
        return _view(buf, np.dtype("<i8"), 2 * n, 16 * offset)[::2]
    return _view(buf, dtype, n, offset * dtype.itemsize)


class _Column:
    """One column of the table: its chunks' values and, if any row is NULL,
    the validity of every row."""

    def __init__(self, column: pa.ChunkedArray[Any], dtype: np.dtype[Any]) -> None:
        self.type = column.type
        self.dtype = dtype
        self.parts: list[tuple[int, npt.NDArray[Any]]] = []
        self.valid: Bools | None = None
        start = 0
        total = len(column)
        for chunk in column.chunks:
            n = len(chunk)
            if n == 0:
                continue
            self.parts.append((start, _chunk_values(chunk, self.type, dtype)))
            if chunk.null_count:
                if self.valid is None:
                    self.valid = np.ones(total, np.bool_)
                bitmap = chunk.buffers()[0]
                if bitmap is None:
                    self.valid[start:start + n] = False
                else:
                    self.valid[start:start + n] = _bits(bitmap, chunk.offset, n)
            start += n
        self.rows = total

    def apply(self, fn: Callable[[npt.NDArray[Any], Bools], Any]) -> Bools:
        """``fn(values, out)`` on each chunk, into one array of every row."""
        out = np.empty(self.rows, np.bool_)
        for start, values in self.parts:
            fn(values, out[start:start + len(values)])
        return out

    def leaf(self, holds: Bools) -> Tri:
        """The SQL value of a test that gives ``holds`` on the non-NULL rows."""
        if self.valid is None:
            return holds, None
        false = np.logical_not(holds)
        false &= self.valid
        holds &= self.valid
        return holds, false

    def constant(self, value: bool) -> Tri:
        return self.leaf(np.full(self.rows, value, np.bool_))


# --- literals -------------------------------------------------------------------


def _exact(value: object, t: pa.DataType) -> Fraction | float:
    """``value`` on the column's numeric axis: the unscaled value of a decimal,
    days of a date, ticks of a timestamp -- exact (a Fraction) -- or a float
    for a float column.  Raises _Unsupported for anything unexpected."""
    types = pa.types
    if isinstance(value, bool):
        if types.is_boolean(t):
            return Fraction(int(value))
        raise _Unsupported
    if types.is_floating(t):
        if isinstance(value, float):
            if types.is_float32(t) and value == value and float(np.float32(value)) != value:
                raise _Unsupported  # binding gives float32 values; be safe anyway
            return value
        raise _Unsupported
    if isinstance(value, Decimal) and not value.is_finite():
        raise _Unsupported
    if types.is_integer(t) and isinstance(value, (int, Decimal)):
        return Fraction(value)
    if types.is_decimal(t) and isinstance(value, (int, Decimal)):
        scale: int = cast(pa.Decimal128Type, t).scale
        return Fraction(value) * Fraction(10**scale)
    if types.is_date32(t) and isinstance(value, date) and not isinstance(value, datetime):
        return Fraction(epoch_days(value))
    if types.is_timestamp(t) and isinstance(value, datetime):
        ts_type = cast(pa.TimestampType, t)
        if ts_type.tz is not None:  # a naive literal is UTC (as binding takes it)
            instant = value.replace(tzinfo=UTC) if value.tzinfo is None else value
        else:  # an aware literal is converted to UTC and made naive
            instant = value if value.tzinfo is None else \
                value.astimezone(UTC).replace(tzinfo=None)
        return epoch_ticks(instant, ts_type.unit)
    raise _Unsupported


def _integer_test(op: str, q: Fraction, info: np.iinfo[Any]) -> tuple[str, int] | bool:
    """``x op q`` for integers ``x`` in ``info``'s range, as ``(op', k)`` with an
    integer ``k`` in that range, or as a constant when no ``x`` decides it."""
    if q.denominator != 1:  # strictly between two integers
        if op in ("=", "!="):
            return op == "!="
        op, q = ("<=" if op in ("<", "<=") else ">"), Fraction(q.numerator // q.denominator)
    k = int(q)
    if k < info.min or k > info.max:
        below = k < info.min  # every x is above k, or (above) every x is below it
        return op == "!=" or (op in (">", ">=") if below else op in ("<", "<="))
    return op, k


# --- evaluation -----------------------------------------------------------------


class _Evaluator:
    def __init__(self, table: pa.Table, fallback: Fallback) -> None:
        self.table = table
        self.rows = table.num_rows
        self.fallback = fallback
        self.columns: dict[tuple[str, ...], _Column | None] = {}

    def column(self, value: Value | None) -> _Column:
        """A column, or a struct leaf (``device.os``: NULL where ``device`` is)."""
        path = None if value is None else value_path(value)
        if path is None:
            raise _Unsupported
        if path not in self.columns:
            data = self.table.column(path[0])
            for name in path[1:]:
                data = pc.struct_field(data, [data.type.get_field_index(name)])
            dtype = _dtype(data.type)
            self.columns[path] = None if dtype is None else _Column(data, dtype)
        found = self.columns[path]
        if found is None:
            raise _Unsupported
        return found

    def visit(self, node: Expr) -> Tri:
        if isinstance(node, (And, Or)):
            return _combine(isinstance(node, And), self.visit(node.left), self.visit(node.right))
        if isinstance(node, Not):
            true, false = self.visit(node.expr)
            if false is None:
                return np.logical_not(true, out=true), None
            return false, true
        try:
            return self.leaf(node)
        except _Unsupported:
            return _from_arrow(self.fallback(node), self.rows)

    def leaf(self, node: Expr) -> Tri:
        if isinstance(node, Compare) and isinstance(node.right, Literal):
            return self.compare(self.column(node.left), node.op, node.right.value)
        if isinstance(node, In):
            return self.isin(self.column(node.column), [v.value for v in node.values])
        if isinstance(node, IsNull):
            column = self.column(node.column)
            if column.valid is None:
                return np.zeros(self.rows, np.bool_), None
            return np.logical_not(column.valid), None
        if isinstance(node, Const):
            if node.unless_null is None:
                return np.full(self.rows, node.value, np.bool_), None
            return self.column(node.unless_null).constant(node.value)
        raise _Unsupported

    def compare(self, column: _Column, op: str, value: object) -> Tri:
        q = _exact(value, column.type)
        if isinstance(q, float):
            literal: Any = column.dtype.type(q)
        else:
            test = _integer_test(op, q, np.iinfo(column.dtype))
            if isinstance(test, bool):
                return column.constant(test)
            op, literal = test
            literal = column.dtype.type(literal)
        fn = _NUMPY_OPS[op]
        return column.leaf(column.apply(lambda values, out: fn(values, literal, out=out)))

    def isin(self, column: _Column, values: list[object]) -> Tri:
        if len(values) > _FEW_VALUES:
            # A long list (a key-list delete): a binary search per key when the
            # column is in order (data sorted or clustered by that key), else
            # Arrow's hash lookup, which beats numpy's ``isin``.
            if column.dtype.kind not in "iu":
                raise _Unsupported
            holds = _sorted_isin(column, _keys(tuple(values), column.type, column.dtype))
            if holds is None:
                raise _Unsupported
            return column.leaf(holds)
        wanted = _keys(tuple(values), column.type, column.dtype)
        if len(wanted) == 0:
            return column.constant(False)

        def found(values: npt.NDArray[Any], out: Bools) -> None:
            np.equal(values, wanted[0], out=out)
            for key in wanted[1:]:
                out |= values == key

        return column.leaf(column.apply(found))


@functools.lru_cache(maxsize=32)
def _keys(values: tuple[object, ...], t: pa.DataType, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The values of an IN list on the column's numpy domain (see :func:`_exact`),
    sorted, without the ones no value of the column can equal; built once per
    list, as a scan evaluates the list once per row group."""
    keys: list[Any] = []
    for value in values:
        q = _exact(value, t)
        if isinstance(q, float):
            keys.append(q)
        else:
            test = _integer_test("=", q, np.iinfo(dtype))
            if not isinstance(test, bool):  # else no value can equal it
                keys.append(test[1])
    wanted = np.unique(np.array(keys, dtype=dtype))
    wanted.setflags(write=False)
    return wanted


def _sorted_isin(column: _Column, keys: npt.NDArray[Any]) -> Bools | None:
    """Which rows of ``column`` equal one of ``keys`` (sorted, unique), found by
    binary search of each key in each chunk: ``O(keys * log rows)`` instead of a
    hash probe per row.  None if some chunk's non-NULL values are out of order."""
    out = np.zeros(column.rows, np.bool_)
    for start, values in column.parts:
        n = len(values)
        rows: npt.NDArray[Any] | None = None  # the chunk's non-NULL rows, if it has NULLs
        if column.valid is not None and not column.valid[start:start + n].all():
            rows = np.flatnonzero(column.valid[start:start + n])
            values = values[rows]
        if not _nondecreasing(values):
            return None
        lo = np.searchsorted(values, keys, "left")
        hi = np.searchsorted(values, keys, "right")
        hit = hi > lo
        lo, hi = lo[hit], hi[hit]
        if len(lo) == 0:
            continue
        # Every position in the disjoint runs [lo, hi), in one vectorised step.
        lengths = hi - lo
        ends = np.cumsum(lengths)
        found = np.arange(int(ends[-1])) + np.repeat(lo - (ends - lengths), lengths)
        out[start + (found if rows is None else rows[found])] = True
    return out


def _nondecreasing(values: npt.NDArray[Any]) -> bool:
    """Whether ``values`` are in non-decreasing order."""
    head = values[:_ORDER_PROBE + 1]
    if not bool((head[1:] >= head[:-1]).all()):
        return False
    return bool((values[1:] >= values[:-1]).all())


def _combine(is_and: bool, left: Tri, right: Tri) -> Tri:
    """Kleene AND / OR of two owned results (reused in place)."""
    (lt, lf), (rt, rf) = left, right
    false: Bools | None = None
    if lf is not None or rf is not None:
        lf = np.logical_not(lt) if lf is None else lf
        rf = np.logical_not(rt) if rf is None else rf
        false = np.logical_or(lf, rf, out=lf) if is_and else np.logical_and(lf, rf, out=lf)
    true = np.logical_and(lt, rt, out=lt) if is_and else np.logical_or(lt, rt, out=lt)
    return true, false


def _from_arrow(result: Any, rows: int) -> Tri:
    """A boolean Arrow array, chunked array or scalar as a result."""
    if isinstance(result, pa.Scalar):
        value = result.as_py()
        if value is None:
            return np.zeros(rows, np.bool_), np.zeros(rows, np.bool_)
        return np.full(rows, bool(value), np.bool_), None
    chunks = result.chunks if isinstance(result, pa.ChunkedArray) else [result]
    true = np.empty(rows, np.bool_)
    valid: Bools | None = None
    start = 0
    for chunk in chunks:
        n = len(chunk)
        if n == 0:
            continue
        true[start:start + n] = _bits(chunk.buffers()[1], chunk.offset, n)
        if chunk.null_count:
            if valid is None:
                valid = np.ones(rows, np.bool_)
            valid[start:start + n] = _bits(chunk.buffers()[0], chunk.offset, n)
        start += n
    if valid is None:
        return true, None
    false = np.logical_not(true)
    false &= valid
    true &= valid
    return true, false


def evaluate(table: pa.Table, expr: Expr, fallback: Fallback) -> Tri:
    """The SQL value of ``expr`` on every row of ``table``; ``fallback(leaf)``
    evaluates a leaf this module does not (an Arrow boolean result)."""
    return _Evaluator(table, fallback).visit(expr)


def arrow_mask(result: Tri, rows: int) -> pa.BooleanArray:
    """``result`` as an Arrow boolean array (NULL where neither TRUE nor FALSE)."""
    true, false = result
    data = _packed(true)
    validity: pa.Buffer | None = None
    nulls = 0
    if false is not None:
        valid = np.logical_or(true, false)
        nulls = rows - int(np.count_nonzero(valid))
        if nulls:
            validity = _packed(valid)
    mask = pa.Array.from_buffers(pa.bool_(), rows, [validity, data], null_count=nulls)
    return cast(pa.BooleanArray, mask)


def _packed(bools: Bools) -> pa.Buffer:
    return pa.py_buffer(cast(Any, np.packbits(bools, bitorder="little")))
