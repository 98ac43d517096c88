"""Row predicates for caslake scans: build, parse, bind, evaluate, prune.

This package owns everything a ``where`` argument goes through and nothing
else -- it never reads files, storage or table metadata:

1. build an unbound :class:`Expr` with the Python API (``col("id") > 5``,
   ``col("a") > col("b")``, ``col("t").like("N1%")``, ``func("lower", ...)``,
   arithmetic, ``&``, ``|``, ``~``; nested data: ``col("device")["os"]``,
   ``col("tags").contains("x")``, ``col("attrs").element_at("k")``,
   ``col("tags").cardinality()``) or :func:`parse_sql` a SQL string
   (parsed by sqlglot: ``device.os = 'ios'``, ``array_contains(tags, 'x')``,
   ``attrs['k'] IS NULL``, ...);
2. :func:`bind` it to a ``pyarrow.Schema`` (column names resolve
   case-insensitively when unambiguous; unknown columns and type errors are
   raised here) to get a :class:`BoundExpr`;
3. filter rows exactly with :func:`to_arrow` (a ``pyarrow.compute.Expression``
   with SQL NULL semantics) or :func:`filter_table`, and skip files / row
   groups with :func:`might_match` over :class:`ColumnStats` (comparisons,
   IN, BETWEEN, IS NULL and LIKE 'prefix%' on columns and struct leaves
   prune -- :func:`pruning_paths` lists the statistics a predicate reads;
   everything else is evaluated after reading).

A scalar value (an UPDATE's ``SET``) goes the same way: :func:`parse_sql_value`
or the Python API, :func:`bind_value`, and :func:`evaluate_value` on a table.

:func:`compile_where` does 1-2 for whatever a caller passed as ``where``.
Every bad predicate raises :class:`~caslake.errors.InvalidPredicate` or one of
its subclasses (``UnknownColumn``, ``AmbiguousColumn``, ``UnknownFunction``,
``UnknownField``, ``PredicateSyntaxError``, ``UnsupportedExpression``,
``PredicateEvaluationError``) and nothing else.
"""

from __future__ import annotations

import functools

import pyarrow as pa

from caslake.errors import InvalidPredicate, UnknownField
from caslake.expr.arrow import (
    evaluate_value,
    filter_table,
    is_computed,
    predicate_mask,
    to_arrow,
)
from caslake.expr.bind import (
    BoundExpr,
    bind,
    bind_value,
    path_type,
    resolve_column,
    stats_key,
)
from caslake.expr.nodes import (
    FALSE,
    TRUE,
    And,
    Arith,
    Between,
    Case,
    Cast,
    Column,
    Compare,
    Const,
    Expr,
    Func,
    GetField,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    Subscript,
    Value,
    col,
    func,
    lit,
    referenced_columns,
    when,
)
from caslake.expr.prune import ColumnStats, StatsKey, might_match, pruning_paths
from caslake.expr.sql import parse_sql, parse_sql_value

__all__ = [
    "FALSE",
    "TRUE",
    "And",
    "Arith",
    "Between",
    "BoundExpr",
    "Case",
    "Cast",
    "Column",
    "ColumnStats",
    "Compare",
    "Const",
    "Expr",
    "Func",
    "GetField",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "Not",
    "Or",
    "StatsKey",
    "Subscript",
    "UnknownField",
    "Value",
    "bind",
    "bind_value",
    "col",
    "compile_where",
    "evaluate_value",
    "filter_table",
    "func",
    "is_computed",
    "lit",
    "might_match",
    "parse_sql",
    "parse_sql_value",
    "path_type",
    "predicate_mask",
    "pruning_paths",
    "referenced_columns",
    "resolve_column",
    "stats_key",
    "to_arrow",
    "when",
]


def compile_where(where: str | Expr | BoundExpr | None, schema: pa.Schema) -> BoundExpr | None:
    """Parse (if SQL text) and bind a ``where`` argument; ``None`` stays ``None``.

    A :class:`BoundExpr` is re-bound from its source when its schema differs.
    Anything else -- including a Python ``bool``, which is what comparing two
    columns or ``and``/``or`` between predicates produces -- raises
    :class:`~caslake.errors.InvalidPredicate`.
    """
    if where is None:
        return None
    if isinstance(where, BoundExpr):
        if where.schema.equals(schema) if isinstance(schema, pa.Schema) else False:
            return where
        return bind(where.source, schema)
    if isinstance(where, str):
        if isinstance(schema, pa.Schema):
            return _compile_sql(where, schema)
        return bind(parse_sql(where), schema)
    if isinstance(where, Expr):
        return bind(where, schema)
    hint = ""
    if isinstance(where, bool):
        hint = (" (did you compare two columns with ==/!= -- use .eq()/.ne() -- or use "
                "'and'/'or' instead of '&'/'|' between predicates?)")
    raise InvalidPredicate(
        f"where must be a SQL string, a caslake.expr expression or None; "
        f"got {type(where).__name__}{hint}"
    )


@functools.lru_cache(maxsize=64)
def _compile_sql(text: str, schema: pa.Schema) -> BoundExpr:
    """SQL text bound to ``schema``, computed once: one delete checks, plans and
    scans with the same ``where`` (a 1,500-key IN list costs ~0.1 s to bind).
    A :class:`BoundExpr` is immutable, so sharing it is safe; an error is not
    cached and is raised again on the next call."""
    return bind(parse_sql(text), schema)
