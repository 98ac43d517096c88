"""Statistics pruning: can any row of a file or row group satisfy a predicate?

This module owns :func:`might_match` (over
:class:`~caslake.format.stats.ColumnStats`, which the format layer decodes
from manifests and footers).  The one rule
it must never break is *soundness*: ``might_match`` may answer True for a
chunk where no row matches, but it never answers False for a chunk where some
row could match.  Whenever it cannot prove "no row matches" -- a column without
statistics, a missing bound, a value it cannot compare, NaN -- it answers True.
It never reads data and never raises for a bound predicate and well-typed
statistics; a comparison that fails (mismatched stat types) counts as "might
match".  Only simple leaves (a column against literals, see
:mod:`caslake.expr.bind`) are judged; every computed leaf -- column against
column, arithmetic, functions, CAST, LIKE -- answers "might match" whether
negated or not, so an unprunable part can never prune a chunk.  LIKE with a
literal prefix is pruned through the range the binder puts beside it.
Decimal statistics are ``decimal.Decimal`` values compared exactly with the
bound decimal literals.

How statistics are read:

* ``min``/``max`` are *bounds*: every non-null, non-NaN value lies in
  ``[min, max]``.  Writers may truncate string bounds (a shorter ``min``, a
  rounded-up ``max``); that keeps them bounds, so pruning stays sound.  A NaN
  bound, or ``None``, means unknown.
* Float statistics say nothing about NaN (Parquet writers leave NaN out of
  min/max).  Predicates that hold for NaN -- ``!=``, ``NOT <``, ``NOT IN`` and
  friends on a float column -- are therefore only pruned when every value is
  NULL.
* ``null_count`` is exact when known; ``row_count`` is the exact number of rows
  in the chunk.

The bound tree is in negation normal form (NOT only on leaves, see
:mod:`caslake.expr.bind`), so a negated leaf is judged by what makes *it*
TRUE -- e.g. ``NOT x IN (1, 2)`` needs a non-null ``x`` outside ``{1, 2}`` --
never by inverting the answer for the un-negated leaf, which would be unsound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from caslake.errors import InvalidPredicate
from caslake.expr.bind import BoundExpr, is_float_type
from caslake.expr.nodes import And, Column, Compare, Const, Expr, In, IsNull, Like, Literal, Not, Or
from caslake.format.stats import ColumnStats

__all__ = ["ColumnStats", "might_match"]


_UNKNOWN = ColumnStats(None, None, None)


def _bound(value: Any) -> Any | None:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


class _Pruner:
    def __init__(self, bound: BoundExpr, stats: Mapping[str, ColumnStats],
                 row_count: int) -> None:
        self.schema = bound.schema
        self.stats = stats
        self.row_count = row_count

    def column_stats(self, name: str) -> ColumnStats:
        stats = self.stats.get(name)
        return stats if isinstance(stats, ColumnStats) else _UNKNOWN

    def may_have_values(self, name: str) -> bool:
        """Could the column hold a non-null value in this chunk?"""
        null_count = self.column_stats(name).null_count
        return null_count is None or null_count < self.row_count

    def may_have_nulls(self, name: str) -> bool:
        null_count = self.column_stats(name).null_count
        return null_count is None or null_count > 0

    def is_float(self, name: str) -> bool:
        return is_float_type(self.schema.field(name).type)

    def visit(self, node: Expr, negated: bool) -> bool:
        """Could some row make ``node`` TRUE (or FALSE, when ``negated``)?"""
        if isinstance(node, Not):
            return self.visit(node.expr, not negated)
        if isinstance(node, (And, Or)):
            # De Morgan: NOT (a AND b) is NOT a OR NOT b.  For a conjunction,
            # "some row satisfies both" implies "some row satisfies each".
            conjunction = isinstance(node, And) != negated
            left = self.visit(node.left, negated)
            if conjunction:
                return left and self.visit(node.right, negated)
            return left or self.visit(node.right, negated)
        return self.leaf(node, negated)

    def leaf(self, node: Expr, negated: bool) -> bool:
        if isinstance(node, IsNull):
            if not isinstance(node.column, Column):
                return True  # a computed value: statistics say nothing
            name = node.column.name
            return self.may_have_values(name) if negated else self.may_have_nulls(name)
        if isinstance(node, Const):
            value = node.value != negated
            if not value:
                return False
            guard = node.unless_null
            return not isinstance(guard, Column) or self.may_have_values(guard.name)
        if isinstance(node, Like):
            return True  # evaluated after reading; a prefix range beside it prunes
        if isinstance(node, (Compare, In)):
            tested = node.left if isinstance(node, Compare) else node.column
            if not isinstance(tested, Column):
                return True  # a computed value: statistics say nothing
            if isinstance(node, Compare) and not isinstance(node.right, Literal):
                return True  # column against column or expression
            name = tested.name
            if not self.may_have_values(name):
                return False  # every value is NULL: the test is NULL on every row
            if negated and self.is_float(name):
                return True  # NaN satisfies every negated test; stats cannot rule it out
            stats = self.column_stats(name)
            low, high = _bound(stats.min), _bound(stats.max)
            try:
                if isinstance(node, Compare):
                    assert isinstance(node.right, Literal)
                    op = node.op
                    if negated:
                        op = {"=": "!=", "!=": "=", "<": ">=", "<=": ">",
                              ">": "<=", ">=": "<"}[op]
                    return self.compare(op, node.right.value, low, high, name)
                values = [literal.value for literal in node.values]
                if negated:  # some non-null value outside the list
                    return not (low is not None and high is not None and low == high
                                and low in values)
                return any((low is None or low <= v) and (high is None or v <= high)
                           for v in values)
            except (TypeError, ValueError, ArithmeticError):
                return True  # statistics of an unexpected type: cannot judge
        raise InvalidPredicate(f"not a bound predicate node: {type(node).__name__}")

    def compare(self, op: str, value: Any, low: Any, high: Any, name: str) -> bool:
        """Could some non-null value ``x`` in ``[low, high]`` satisfy ``x op value``?"""
        if op == "=":
            return (low is None or low <= value) and (high is None or value <= high)
        if op == "!=":
            if self.is_float(name):
                return True  # a NaN would satisfy it
            return not (low is not None and high is not None and low == high == value)
        if op == "<":
            return low is None or low < value
        if op == "<=":
            return low is None or low <= value
        if op == ">":
            return high is None or high > value
        return high is None or high >= value  # ">="


def might_match(bound: BoundExpr, stats: Mapping[str, ColumnStats], row_count: int) -> bool:
    """Could some row of a chunk with these statistics satisfy ``bound``?

    ``stats`` maps column names to their :class:`ColumnStats`; a column missing
    from it is unknown.  ``row_count`` is the chunk's exact row count (an empty
    chunk matches nothing).  Sound: False only when no row can match.
    """
    if not isinstance(bound, BoundExpr):
        raise InvalidPredicate(
            f"might_match needs a bound predicate, got {type(bound).__name__}"
        )
    if row_count <= 0:
        return False
    return _Pruner(bound, stats, row_count).visit(bound.expr, False)
