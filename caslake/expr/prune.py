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
from caslake.expr.bind import BoundExpr, is_float_type, path_type, stats_key
from caslake.expr.nodes import (
    And,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    leaves,
    value_path,
)
from caslake.format.stats import ColumnStats

__all__ = ["ColumnStats", "StatsKey", "StatsMap", "might_match", "pruning_paths"]


_UNKNOWN = ColumnStats(None, None, None)


def _bound(value: Any) -> Any | None:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


StatsKey = str | tuple[str, ...]
#: What :func:`might_match` reads: statistics by column name or struct leaf path.
StatsMap = Mapping[str, ColumnStats] | Mapping[tuple[str, ...], ColumnStats] \
    | Mapping[StatsKey, ColumnStats]


class _Pruner:
    def __init__(self, bound: BoundExpr, stats: StatsMap, row_count: int) -> None:
        self.schema = bound.schema
        self.stats: Mapping[Any, ColumnStats] = stats
        self.row_count = row_count

    def column_stats(self, name: StatsKey) -> ColumnStats:
        stats = self.stats.get(name)
        return stats if isinstance(stats, ColumnStats) else _UNKNOWN

    def may_have_values(self, name: StatsKey) -> bool:
        """Could the column hold a non-null value in this chunk?"""
        null_count = self.column_stats(name).null_count
        return null_count is None or null_count < self.row_count

    def may_have_nulls(self, name: StatsKey) -> bool:
        null_count = self.column_stats(name).null_count
        return null_count is None or null_count > 0

    def is_float(self, name: StatsKey) -> bool:
        t = path_type(self.schema, (name,) if isinstance(name, str) else name)
        return t is None or is_float_type(t)  # unknown: assume the worst (NaN)

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
            key = stats_key(node.column)
            if key is None:
                return True  # a computed value: statistics say nothing
            return self.may_have_values(key) if negated else self.may_have_nulls(key)
        if isinstance(node, Const):
            value = node.value != negated
            if not value:
                return False
            guard = None if node.unless_null is None else stats_key(node.unless_null)
            return guard is None or self.may_have_values(guard)
        if isinstance(node, Like):
            return True  # evaluated after reading; a prefix range beside it prunes
        if isinstance(node, (Compare, In)):
            tested = node.left if isinstance(node, Compare) else node.column
            key = stats_key(tested)
            if key is None:
                return True  # a computed value: statistics say nothing
            if isinstance(node, Compare) and not isinstance(node.right, Literal):
                return True  # column against column or expression
            name = key
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

    def compare(self, op: str, value: Any, low: Any, high: Any, name: StatsKey) -> bool:
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


def might_match(bound: BoundExpr, stats: StatsMap, row_count: int) -> bool:
    """Could some row of a chunk with these statistics satisfy ``bound``?

    ``stats`` maps column names -- and, for a leaf inside structs, the tuple of
    names from the column down (``("device", "os")``, see
    :func:`~caslake.expr.bind.stats_key`) -- to their :class:`ColumnStats`; a
    column missing from it is unknown.  A struct leaf's ``null_count`` counts
    the rows where it is NULL *or any struct above it is* (Parquet's leaf
    null count); :func:`pruning_paths` lists the keys a predicate reads.
    ``row_count`` is the chunk's exact row count (an empty chunk matches
    nothing).  Sound: False only when no row can match.
    """
    if not isinstance(bound, BoundExpr):
        raise InvalidPredicate(
            f"might_match needs a bound predicate, got {type(bound).__name__}"
        )
    if row_count <= 0:
        return False
    return _Pruner(bound, stats, row_count).visit(bound.expr, False)


def pruning_paths(bound: BoundExpr) -> frozenset[tuple[str, ...]]:
    """The columns and struct leaves whose statistics can prune ``bound``, as
    paths of names (``("id",)``, ``("device", "os")``); look each up in the
    table schema by those names (the bound tree uses the schema's spelling)."""
    paths: set[tuple[str, ...]] = set()
    for node in leaves(bound.expr):
        tested = node.left if isinstance(node, Compare) else \
            node.column if isinstance(node, In | IsNull) else \
            node.unless_null if isinstance(node, Const) else None
        path = None if tested is None else value_path(tested)
        if path is not None:
            paths.add(path)
    return frozenset(paths)
