"""Translate a bound predicate into a ``pyarrow.compute.Expression``.

This module owns the mapping from the bound tree (see
:mod:`caslake.expr.bind`) to Arrow compute.  The resulting expression has, row
by row, exactly the SQL value of the predicate -- TRUE, FALSE or NULL -- so

* ``table.filter(expr)`` and ``pyarrow.dataset`` filters keep exactly the rows
  where the predicate is TRUE (NULL rows are dropped), and
* ``~expr`` is SQL ``NOT``: it keeps the rows where the predicate is FALSE,
  never the ones where it is NULL.

It relies on Arrow's comparison kernels (which propagate NULL and follow IEEE
for NaN), ``and_kleene``/``or_kleene``/``invert`` (Kleene logic), and fixes the
two places where Arrow is not SQL: ``is_in`` returns FALSE (not NULL) for a
NULL input, and it tells ``0.0`` from ``-0.0``.  Computed values (functions,
arithmetic, CAST) come from :mod:`caslake.expr.functions`; LIKE patterns are
rewritten for ``match_like``; struct fields are ``struct_field`` (NULL where
any struct above is NULL).  Functions on lists and maps
(:mod:`caslake.expr.nested`) have no Arrow expression: :func:`filter_table`
computes them on the table's columns and :func:`to_arrow` refuses them
(``UnsupportedExpression``).  It never reads data, never re-checks types
(binding did) and never raises for any other :class:`BoundExpr`; a computed value can
still fail on the data (a CAST that cannot convert), which callers evaluating
through :func:`filter_table` see as
:class:`~caslake.errors.PredicateEvaluationError`.

:func:`filter_table` evaluates a simple predicate (columns against literals,
the common case) eagerly: numeric, date and decimal leaves with numpy on the
column buffers (:mod:`caslake.expr.vector`), the rest with the same kernels on
the table's columns.  No Acero plan, so a scan never imports
``pyarrow.dataset``; and no Python-to-Arrow conversion on the numpy path, so
a scan with such a predicate never imports pandas.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import InvalidPredicate, PredicateEvaluationError
from caslake.expr.bind import BoundExpr, bind_value, is_float_type
from caslake.expr.functions import (
    ValueBuilder,
    arrow_like_pattern,
    literal_array,
    literal_scalar,
    null_scalar,
)
from caslake.expr.nodes import (
    NESTED_FUNCTIONS,
    And,
    Column,
    Compare,
    Const,
    Expr,
    Func,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    Value,
    leaves,
    operands,
    value_path,
)
from caslake.expr.vector import arrow_mask, evaluate

__all__ = ["filter_table", "is_computed", "kernel_mask", "predicate_mask", "to_arrow",
           "uses_nested_functions"]

_COMPARE: Final[dict[str, Callable[..., Any]]] = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _null_bool() -> pa.Scalar[Any]:
    return null_scalar(pa.bool_())


def _null_if_null(value: Any, result: Any) -> pc.Expression:
    """``result``, except NULL on rows where ``value`` is NULL."""
    out: pc.Expression = pc.if_else(pc.is_null(value), _null_bool(), result)
    return out


class _Translator:
    """Builds the expression; given ``table``, computes the same kernels on its
    columns instead (only for a predicate that :func:`is_computed` says is not)."""

    def __init__(self, schema: pa.Schema, table: pa.Table | None = None) -> None:
        self.schema = schema
        self.values = ValueBuilder(schema, for_filter=True, table=table, predicate=self.visit)
        self.table = table

    def value(self, node: Value) -> tuple[Any, pa.DataType]:
        if isinstance(node, Column):  # the common case, without the builder
            col = pc.field(node.name) if self.table is None else self.table.column(node.name)
            return col, self.schema.field(node.name).type
        return self.values.build(node)

    def visit(self, node: Expr) -> Any:
        """An expression, or (given a table) a boolean array or scalar."""
        result: Any
        if isinstance(node, And):
            result = pc.and_kleene(self.visit(node.left), self.visit(node.right))
        elif isinstance(node, Or):
            result = pc.or_kleene(self.visit(node.left), self.visit(node.right))
        elif isinstance(node, Not):
            result = pc.invert(self.visit(node.expr))
        elif isinstance(node, Compare):
            left, left_type = self.value(node.left)
            if isinstance(node.right, Literal):
                right: Any = literal_scalar(node.right.value, left_type)
            else:
                right = self.value(node.right)[0]
            result = _COMPARE[node.op](left, right)
        elif isinstance(node, In):
            result = self.isin(node)
        elif isinstance(node, IsNull):
            result = pc.is_null(self.value(node.column)[0])
        elif isinstance(node, Like):
            result = pc.match_like(self.value(node.column)[0],
                                   pattern=arrow_like_pattern(node.pattern, node.escape),
                                   ignore_case=node.case_insensitive)
        elif isinstance(node, Const):
            result = pc.scalar(node.value) if self.table is None else \
                literal_scalar(node.value, pa.bool_())
            if node.unless_null is not None:
                result = _null_if_null(self.value(node.unless_null)[0], result)
        else:
            raise InvalidPredicate(f"not a bound predicate node: {type(node).__name__}")
        return result

    def isin(self, node: In) -> pc.Expression:
        value, arrow_type = self.value(node.column)
        values: list[object] = [literal.value for literal in node.values]
        if is_float_type(arrow_type) and 0.0 in values:
            # Arrow's hash lookup treats 0.0 and -0.0 as different; SQL does not.
            values.extend([0.0, -0.0])
        found: pc.Expression = pc.is_in(value, value_set=_value_set(tuple(values), arrow_type))
        return _null_if_null(value, found)


@functools.lru_cache(maxsize=32)
def _value_set(values: tuple[object, ...], arrow_type: pa.DataType) -> Any:
    """An IN list's values as an Arrow array of the column's type, built once per
    list: a scan evaluates the predicate once per row group, and a 1,500-key
    list (TPC-H RF2) took ~5 ms to build each time."""
    built = literal_array(list(values), arrow_type)  # type: ignore[arg-type]
    return built if built is not None else pa.array(values, type=arrow_type)


def to_arrow(bound: BoundExpr) -> pc.Expression:
    """The Arrow compute expression of ``bound`` (SQL three-valued semantics)."""
    if not isinstance(bound, BoundExpr):
        raise InvalidPredicate(
            f"to_arrow needs a bound predicate (see caslake.expr.bind), got {type(bound).__name__}"
        )
    expr: pc.Expression = _Translator(bound.schema).visit(bound.expr)
    return expr


def is_computed(bound: BoundExpr) -> bool:
    """True when some leaf is not a simple column-vs-literal test, i.e. the
    predicate computes values (and may fail on data, e.g. a CAST)."""
    for node in leaves(bound.expr):
        if isinstance(node, Like):
            return True
        elif isinstance(node, Compare):
            if not (value_path(node.left) is not None and isinstance(node.right, Literal)):
                return True
        elif isinstance(node, (In, IsNull)):
            if value_path(node.column) is None:
                return True
        elif isinstance(node, Const) and node.unless_null is not None \
                and value_path(node.unless_null) is None:
            return True
    return False


def uses_nested_functions(bound: BoundExpr) -> bool:
    """True when some value is a function on lists or maps (see
    :mod:`caslake.expr.nested`): such a predicate is evaluated on the data, as it
    has no ``pyarrow.compute.Expression``."""
    for leaf in leaves(bound.expr):
        values: list[Value] = list(operands(leaf))
        while values:
            value = values.pop()
            if isinstance(value, Func) and value.name in NESTED_FUNCTIONS:
                return True
            values.extend(operands(value))
    return False


def predicate_mask(table: pa.Table, bound: BoundExpr) -> Any:
    """The SQL value of ``bound`` on each row of ``table``: a boolean array (TRUE,
    FALSE or NULL per row) or, for a constant predicate, a boolean scalar.  Rows
    to keep are exactly the TRUE ones.

    For a simple predicate only (see :func:`is_computed`).  Numeric, date,
    timestamp, bool and decimal (precision <= 18) leaves run with numpy on the
    column buffers (:mod:`caslake.expr.vector`), the others with Arrow's
    kernels, exactly as :func:`kernel_mask`; a failure on the data raises
    :class:`~caslake.errors.PredicateEvaluationError`."""
    expr = bound.expr
    if isinstance(expr, Const) and expr.unless_null is None:
        return literal_scalar(expr.value, pa.bool_())
    try:
        result = evaluate(table, expr, _Translator(bound.schema, table).visit)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _evaluation_error(bound, exc) from None
    return arrow_mask(result, table.num_rows)


def kernel_mask(table: pa.Table, bound: BoundExpr) -> Any:
    """:func:`predicate_mask` computed with Arrow's kernels only (the reference
    the numpy evaluation must equal, row by row)."""
    try:
        return _Translator(bound.schema, table).visit(bound.expr)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _evaluation_error(bound, exc) from None


def _evaluation_error(bound: BoundExpr, exc: Exception) -> PredicateEvaluationError:
    return PredicateEvaluationError(
        f"evaluating where {bound} failed: {str(exc).splitlines()[0][:200]}")


def filter_table(table: pa.Table, bound: BoundExpr) -> pa.Table:
    """The rows of ``table`` where ``bound`` is TRUE.

    A failure while computing values on the data (a CAST of text that is not
    a number, an integer overflow) raises
    :class:`~caslake.errors.PredicateEvaluationError`, never a pyarrow error.
    """
    if not is_computed(bound) or uses_nested_functions(bound):
        keep = predicate_mask(table, bound) if not is_computed(bound) else \
            kernel_mask(table, bound)
        if isinstance(keep, pa.Scalar):  # a constant predicate
            return table if keep.as_py() is True else table.slice(0, 0)
        return table.filter(keep)
    try:
        return table.filter(to_arrow(bound))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _evaluation_error(bound, exc) from None


def evaluate_value(value: Value, table: pa.Table) -> tuple[Any, pa.DataType]:
    """A scalar value computed on every row of ``table``: an array (or, for a
    constant, an Arrow scalar) and its type.  Binding errors as
    :func:`~caslake.expr.bind.bind`; a kernel failing on the data (an overflow)
    is PredicateEvaluationError.  NULL is a scalar of type ``null``."""
    if isinstance(value, Literal) and value.value is None:
        return pa.scalar(None, pa.null()), pa.null()
    resolved, _ = bind_value(value, table.schema)
    try:
        return _Translator(table.schema, table).values.build(resolved)
    except pa.ArrowException as exc:
        raise PredicateEvaluationError(
            f"computing {value} failed: {str(exc).splitlines()[0][:160]}") from None
