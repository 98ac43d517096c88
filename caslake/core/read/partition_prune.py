"""Pruning data files by their partition values (docs/protocol.md, "Hidden partitioning").

A file whose entry records a partition (format 5) holds only rows whose transformed
source values equal those values.  This module turns that claim into something the
statistics pruner already judges soundly: each value becomes bounds of its source
column (:func:`caslake.format.partition.implied_stats`: a day is the range of its
instants, ``truncate[10] = 40`` is ``40..49``, a NULL value means every source value
is NULL), checked with :func:`caslake.expr.might_match`; and ``bucket[N]`` values prune
``col = v`` and ``col IN (...)`` leaves by the literal's bucket.  Like every pruner
here it may keep a file that holds no match, never skip one that does: a value it
cannot judge (a literal of another type, a computed leaf, a negated test) keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping

from caslake.expr import (
    And,
    BoundExpr,
    Compare,
    Expr,
    In,
    Literal,
    Not,
    Or,
    might_match,
    stats_key,
)
from caslake.format.manifest import DataFile
from caslake.format.partition import BUCKET, Partitioning, implied_stats, literal_bucket
from caslake.format.schema import Field, TableSchema
from caslake.format.stats import ColumnStats, column_stats

Buckets = Mapping[str, list[tuple[int, int, Field]]]  # column -> (N, bucket, field)


def partition_might_match(bound: BoundExpr, f: DataFile, partitioning: Partitioning | None,
                          schema: TableSchema, *, key: str) -> bool:
    """Could a row of ``f`` satisfy ``bound``, judging only by ``f``'s partition?
    True for a file without a recorded partition.  ``key``: the manifest, named by
    CorruptMetadata for a value that does not decode."""
    fp = f.partition
    if fp is None or partitioning is None or not partitioning.has(fp.spec_id):
        return True
    columns = {c.id: c for c in schema.fields}
    buckets: dict[str, list[tuple[int, int, Field]]] = {}
    for pf, value in zip(partitioning.spec(fp.spec_id).fields, fp.values, strict=True):
        src = columns.get(pf.source_id)
        if src is None or src.nested:
            continue  # its source column was dropped: it says nothing about this schema
        if pf.kind == BUCKET and value is not None:
            buckets.setdefault(src.name, []).append((pf.param, int(value), src))
            continue
        js = implied_stats(pf, value, src, f.row_count)
        if js is None:
            continue
        stats: dict[str, ColumnStats] = {src.name: column_stats(
            js, src.arrow_type, key=key, path=f.path, column=src.name)}
        if not might_match(bound, stats, f.row_count):
            return False
    return not buckets or _may(bound.expr, False, buckets)


def _may(node: Expr, negated: bool, buckets: Buckets) -> bool:
    """Could some row make ``node`` TRUE (FALSE when ``negated``), by bucket values?"""
    if isinstance(node, Not):
        return _may(node.expr, not negated, buckets)
    if isinstance(node, And | Or):
        conjunction = isinstance(node, And) != negated
        left = _may(node.left, negated, buckets)
        if conjunction:
            return left and _may(node.right, negated, buckets)
        return left or _may(node.right, negated, buckets)
    if negated:
        return True  # "some value is not v": a bucket cannot rule that out
    if isinstance(node, Compare) and node.op == "=" and isinstance(node.right, Literal):
        return _literal_may(node.left, [node.right], buckets)
    if isinstance(node, In):
        return _literal_may(node.column, list(node.values), buckets)
    return True


def _literal_may(column: object, literals: list[Literal], buckets: Buckets) -> bool:
    name = stats_key(column)  # type: ignore[arg-type]
    if not isinstance(name, str) or name not in buckets:
        return True
    for lit in literals:
        if all(literal_bucket(lit.value, src.arrow_type, n) in (None, b)
               for n, b, src in buckets[name]):
            return True
    return False


def partition_covers(negated: BoundExpr, f: DataFile, partitioning: Partitioning | None,
                     schema: TableSchema, *, key: str) -> bool:
    """Does a predicate hold (TRUE) for every row of ``f``, judging only by ``f``'s
    partition?  ``negated`` is the predicate under NOT.  Only non-NULL values with
    bounds are used, so every column judged holds no NULL and the predicate cannot be
    NULL on a judged leaf; a leaf on any other column is unknown, so it can only make
    the answer False (read the file).  True means: no row can make the predicate
    FALSE or NULL, so a delete may drop the file unread."""
    fp = f.partition
    if fp is None or partitioning is None or not partitioning.has(fp.spec_id):
        return False
    columns = {c.id: c for c in schema.fields}
    stats: dict[str, ColumnStats] = {}
    for pf, value in zip(partitioning.spec(fp.spec_id).fields, fp.values, strict=True):
        src = columns.get(pf.source_id)
        if src is None or src.nested or value is None or src.name in stats:
            continue
        js = implied_stats(pf, value, src, f.row_count)
        if js is None or "min" not in js:
            continue
        stats[src.name] = column_stats(js, src.arrow_type, key=key, path=f.path,
                                       column=src.name)
    return bool(stats) and not might_match(negated, stats, f.row_count)
