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
NULL input, and it tells ``0.0`` from ``-0.0``.  It never reads data, never
re-checks types (binding did) and never raises for a :class:`BoundExpr`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import InvalidPredicate
from caslake.expr.bind import BoundExpr, is_float_type
from caslake.expr.nodes import And, Compare, Const, Expr, In, IsNull, Not, Or

__all__ = ["to_arrow"]

_COMPARE: Final[dict[str, Callable[..., Any]]] = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _null_bool() -> pc.Expression:
    return pc.scalar(pa.scalar(None, type=pa.bool_()))  # type: ignore[arg-type]


def _null_if_null(column: str, value: pc.Expression) -> pc.Expression:
    """``value``, except NULL on rows where ``column`` is NULL."""
    result: pc.Expression = pc.if_else(pc.is_null(pc.field(column)), _null_bool(), value)
    return result


class _Translator:
    def __init__(self, bound: BoundExpr) -> None:
        self.schema = bound.schema

    def scalar(self, column: str, value: object) -> pa.Scalar[Any]:
        result: pa.Scalar[Any] = pa.scalar(value, type=self.schema.field(column).type)
        return result

    def visit(self, node: Expr) -> pc.Expression:
        result: pc.Expression
        if isinstance(node, And):
            result = pc.and_kleene(self.visit(node.left), self.visit(node.right))
        elif isinstance(node, Or):
            result = pc.or_kleene(self.visit(node.left), self.visit(node.right))
        elif isinstance(node, Not):
            result = pc.invert(self.visit(node.expr))
        elif isinstance(node, Compare):
            name = node.left.name
            result = _COMPARE[node.op](pc.field(name), self.scalar(name, node.right.value))
        elif isinstance(node, In):
            result = self.isin(node)
        elif isinstance(node, IsNull):
            result = pc.is_null(pc.field(node.column.name))
        elif isinstance(node, Const):
            result = pc.scalar(node.value)
            if node.unless_null is not None:
                result = _null_if_null(node.unless_null.name, result)
        else:
            raise InvalidPredicate(f"not a bound predicate node: {type(node).__name__}")
        return result

    def isin(self, node: In) -> pc.Expression:
        name = node.column.name
        arrow_type = self.schema.field(name).type
        values: list[object] = [literal.value for literal in node.values]
        if is_float_type(arrow_type) and 0.0 in values:
            # Arrow's hash lookup treats 0.0 and -0.0 as different; SQL does not.
            values.extend([0.0, -0.0])
        value_set = pa.array(values, type=arrow_type)
        found: pc.Expression = pc.is_in(pc.field(name), value_set=value_set)
        return _null_if_null(name, found)


def to_arrow(bound: BoundExpr) -> pc.Expression:
    """The Arrow compute expression of ``bound`` (SQL three-valued semantics)."""
    if not isinstance(bound, BoundExpr):
        raise InvalidPredicate(
            f"to_arrow needs a bound predicate (see caslake.expr.bind), got {type(bound).__name__}"
        )
    return _Translator(bound).visit(bound.expr)
