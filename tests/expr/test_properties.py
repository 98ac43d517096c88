"""Property tests: exact filtering and sound pruning against a plain-Python oracle.

Random tables (every supported column type, NULLs, NaN, infinities, -0.0,
extreme integers) and random predicates (see ``reference.py``) are evaluated

* by caslake: ``table.filter(to_arrow(bind(...)))`` for the SQL text and for the
  Python API rendering of the same predicate, and by ``pyarrow.dataset``;
* by the oracle: SQL three-valued logic row by row in plain Python.

``~to_arrow(...)`` must keep exactly the rows where the predicate is FALSE,
so NULL handling is checked, not just "dropped either way".  For pruning, a
table is cut into chunks and :func:`might_match` must never answer False for
a chunk holding a matching row, with statistics computed by pyarrow.compute
(optionally degraded: unknown bounds, unknown null counts, truncated strings)
or read back from a Parquet footer.
"""

from __future__ import annotations

import io
import itertools
import math
import os
from datetime import UTC, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from caslake.errors import InvalidPredicate
from caslake.expr import (
    BoundExpr,
    ColumnStats,
    Compare,
    Expr,
    Literal,
    bind,
    col,
    is_computed,
    might_match,
    parse_sql,
    to_arrow,
)

from .reference import (
    COLUMNS,
    SCHEMA,
    Pred,
    Unrenderable,
    evaluate,
    predicates,
    rows_where,
    tables,
    to_api,
    to_sql_text,
)

# EXPR_EXAMPLES=5000 pytest tests/expr for a longer hunt; the default keeps the suite fast.
EXAMPLES = int(os.environ.get("EXPR_EXAMPLES", "200"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _with_row_ids(table: pa.Table) -> pa.Table:
    return table.append_column("__row", pa.array(range(table.num_rows), type=pa.int64()))


def _kept(table: pa.Table, expr: pc.Expression) -> list[int]:
    result: list[int] = table.filter(expr).column("__row").to_pylist()  # type: ignore[assignment]
    return result


def _bindings(pred: Pred) -> list[tuple[str, BoundExpr]]:
    out = [("api", bind(to_api(pred), SCHEMA))]
    try:
        sql = to_sql_text(pred)
    except Unrenderable:
        return out
    note(f"sql: {sql}")
    out.append(("sql", bind(parse_sql(sql), SCHEMA)))
    return out


@SETTINGS
@given(table=tables(), pred=predicates())
def test_filter_equals_reference(table: pa.Table, pred: Pred) -> None:
    rows = table.to_pylist()
    want_true = rows_where(pred, rows, True)
    want_false = rows_where(pred, rows, False)
    with_ids = _with_row_ids(table)
    note(f"pred: {pred!r}")
    for how, bound in _bindings(pred):
        note(f"{how} bound: {bound}")
        expr = to_arrow(bound)
        assert _kept(with_ids, expr) == want_true, how
        assert _kept(with_ids, ~expr) == want_false, f"{how} (negated)"
    dataset_rows: list[int] = ds.dataset(with_ids).to_table(filter=expr).column("__row").to_pylist()
    assert sorted(dataset_rows) == want_true


# --- pruning soundness ------------------------------------------------------------


def _truncate_bounds(low: Any, high: Any, keep: int) -> tuple[Any, Any]:
    """What a Parquet writer may store for long strings: a shorter lower bound
    and a shortened, incremented upper bound."""
    if isinstance(low, str) and len(low) > keep:
        low = low[:keep]
    if isinstance(high, str) and len(high) > keep:
        head = high[:keep]
        high = head[:-1] + chr(ord(head[-1]) + 1) if head else high
    return low, high


def _chunk_stats(chunk: pa.Table, data: st.DataObject) -> dict[str, ColumnStats]:
    stats: dict[str, ColumnStats] = {}
    for spec in COLUMNS:
        column = chunk.column(spec.name)
        mode = data.draw(st.sampled_from(
            ["exact", "exact", "exact", "no-bounds", "no-nulls", "missing", "truncated"]
        ))
        if mode == "missing":
            continue
        minmax = pc.min_max(column)
        low, high = minmax["min"].as_py(), minmax["max"].as_py()
        nulls: int | None = column.null_count
        if mode == "no-bounds":
            which = data.draw(st.sampled_from(["min", "max", "both"]))
            low = None if which in ("min", "both") else low
            high = None if which in ("max", "both") else high
        elif mode == "no-nulls":
            nulls = None
        elif mode == "truncated":
            low, high = _truncate_bounds(low, high, data.draw(st.integers(1, 2)))
        stats[spec.name] = ColumnStats(min=low, max=high, null_count=nulls)
    return stats


def _check_chunk(pred: Pred, bound: BoundExpr, negated: BoundExpr, rows: list[dict[str, Any]],
                 stats: dict[str, ColumnStats]) -> None:
    values = [evaluate(pred, row) for row in rows]
    note(f"chunk rows: {rows!r}\nstats: {stats!r}")
    if True in values:
        assert might_match(bound, stats, len(rows)), f"pruned a chunk matching {bound}"
    if False in values:
        assert might_match(negated, stats, len(rows)), f"pruned a chunk matching {negated}"


@SETTINGS
@given(table=tables(max_rows=16), pred=predicates(), data=st.data())
def test_might_match_is_sound(table: pa.Table, pred: Pred, data: st.DataObject) -> None:
    rows = table.to_pylist()
    api = to_api(pred)
    bound, negated = bind(api, SCHEMA), bind(~api, SCHEMA)
    note(f"pred: {pred!r}\nbound: {bound}\nnegated: {negated}")
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(rows) - 1)), max_size=4)))
    edges = [0, *[c for c in cuts if c < len(rows)], len(rows)]
    for start, end in itertools.pairwise(edges):
        if end <= start:
            continue
        chunk = table.slice(start, end - start)
        _check_chunk(pred, bound, negated, rows[start:end], _chunk_stats(chunk, data))


def _parquet_stats(group: pq.RowGroupMetaData) -> dict[str, ColumnStats]:
    out: dict[str, ColumnStats] = {}
    for i in range(group.num_columns):
        chunk = group.column(i)
        st_ = chunk.statistics
        if st_ is None:
            continue
        low = st_.min if st_.has_min_max else None
        high = st_.max if st_.has_min_max else None
        nulls = st_.null_count if st_.has_null_count else None  # type: ignore[attr-defined]
        out[chunk.path_in_schema] = ColumnStats(min=low, max=high, null_count=nulls)
    return out


@settings(SETTINGS, max_examples=max(1, EXAMPLES // 2))
@given(table=tables(max_rows=16), pred=predicates(), group_size=st.integers(1, 5))
def test_might_match_is_sound_on_parquet_footer_stats(
    table: pa.Table, pred: Pred, group_size: int
) -> None:
    rows = table.to_pylist()
    api = to_api(pred)
    bound, negated = bind(api, SCHEMA), bind(~api, SCHEMA)
    note(f"pred: {pred!r}\nbound: {bound}")
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=group_size)
    metadata = pq.ParquetFile(io.BytesIO(buffer.getvalue())).metadata
    start = 0
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        end = start + group.num_rows
        _check_chunk(pred, bound, negated, rows[start:end], _parquet_stats(group))
        start = end


@SETTINGS
@given(table=tables(max_rows=8), pred=predicates())
def test_single_row_exact_stats_judge_non_float_predicates_exactly(
    table: pa.Table, pred: Pred
) -> None:
    """With exact stats, a single-row chunk of a non-float predicate is judged exactly."""
    bound = bind(to_api(pred), SCHEMA)
    if any(pa.types.is_floating(bound.field(name).type) for name in bound.columns):
        return
    if is_computed(bound):
        return  # computed leaves are never pruned: "might match" is their exact answer
    for index, row in enumerate(table.to_pylist()):
        chunk = table.slice(index, 1)
        stats = {
            spec.name: ColumnStats(
                min=pc.min_max(chunk.column(spec.name))["min"].as_py(),
                max=pc.min_max(chunk.column(spec.name))["max"].as_py(),
                null_count=chunk.column(spec.name).null_count,
            )
            for spec in COLUMNS
        }
        # One row: min == max == the value, so pruning must be exact for
        # every operator except where stats cannot tell (none, for these types).
        assert might_match(bound, stats, 1) == (evaluate(pred, row) is True), (
            f"{bound} on {row!r}"
        )


def test_float_nan_handling_in_stats_is_conservative() -> None:
    bound = bind(parse_sql("NOT f < 1"), SCHEMA)
    # Only NaN (and NULL) rows: pc.min_max gives NaN bounds.
    chunk = pa.array([math.nan, None], type=pa.float64())
    minmax = pc.min_max(chunk)
    stats = {"f": ColumnStats(minmax["min"].as_py(), minmax["max"].as_py(), chunk.null_count)}
    assert might_match(bound, stats, 2)


# --- robustness: arbitrary literals never raise anything but InvalidPredicate ----------

_ROBUST_SCHEMA = pa.schema([
    pa.field("i8", pa.int8()), pa.field("u64", pa.uint64()), pa.field("i", pa.int64()),
    pa.field("f", pa.float64()), pa.field("f32", pa.float32()), pa.field("s", pa.string()),
    pa.field("b", pa.bool_()), pa.field("d", pa.date32()),
    pa.field("s_ts", pa.timestamp("s")), pa.field("ms_tz", pa.timestamp("ms", tz="UTC")),
    pa.field("ns", pa.timestamp("ns")), pa.field("ns_tz", pa.timestamp("ns", tz="Asia/Tokyo")),
    pa.field("bin", pa.binary()),
])
_OFFSETS = st.builds(
    timezone,
    st.timedeltas(min_value=timedelta(hours=-23, minutes=-59),
                  max_value=timedelta(hours=23, minutes=59)),
)
_ANY_LITERAL = st.one_of(
    st.integers(), st.integers(-(2**70), 2**70), st.floats(), st.floats(width=32),
    st.text(max_size=5), st.booleans(), st.dates(),
    st.datetimes(timezones=st.one_of(st.none(), _OFFSETS, st.just(UTC))),
    st.sampled_from(["2020-01-01", "2020-01-01 10:00:00.5+05:30", "9999-12-31T23:59:59-05:00",
                     "0001-01-01 00:00:00+05:00", "x"]),
)


@settings(SETTINGS, max_examples=max(1, EXAMPLES * 2))
@given(column=st.sampled_from(_ROBUST_SCHEMA.names), op=st.sampled_from(["=", "!=", "<", ">="]),
       values=st.lists(_ANY_LITERAL, min_size=1, max_size=3), negate=st.booleans())
def test_arbitrary_literals_raise_only_invalid_predicate(
    column: str, op: str, values: list[Any], negate: bool
) -> None:
    empty = _ROBUST_SCHEMA.empty_table()
    builders = [
        lambda: Compare(op, col(column), Literal(values[0])),
        lambda: col(column).isin(values),
        lambda: col(column).between(values[0], values[-1]),
    ]
    for build in builders:
        try:
            expr: Expr = build()
            if negate:
                expr = ~expr
            str(expr)
            bound = bind(expr, _ROBUST_SCHEMA)
        except InvalidPredicate:
            continue
        str(bound)
        assert empty.filter(to_arrow(bound)).num_rows == 0
        stats = {column: ColumnStats(min=values[0], max=values[-1], null_count=1)}
        might_match(bound, stats, 3)
