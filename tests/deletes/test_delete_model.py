"""Property test: random sequences of appends, deletes, upserts and transactions
against a plain-Python model of the table.

The model is a list of rows per version.  Each operation is applied to the real
table (memory store, and a smaller profile on the local store) and to the
model; after every operation the version number, the latest rows (whole,
projected without the key column, and filtered) and the per-file row
accounting of ``describe()`` must match the model, and ``rows_deleted`` /
``rows_added`` / ``noop`` must equal what the model says the operation did.
At the end every version is read back with ``scan(version=v)``.

Layouts are chosen so files have several row groups (and appends several
files), so tombstones address files, row groups and row positions in many
shapes.  A rare "bulk" append writes 6,000 rows whose ids cycle through the
key space, so a later ``id = k`` / ``BETWEEN`` delete hits thousands of
scattered positions in one file and is stored as a key range (docs/format.md:
key ranges are written when the position bitmap would exceed 4 KiB).

Float data includes NULL, NaN and infinities; predicates follow SQL
three-valued logic with IEEE comparisons (NaN only satisfies ``!=``), the
documented contract of ``caslake.expr``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import caslake
from caslake.errors import InvalidPredicate, UnknownColumn
from caslake.expr import Expr, col
from caslake.store import open_store
from tests.deletes.helpers import norm_rows, table_rows

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("s", pa.string()), pa.field("f", pa.float64())])
COLUMNS = ["id", "s", "f"]
Row = tuple[int, str | None, float | None]

# (target_file_size, row_group_size): one-row row groups in ~3-row files; a
# multi-row first group then one-row groups; one row group per file.
LAYOUTS = [(2_500, 1), (3_000, 50), (1 << 20, 1 << 20)]
BULK_ROWS = 6_000
BULK_LAYOUT = caslake.WriteOptions(target_file_size=1 << 20, row_group_size=12_000)


# --- predicates: SQL text, the same through the Python API, and the oracle ------------


def _gt(f: float | None, x: float) -> bool:
    return f is not None and f > x  # NULL -> not true; NaN > x is False (IEEE)


@dataclass(frozen=True)
class Pred:
    sql: str
    api: Callable[[], Expr]
    holds: Callable[[Row], bool]  # True exactly when SQL evaluates the predicate to TRUE


PREDICATES = [
    Pred("s = 'x' OR f > 3.5", lambda: (col("s") == "x") | (col("f") > 3.5),
         lambda r: r[1] == "x" or _gt(r[2], 3.5)),
    Pred("f IS NULL", lambda: col("f").is_null(), lambda r: r[2] is None),
    Pred("s IS NULL AND id > 7", lambda: col("s").is_null() & (col("id") > 7),
         lambda r: r[1] is None and r[0] > 7),
    Pred("NOT (s = 'y')", lambda: ~(col("s") == "y"), lambda r: r[1] is not None and r[1] != "y"),
    Pred("f != 1.5", lambda: col("f") != 1.5, lambda r: r[2] is not None and r[2] != 1.5),
    Pred("s IN ('x', 'z') AND f <= 1.5", lambda: col("s").isin(["x", "z"]) & (col("f") <= 1.5),
         lambda r: r[1] in ("x", "z") and r[2] is not None and r[2] <= 1.5),
    Pred("id >= 12 OR f IS NOT NULL AND f < 0", lambda: (col("id") >= 12) | (
        col("f").is_not_null() & (col("f") < 0)),
        lambda r: r[0] >= 12 or (r[2] is not None and r[2] < 0)),
]

# Filters used to read back (pruning + tombstones together); (sql, oracle).
READ_FILTERS: list[tuple[str, Callable[[Row], bool]]] = [
    ("id >= 6", lambda r: r[0] >= 6),
    ("f > 1.0 OR s IS NULL", lambda r: _gt(r[2], 1.0) or r[1] is None),
]


# --- operations ------------------------------------------------------------------------

ids = st.integers(0, 15)
rows = st.tuples(ids, st.sampled_from(["x", "y", "z", None]),
                 st.sampled_from([None, 0.0, -2.0, 1.5, 3.5, 4.0, math.nan, math.inf]))
batches = st.lists(rows, min_size=1, max_size=12)
upsert_batches = st.lists(rows, min_size=1, max_size=6, unique_by=lambda r: r[0])


@dataclass(frozen=True)
class Op:
    kind: str  # append | bulk | delete_key | delete_range | delete_pred | upsert | tx
    batch: tuple[Row, ...] = ()
    lo: int = 0
    hi: int = 0
    pred: int = 0
    api: bool = False  # pass the predicate as an Expr instead of SQL text
    ops: tuple[Op, ...] = ()

    def where(self) -> str | Expr:
        if self.kind == "delete_key":
            return col("id") == self.lo if self.api else f"id = {self.lo}"
        if self.kind == "delete_range":
            return (col("id").between(self.lo, self.hi) if self.api
                    else f"id BETWEEN {self.lo} AND {self.hi}")
        p = PREDICATES[self.pred]
        return p.api() if self.api else p.sql

    def matches(self, r: Row) -> bool:
        if self.kind == "delete_key":
            return r[0] == self.lo
        if self.kind == "delete_range":
            return self.lo <= r[0] <= self.hi
        return PREDICATES[self.pred].holds(r)

    def __repr__(self) -> str:
        if self.kind in ("append", "upsert"):
            return f"{self.kind}({list(self.batch)})"
        if self.kind == "bulk":
            return f"bulk(seed={self.lo})"
        if self.kind == "tx":
            return f"tx({list(self.ops)})"
        return f"delete({self.where()!s})"


appends = st.builds(lambda b: Op("append", batch=tuple(b)), batches)
bulks = st.builds(lambda seed: Op("bulk", lo=seed), st.integers(0, 15))
upserts = st.builds(lambda b: Op("upsert", batch=tuple(b)), upsert_batches)
delete_keys = st.builds(lambda k, a: Op("delete_key", lo=k, api=a), ids, st.booleans())
delete_ranges = st.builds(lambda a, b, api: Op("delete_range", lo=min(a, b), hi=max(a, b), api=api),
                          ids, ids, st.booleans())
delete_preds = st.builds(lambda i, a: Op("delete_pred", pred=i, api=a),
                         st.integers(0, len(PREDICATES) - 1), st.booleans())
simple_ops = st.one_of(appends, upserts, delete_keys, delete_ranges, delete_preds)
transactions = st.builds(lambda ops: Op("tx", ops=tuple(ops)),
                         st.lists(simple_ops, min_size=1, max_size=4))
operations = st.lists(st.one_of(appends, appends, upserts, delete_keys, delete_ranges,
                                delete_preds, transactions, bulks), min_size=2, max_size=12)


# --- the model -------------------------------------------------------------------------


def batch_table(batch: tuple[Row, ...]) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in batch], pa.int64()),
                     "s": pa.array([r[1] for r in batch], pa.string()),
                     "f": pa.array([r[2] for r in batch], pa.float64())}, schema=SCHEMA)


_S_CYCLE = ["x", "y", None, "z", "x"]
_F_CYCLE = [1.5, None, 4.0, -2.0, math.nan, 0.0, 3.5]


def bulk_rows(seed: int) -> tuple[Row, ...]:
    """Ids cycle through 0..15 (every key scattered over the whole file)."""
    return tuple(((i * 7 + seed) % 16, _S_CYCLE[i % 5], _F_CYCLE[i % 7])
                 for i in range(BULK_ROWS))


@dataclass
class Effect:
    rows: list[Row]
    deleted: int
    added: int


def model_apply(current: list[Row], op: Op) -> Effect:
    """What ``op`` does to ``current``.  Deletes and upserts inside a transaction see
    only the rows committed before it, never rows appended by the same transaction."""
    steps = op.ops if op.kind == "tx" else (op,)
    gone: set[int] = set()
    added: list[Row] = []
    for step in steps:
        if step.kind == "append":
            added.extend(step.batch)
        elif step.kind == "bulk":
            added.extend(bulk_rows(step.lo))
        elif step.kind == "upsert":
            keys = {r[0] for r in step.batch}
            gone |= {i for i, r in enumerate(current) if r[0] in keys}
            added.extend(step.batch)
        else:
            gone |= {i for i, r in enumerate(current) if step.matches(r)}
    kept = [r for i, r in enumerate(current) if i not in gone]
    return Effect(kept + added, len(gone), len(added))


def run_op(table: caslake.Table, op: Op) -> Any:
    if op.kind == "append":
        return table.append(batch_table(op.batch))
    if op.kind == "bulk":
        small, table.write_options = table.write_options, BULK_LAYOUT
        try:
            return table.append(batch_table(bulk_rows(op.lo)))
        finally:
            table.write_options = small
    if op.kind == "upsert":
        return table.upsert(batch_table(op.batch), key=["id"])
    if op.kind == "tx":
        with table.transaction() as tx:
            for step in op.ops:
                if step.kind == "append":
                    tx.append(batch_table(step.batch))
                elif step.kind == "upsert":
                    tx.upsert(batch_table(step.batch), key=["id"])
                else:
                    tx.delete(step.where())
        return tx.result
    return table.delete(op.where())


# --- checks ----------------------------------------------------------------------------


def check_latest(reader: caslake.Table, want: list[Row], version: int, ctx: str) -> None:
    scan = reader.scan()
    got = table_rows(scan.to_arrow(), COLUMNS)
    assert scan.snapshot.version == version, ctx
    assert got == norm_rows(want), f"{ctx}: latest rows differ from the model"
    assert reader.scan().count() == len(want), f"{ctx}: count()"
    # Projection without the key column must still apply key-range tombstones.
    got_s = table_rows(reader.scan(columns=["s"]).to_arrow())
    assert got_s == norm_rows((r[1],) for r in want), f"{ctx}: scan(columns=['s'])"
    for where, oracle in READ_FILTERS:
        got_w = table_rows(reader.scan(where=where).to_arrow(), COLUMNS)
        assert got_w == norm_rows(r for r in want if oracle(r)), f"{ctx}: where {where}"
    desc = reader.describe()
    live = sum(f["rows"] - f["deleted_rows"] for f in desc["data_files"])
    assert live == len(want), f"{ctx}: describe() rows - deleted_rows = {live}"
    assert all(0 <= f["deleted_rows"] <= f["rows"] for f in desc["data_files"]), ctx


def run_model(uri: str, ops: list[Op], layout: tuple[int, int]) -> None:
    target, rg = layout
    options = caslake.WriteOptions(target_file_size=target, row_group_size=rg)
    table = caslake.create_table(uri, SCHEMA, write_options=options)
    reader = caslake.open_table(uri)  # a second handle: no state shared with the writer
    versions: list[list[Row]] = [[]]
    note(f"layout={layout}")
    for n, op in enumerate(ops):
        ctx = f"op #{n} {op!r}"
        current = versions[-1]
        eff = model_apply(current, op)
        res = run_op(table, op)
        nothing = eff.deleted == 0 and eff.added == 0
        event(f"{op.kind}: {'deletes rows' if eff.deleted else 'deletes nothing'}")
        if op.kind.startswith("delete"):
            assert res.rows_deleted == eff.deleted, f"{ctx}: rows_deleted"
            assert res.noop == nothing, f"{ctx}: noop"
        elif op.kind == "upsert":
            assert (res.rows_deleted, res.rows_added) == (eff.deleted, eff.added), ctx
            assert not res.noop, ctx
        elif op.kind == "tx":
            assert (res.rows_deleted, res.rows_added) == (eff.deleted, eff.added), ctx
            # A transaction that changes nothing may commit an empty version or none at
            # all; it must say which (noop) and must not change any row either way.
            assert res.noop is False or nothing, f"{ctx}: noop although it changed rows"
        else:  # append, bulk
            assert not res.noop and res.rows_added == eff.added, ctx
        if not res.noop:
            versions.append(eff.rows)
        version = len(versions) - 1
        assert res.version == version, f"{ctx}: result version {res.version}"
        assert table.version == version, f"{ctx}: handle version {table.version}"
        check_latest(reader, versions[-1], version, ctx)

    event(f"versions: {min(len(versions) - 1, 8)}{'+' if len(versions) > 9 else ''}")
    assert [h.version for h in reader.history()] == list(range(len(versions) - 1, -1, -1))
    for v, want in enumerate(versions):
        got = table_rows(reader.scan(version=v).to_arrow(), COLUMNS)
        assert got == norm_rows(want), f"scan(version={v}) differs from the model"


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=operations, layout=st.sampled_from(LAYOUTS))
def test_deletes_match_model_memory(ops: list[Op], layout: tuple[int, int]) -> None:
    run_model(f"memory://{uuid.uuid4().hex}", ops, layout)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=operations, layout=st.sampled_from(LAYOUTS))
def test_deletes_match_model_local(tmp_path_factory: pytest.TempPathFactory, ops: list[Op],
                                   layout: tuple[int, int]) -> None:
    run_model(str(tmp_path_factory.mktemp("delmodel") / "t"), ops, layout)


def test_model_oracle_sanity() -> None:
    """The oracle itself: a transaction's deletes never see its own appends, and
    overlapping deletes count each row once."""
    base: list[Row] = [(1, "x", 1.0), (2, None, math.nan), (3, "y", None)]
    tx = Op("tx", ops=(Op("append", batch=((1, "z", 0.0),)), Op("delete_key", lo=1),
                       Op("delete_range", lo=1, hi=2)))
    eff = model_apply(base, tx)
    assert (eff.deleted, eff.added) == (2, 1)
    assert eff.rows == [(3, "y", None), (1, "z", 0.0)]
    # NaN satisfies only "!=" ; NULL satisfies nothing but IS NULL.
    assert PREDICATES[4].holds((0, None, math.nan))
    assert not PREDICATES[0].holds((0, None, math.nan))
    assert not PREDICATES[3].holds((0, None, 1.0))


# --- deterministic edges of the same contract ------------------------------------------


def _uri(kind: str, tmp_path: Path) -> str:
    return f"memory://{uuid.uuid4().hex}" if kind == "memory" else str(tmp_path / "t")


def _objects(uri: str) -> set[str]:
    return {m.key for m in open_store(uri).list("") if not m.key.startswith("_caslake/")}


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_transaction_an_exception_escapes_commits_nothing(kind: str, tmp_path: Path) -> None:
    uri = _uri(kind, tmp_path)
    t = caslake.create_table(uri, SCHEMA)
    t.append(batch_table(((1, "x", 1.0), (2, "y", None))))
    before = norm_rows(((1, "x", 1.0), (2, "y", None)))
    metadata = {k for k in _objects(uri) if not k.startswith("data/")}

    with pytest.raises(RuntimeError, match="boom"), t.transaction() as tx:
        tx.delete("id = 1")
        tx.append(batch_table(((3, "z", 0.0),)))
        tx.upsert(batch_table(((2, "q", 2.0),)), key=["id"])
        raise RuntimeError("boom")
    # A bad predicate inside the block escapes too (at the call or at exit).
    with pytest.raises(UnknownColumn), t.transaction() as tx:
        tx.append(batch_table(((4, "z", 0.0),)))
        tx.delete("nope = 1")

    fresh = caslake.open_table(uri)
    assert fresh.version == 1 and t.version == 1
    assert table_rows(fresh.scan().to_arrow(), COLUMNS) == before
    # No manifest, tombstone or pointer change (uploaded data files may be orphans).
    assert {k for k in _objects(uri) if not k.startswith("data/")} == metadata


@pytest.mark.parametrize("where", ["nope = 1", "id = = 1", "s > 1", "id = NULL",
                                   "f IS NULL AND"])
def test_bad_delete_predicate_is_typed_and_writes_nothing(where: str, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(batch_table(((1, "x", 1.0),)))
    before = _objects(uri)
    expected = UnknownColumn if "nope" in where else InvalidPredicate
    with pytest.raises(expected):
        t.delete(where)
    with pytest.raises(UnknownColumn):
        t.delete(col("nope") == 1)
    assert _objects(uri) == before
    assert caslake.open_table(uri).version == 1
