"""MERGE: conditional clauses matching a source against the table on key columns,
committed as one version (docs/protocol.md, "Merge"), in delta-rs's semantics.

Owns the builder (:class:`MergeBuilder`: the clauses in the order given), matching
(equal ``on`` values, NULL equal to nothing), choosing each row's clause (the first
whose condition is TRUE), the cardinality rule (a target row two source rows
would change is ``DuplicateKey``), the names conditions and values see
(``source.<column>``, ``target.<column>``, and a column only one side has
unqualified) and what the merge reads of the target (the key columns alone when
no clause needs target values).  Values go through the UPDATE's type rule
(:mod:`caslake.ops.update`); the commit is
:func:`caslake.ops.transaction.commit_rewrite`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import pyarrow as pa

from caslake.core import (
    POSITION,
    CommitResult,
    KeyCondition,
    PredicateCondition,
    ReadSetUnchanged,
    Requirement,
    Snapshot,
    TableContext,
    as_reader,
    key_scan_where,
)
from caslake.errors import InvalidArgument, InvalidPredicate, SchemaMismatch
from caslake.expr import Expr, Value, compile_where, filter_table
from caslake.expr import resolve_column as resolve
from caslake.ops.delete import DeletePlan, check_where
from caslake.ops.transaction import Rewrite, commit_rewrite
from caslake.ops.update import (
    FILE,
    TargetRows,
    assignments,
    conform_value,
    describe,
    read_target,
    with_values,
)
from caslake.ops.upsert import duplicate_key

SOURCE, TARGET = "source", "target"
MATCHED, NOT_MATCHED, BY_SOURCE = "matched", "not_matched", "not_matched_by_source"
_ROW = "__caslake_merge_row"
_SRC, _TGT = "__caslake_source_row", "__caslake_target_row"


@dataclass(frozen=True)
class Clause:
    """One WHEN clause: which rows it is for (``kind``), what it does (``action``:
    update, update_all, delete, insert, insert_all), its values and condition."""

    kind: str
    action: str
    values: dict[str, Value] = field(default_factory=dict)
    condition: str | Expr | None = None
    text: str = ""


# --- names: the scope conditions and values are evaluated in ------------------------


def _struct(table: pa.Table) -> pa.StructArray:
    arrays: list[Any] = [c.combine_chunks() for c in table.columns]
    return pa.StructArray.from_arrays(arrays, fields=list(table.schema))


def scope(source: pa.Table | None, target: pa.Table | None) -> pa.Table:
    """``source`` and ``target`` rows (equal counts) as one table: a struct column
    for each side, and every column only one side has, unqualified."""
    sides = {k: t for k, t in ((SOURCE, source), (TARGET, target)) if t is not None}
    seen: dict[str, int] = {}
    for t in sides.values():
        for n in t.column_names:
            seen[n.lower()] = seen.get(n.lower(), 0) + 1
    names: list[str] = []
    arrays: list[Any] = []
    for side, t in sides.items():
        names.append(side)
        arrays.append(_struct(t))
    for t in sides.values():
        for n in t.column_names:
            if seen[n.lower()] == 1 and n.lower() not in sides:
                names.append(n)
                arrays.append(t.column(n))
    return pa.table(dict(zip(names, arrays, strict=True)))


def chosen(clauses: Sequence[Clause], rows: pa.Table) -> np.ndarray[Any, Any]:
    """Per row of ``rows`` (a scope), the index of the first clause whose condition
    is TRUE, or -1."""
    out = np.full(rows.num_rows, -1, dtype=np.int64)
    numbered = rows.append_column(_ROW, pa.array(np.arange(rows.num_rows), pa.int64()))
    for i, clause in enumerate(clauses):
        if clause.condition is None:
            hit = np.ones(rows.num_rows, dtype=bool)
        else:
            bound = compile_where(clause.condition, numbered.schema)
            assert bound is not None
            hit = np.zeros(rows.num_rows, dtype=bool)
            hit[filter_table(numbered, bound).column(_ROW).to_numpy()] = True
        out[(out == -1) & hit] = i
    return out


# --- the builder ---------------------------------------------------------------------


class MergeBuilder:
    """``table.merge(source, on=[...])``: add clauses, then :meth:`execute`."""

    def __init__(self, ctx: TableContext, source: Any, on: Sequence[str] | str) -> None:
        self._ctx = ctx
        schema = ctx.snapshot.manifest.schema.to_arrow()
        self._source = as_reader(source, schema).read_all()
        keys = [on] if isinstance(on, str) else list(on)
        if not keys or not all(isinstance(k, str) for k in keys):
            raise InvalidArgument("merge needs on=[one or more key columns]")
        names = self._source.column_names
        self._keys = [(resolve(k, schema.names), _source_column(k, names, "key"))
                      for k in keys]
        self._clauses: list[Clause] = []

    def _add(self, kind: str, action: str, values: Mapping[str, object] | None,
             condition: str | Expr | None) -> Self:
        if condition is not None:
            condition = check_where(condition)
        names = self._ctx.snapshot.manifest.schema.names
        parsed = assignments(values, names, f"{kind}_{action}") if values is not None else {}
        shown = f"when_{kind}_{action}({describe(values or {})}"
        shown += f"{'; ' if values else ''}if {condition})" if condition is not None else ")"
        self._clauses.append(Clause(kind, action, parsed, condition, shown))
        return self

    def when_matched_update(self, set: Mapping[str, object], condition: str | Expr | None = None
                            ) -> Self:
        return self._add(MATCHED, "update", set, condition)

    def when_matched_update_all(self, condition: str | Expr | None = None) -> Self:
        return self._add(MATCHED, "update_all", None, condition)

    def when_matched_delete(self, condition: str | Expr | None = None) -> Self:
        return self._add(MATCHED, "delete", None, condition)

    def when_not_matched_insert(self, values: Mapping[str, object],
                                condition: str | Expr | None = None) -> Self:
        return self._add(NOT_MATCHED, "insert", values, condition)

    def when_not_matched_insert_all(self, condition: str | Expr | None = None) -> Self:
        return self._add(NOT_MATCHED, "insert_all", None, condition)

    def when_not_matched_by_source_update(self, set: Mapping[str, object],
                                          condition: str | Expr | None = None) -> Self:
        return self._add(BY_SOURCE, "update", set, condition)

    def when_not_matched_by_source_delete(self, condition: str | Expr | None = None) -> Self:
        return self._add(BY_SOURCE, "delete", None, condition)

    def execute(self, *, read_version: int | None = None) -> CommitResult:
        """Commit the merge as one version (none when it changes nothing)."""
        if not self._clauses:
            raise InvalidArgument("merge needs at least one when_... clause")
        plan = _Plan(self._ctx, self._source, self._keys, tuple(self._clauses))
        params = {"key": ",".join(k for k, _ in self._keys),
                  "clauses": "; ".join(c.text for c in self._clauses)}
        requirements: tuple[Requirement, ...] = ()
        if read_version is not None:
            cond = PredicateCondition("TRUE") if plan.by_source else KeyCondition(
                plan.source_keys())
            requirements = (ReadSetUnchanged(read_version, (cond,), "merge"),)
        return commit_rewrite(self._ctx, "merge_into", plan.on, params=params,
                              requirements=requirements)


def _source_column(name: str, names: Sequence[str], what: str) -> str:
    try:
        return resolve(name, list(names))
    except InvalidPredicate:
        raise SchemaMismatch(f"merge {what} column {name!r} is not in the source (columns: "
                             f"{', '.join(names)})", column=name) from None


# --- planning on a base version ------------------------------------------------------


class _Plan:
    """A merge planned on a base version: :meth:`on` gives its :class:`Rewrite`."""

    def __init__(self, ctx: TableContext | None, source: pa.Table,
                 keys: list[tuple[str, str]], clauses: tuple[Clause, ...]) -> None:
        self.ctx = ctx  # None: only :meth:`apply` (on rows read elsewhere) is used
        self.source = source
        self.keys = keys
        self.clauses = clauses
        self.of = {kind: [c for c in clauses if c.kind == kind]
                   for kind in (MATCHED, NOT_MATCHED, BY_SOURCE)}
        self.by_source = bool(self.of[BY_SOURCE])

    def source_keys(self) -> pa.Table:
        """The source's key columns under the table's names and types, NULL keys out."""
        assert self.ctx is not None
        schema = self.ctx.snapshot.manifest.schema.to_arrow()
        return _keys_of(self.source, self.keys, schema)

    def _target_columns(self, schema: pa.Schema) -> list[str] | None:
        """The target columns the clauses need: None (all) when one updates some
        columns or has a condition on target rows, else the keys alone."""
        needs_all = any(c.action == "update" or (c.condition is not None and c.kind != NOT_MATCHED)
                        for c in self.clauses)
        return None if needs_all else [k for k, _ in self.keys]

    def on(self, base: Snapshot) -> Rewrite:
        assert self.ctx is not None
        schema = base.manifest.schema.to_arrow()
        src_keys = _keys_of(self.source, self.keys, schema, keep_nulls=True)
        columns = self._target_columns(schema)
        plan = DeletePlan(base)
        valid = src_keys.drop_null()
        if self.by_source:
            target = read_target(self.ctx, base, columns, None)
        elif valid.num_rows:
            target = read_target(self.ctx, base, columns, key_scan_where(valid))
        else:
            target = read_target(self.ctx, base, [k for k, _ in self.keys], "FALSE")
        return Rewrite(plan, self.apply(target, plan, schema))

    def apply(self, target: TargetRows, plan: DeletePlan, schema: pa.Schema) -> pa.Table:
        """The merge of the source with ``target`` (the target rows it may touch):
        the rows it hides go into ``plan``, the rows it appends are returned.
        Spark's merge runs it in each task on the rows its join put there
        (:mod:`caslake.spark.dml`)."""
        src_keys = _keys_of(self.source, self.keys, schema, keep_nulls=True)
        pairs = _match(src_keys, target, [k for k, _ in self.keys])
        updated = self._matched(pairs, target, plan, schema)
        inserted = self._not_matched(pairs, schema)
        updated += self._by_source(pairs, target, plan, schema)
        parts = [t for t in (*updated, *inserted) if t.num_rows]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _matched(self, pairs: pa.Table, target: TargetRows, plan: DeletePlan,
                 schema: pa.Schema) -> list[pa.Table]:
        clauses = self.of[MATCHED]
        if not clauses or not pairs.num_rows:
            return []
        src = self.source.take(pairs.column(_SRC))
        tgt_rows = target.rows.take(pairs.column(_TGT))
        tgt = tgt_rows.drop_columns([FILE, POSITION])
        which = chosen(clauses, scope(src, tgt))
        tgt_index = pairs.column(_TGT).to_numpy()
        _check_cardinality(tgt_index[which >= 0], clauses, target.rows, self.keys)
        out = []
        for i, clause in enumerate(clauses):
            rows = np.flatnonzero(which == i)
            if clause.action == "delete":  # a lone unconditional delete: each row once
                rows = rows[np.unique(tgt_index[rows], return_index=True)[1]]
            if not len(rows):
                continue
            target.hide(plan, tgt_rows.take(rows))
            if clause.action == "delete":
                continue
            s, t = src.take(rows), tgt.take(rows)
            if clause.action == "update_all":
                out.append(_all_columns(s, schema))
            else:
                out.append(with_values(t, clause.values, scope(s, t), schema))
        return out

    def _not_matched(self, pairs: pa.Table, schema: pa.Schema) -> list[pa.Table]:
        clauses = self.of[NOT_MATCHED]
        if not clauses:
            return []
        matched = np.zeros(self.source.num_rows, dtype=bool)
        matched[pairs.column(_SRC).to_numpy()] = True
        src = self.source.filter(pa.array(~matched))
        which = chosen(clauses, scope(src, None))
        out = []
        for i, clause in enumerate(clauses):
            s = src.take(np.flatnonzero(which == i))
            if not s.num_rows:
                continue
            if clause.action == "insert_all":
                out.append(_all_columns(s, schema))
            else:
                out.append(_inserted(s, clause.values, schema))
        return out

    def _by_source(self, pairs: pa.Table, target: TargetRows, plan: DeletePlan,
                   schema: pa.Schema) -> list[pa.Table]:
        clauses = self.of[BY_SOURCE]
        if not clauses:
            return []
        matched = np.zeros(target.rows.num_rows, dtype=bool)
        matched[pairs.column(_TGT).to_numpy()] = True
        alone = target.rows.filter(pa.array(~matched))
        tgt = alone.drop_columns([FILE, POSITION])
        which = chosen(clauses, scope(None, tgt))
        out = []
        for i, clause in enumerate(clauses):
            rows = np.flatnonzero(which == i)
            if not len(rows):
                continue
            target.hide(plan, alone.take(rows))
            if clause.action == "update":
                t = tgt.take(rows)
                out.append(with_values(t, clause.values, scope(None, t), schema))
        return out


def merge_rows(source: pa.Table, keys: list[tuple[str, str]], clauses: tuple[Clause, ...],
               target: TargetRows, plan: DeletePlan, schema: pa.Schema) -> pa.Table:
    """The merge of ``source`` rows with ``target`` rows read elsewhere (a Spark
    task's share of the join): hidden rows go into ``plan``, appended rows are
    returned.  Same semantics as :meth:`MergeBuilder.execute`, errors included."""
    return _Plan(None, source, keys, clauses).apply(target, plan, schema)


def _keys_of(source: pa.Table, keys: list[tuple[str, str]], schema: pa.Schema, *,
             keep_nulls: bool = False) -> pa.Table:
    """The source's key columns, named and typed as the table's."""
    arrays = []
    for table_name, source_name in keys:
        f = schema.field(table_name)
        col = source.column(source_name)
        arrays.append(conform_value(col, col.type, f.with_nullable(True), source.num_rows))
    t = pa.Table.from_arrays(arrays, names=[k for k, _ in keys])
    return t if keep_nulls else t.drop_null()


def _match(src_keys: pa.Table, target: TargetRows, keys: list[str]) -> pa.Table:
    """Pairs of a source row and a target row with equal keys (no NULL):
    columns ``_SRC`` and ``_TGT``, row indices, in target order."""
    s = src_keys.append_column(_SRC, pa.array(np.arange(src_keys.num_rows), pa.int64()))
    t = target.rows.select(keys).append_column(
        _TGT, pa.array(np.arange(target.rows.num_rows), pa.int64()))
    s, t = s.drop_null(), t.drop_null()
    joined = t.join(s, keys=keys, join_type="inner", use_threads=False)
    return joined.select([_SRC, _TGT]).sort_by([(_TGT, "ascending"), (_SRC, "ascending")])


def _check_cardinality(acting: np.ndarray[Any, Any], clauses: Sequence[Clause],
                       rows: pa.Table, keys: list[tuple[str, str]]) -> None:
    """A target row (``acting``: the target row of each pair a clause applies to)
    that several source rows would change: DuplicateKey naming its key (nothing
    written), unless the only matched clause is an unconditional delete."""
    if len(clauses) == 1 and clauses[0].action == "delete" and clauses[0].condition is None:
        return
    values, counts = np.unique(acting, return_counts=True)
    dup = counts > 1
    if not dup.any():
        return
    at = int(np.argmax(dup))
    key = {k: rows.column(k)[int(values[at])].as_py() for k, _ in keys}
    raise duplicate_key(key, int(counts[at]), int(dup.sum()),
                        "make the source match each target row at most once",
                        subject="the merge's source matches the target row with key")


def _all_columns(source: pa.Table, schema: pa.Schema) -> pa.Table:
    """Source rows as the table's columns (``update_all`` / ``insert_all``): every
    table column must be in the source; extra source columns are left out."""
    arrays = []
    for f in schema:
        name = _source_column(f.name, source.column_names, "table")
        col = source.column(name)
        arrays.append(conform_value(col, col.type, f, source.num_rows))
    return pa.Table.from_arrays(arrays, schema=schema)


def _inserted(source: pa.Table, values: Mapping[str, Value], schema: pa.Schema) -> pa.Table:
    """Rows inserted from ``values`` computed on source rows, NULL for other columns
    (a non-nullable one left out is SchemaMismatch)."""
    missing = [f.name for f in schema if f.name not in values and not f.nullable]
    if missing:
        raise SchemaMismatch(f"a merge insert leaves non-nullable column {missing[0]!r} "
                             "without a value", column=missing[0])
    nulls = pa.table({f.name: pa.nulls(source.num_rows, f.type) for f in schema})
    return with_values(nulls, values, scope(source, None), schema)
