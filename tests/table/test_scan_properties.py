"""Property test: a scan with ``where`` returns exactly the rows a plain-Python
SQL oracle keeps, whatever the file and row-group layout (so pruning by
manifest and footer statistics never drops a matching row)."""

from __future__ import annotations

import contextlib
import itertools
import math
import uuid

import pyarrow as pa
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import caslake
from caslake.core import WriteOptions
from tests.conftest import segment_thresholds
from tests.expr.reference import (
    SCHEMA,
    Pred,
    Unrenderable,
    predicates,
    rows_where,
    tables,
    to_api,
    to_sql_text,
)

ROW = "__row"


def _nan_safe(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: ("NaN" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in rows]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=tables(max_rows=40), pred=predicates(), cuts=st.lists(st.integers(0, 40), max_size=3),
       rg_bytes=st.sampled_from([1, 300, 1 << 20]), store=st.sampled_from(["memory", "local"]))
def test_scan_where_equals_oracle(tmp_path_factory, data: pa.Table, pred: Pred,  # type: ignore[no-untyped-def]
                                  cuts: list[int], rg_bytes: int, store: str) -> None:
    check_scan_where(tmp_path_factory, data, pred, cuts, rg_bytes, store)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=tables(max_rows=40), pred=predicates(),
       cuts=st.lists(st.integers(0, 40), min_size=6, max_size=14),
       rg_bytes=st.sampled_from([1, 1 << 20]), store=st.sampled_from(["memory", "local"]),
       sort=st.booleans())
def test_scan_where_equals_oracle_through_segments(tmp_path_factory, data: pa.Table,  # type: ignore[no-untyped-def]
                                                   pred: Pred, cuts: list[int], rg_bytes: int,
                                                   store: str, sort: bool) -> None:
    """The same, on tables of many files held in several segment objects of several
    blocks (lowered fold thresholds), so segment and block summaries prune too;
    ``sort`` appends the rows in key order, so the summaries are narrow."""
    if sort:
        data = data.sort_by([(data.schema.names[0], "ascending")])
    with segment_thresholds():
        table = check_scan_where(tmp_path_factory, data, pred, cuts, rg_bytes, store)
    if len({min(c, data.num_rows) for c in cuts} - {0, data.num_rows}) >= 5:
        # 6+ files: segment objects (folds may have merged them) of 2+ blocks each
        held = [s for s in table.snapshot.manifest.segments if s.is_object]
        assert held and sum(s.file_count for s in held) >= 4


def check_scan_where(tmp_path_factory, data: pa.Table, pred: Pred, cuts: list[int],  # type: ignore[no-untyped-def]
                     rg_bytes: int, store: str) -> caslake.Table:
    with_ids = data.append_column(ROW, pa.array(range(data.num_rows), pa.int64()))
    uri = (f"memory://{uuid.uuid4().hex}" if store == "memory"
           else str(tmp_path_factory.mktemp("scanprop") / "t"))
    table = caslake.create_table(uri, with_ids.schema,
                                 write_options=WriteOptions(row_group_size=rg_bytes))
    bounds = sorted({0, data.num_rows, *[min(c, data.num_rows) for c in cuts]})
    for lo, hi in itertools.pairwise(bounds):
        table.append(with_ids.slice(lo, hi - lo))  # one file per append, many row groups

    want = rows_where(pred, data.to_pylist(), True)
    wheres: list[object] = [to_api(pred)]
    with contextlib.suppress(Unrenderable):
        wheres.append(to_sql_text(pred))
    note(f"pred={pred!r} cuts={bounds} rg_bytes={rg_bytes}")
    for where in wheres:
        scan = table.scan(columns=[ROW], where=where)  # type: ignore[arg-type]
        got = sorted(scan.to_arrow().column(ROW).to_pylist())
        assert got == want, f"where={where}"
        plan = scan.plan()
        assert plan.files_total == len(bounds) - 1
    # Projection of other columns gives the same rows as the oracle, values included.
    full = table.scan(where=wheres[0]).to_arrow().sort_by(ROW)  # type: ignore[arg-type]
    assert full.column(ROW).to_pylist() == want
    expected = data.take(pa.array(want, pa.int64()))
    got_rows = full.drop_columns([ROW])
    assert got_rows.schema.equals(SCHEMA), got_rows.schema
    assert _nan_safe(got_rows.to_pylist()) == _nan_safe(expected.to_pylist())
    return table
