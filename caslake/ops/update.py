"""UPDATE: rewrite the rows matching a predicate with new values, as one commit
(docs/protocol.md, "Update").

Owns what an UPDATE and a MERGE share: the assignments (``{column: value}``, a
value being SQL text, a ``caslake.expr`` value or a Python literal), the rule
that presents a computed value under its column's type (:func:`conform_value`,
a typed ``SchemaMismatch`` naming the column otherwise), and reading a base
version's live rows with their identity (:func:`read_target`: each row's file
and position, so a tombstone can hide exactly them).  The commit itself is
:func:`caslake.ops.transaction.commit_rewrite`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from caslake.core import (
    POSITION,
    CommitResult,
    FileTask,
    PredicateCondition,
    ReadSetUnchanged,
    Requirement,
    Scan,
    Snapshot,
    TableContext,
)
from caslake.errors import InvalidArgument, PredicateEvaluationError, SchemaMismatch
from caslake.expr import Expr, Value, compile_where, evaluate_value, lit, parse_sql_value
from caslake.expr import resolve_column as resolve
from caslake.ops.change_feed import PAIR_BY_POSITION, PAIR_PARAM
from caslake.ops.delete import DeletePlan, check_where
from caslake.ops.transaction import Rewrite, commit_rewrite

FILE = "__caslake_file"  # a target row's file, as an index into TargetRows.tasks
LITERALS = (bool, int, float, str, bytes, Decimal, dt.date, dt.datetime, dt.time)


# --- assignments -------------------------------------------------------------------


def as_value(value: object, column: str) -> Value:
    """An assignment's value: SQL text, an expression value, or a Python literal
    (``None`` is NULL).  A predicate or anything else is InvalidArgument."""
    if isinstance(value, str):
        return parse_sql_value(value)
    if isinstance(value, Value):
        return value
    if value is None:
        return parse_sql_value("NULL")
    if isinstance(value, LITERALS):
        return lit(value)
    hint = " (a predicate: use a SQL string such as 'a > 5')" if isinstance(value, Expr) else ""
    raise InvalidArgument(f"the value for column {column!r} must be SQL text, a caslake "
                          f"expression value or a literal, not {type(value).__name__}{hint}")


def assignments(values: Mapping[str, object], names: Sequence[str], what: str
                ) -> dict[str, Value]:
    """``{column: value}`` with each column resolved among ``names`` (as a where
    resolves them: UnknownColumn) and each value parsed."""
    if not isinstance(values, Mapping) or not values:
        raise InvalidArgument(f"{what} needs at least one column to set, as "
                              "{column: value}")
    out: dict[str, Value] = {}
    for name, value in values.items():
        if not isinstance(name, str):
            raise InvalidArgument(f"{what}: column names must be strings, not {name!r}")
        column = resolve(name, list(names))
        if column in out:
            raise InvalidArgument(f"{what} sets column {column!r} twice")
        out[column] = as_value(value, column)
    return out


def describe(values: Mapping[str, object]) -> str:
    """Assignments as text, for a commit's operation_params."""
    return ", ".join(f"{k} = {v}" for k, v in values.items())


# --- the type rule ---------------------------------------------------------------------


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or \
            pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return "datetime"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_null(t):
        return "null"
    return "nested"


_NUMERIC = {"int", "float", "decimal"}
_HALF_AWAY = "half_towards_infinity"  # DuckDB's decimal rounding


def _rounded(values: Any, source: Any, target: Any) -> Any:
    """Round ``values`` to what ``target`` holds, as DuckDB's assignment casts:
    a float into an integer half to even, into a decimal or a decimal of larger
    scale half away from zero."""
    to = _kind(target)
    if to not in ("int", "decimal") or _kind(source) not in ("float", "decimal"):
        return values
    digits: int = target.scale if to == "decimal" else 0
    if _kind(source) == "float":
        mode = "half_to_even" if to == "int" else _HALF_AWAY
        return pc.round(values, digits, round_mode=mode)  # type: ignore[call-overload]
    if digits >= source.scale:
        return values
    wider = min(source.precision + 1, 76)  # a carry (9.99 -> 10.0) needs a digit more
    widened = values.cast(pa.decimal128(wider, source.scale) if wider <= 38
                          else pa.decimal256(wider, source.scale))
    return pc.round(widened, digits, round_mode=_HALF_AWAY)  # type: ignore[call-overload]


def conform_value(value: Any, vtype: pa.DataType, field: pa.Field[Any], rows: int
                  ) -> pa.Array[Any]:
    """``value`` (an array, or a scalar for every row) as ``rows`` values of
    ``field``'s type.  Another kind of value (a string into a number), a value
    out of range, or NULL into a non-nullable column: SchemaMismatch naming it."""
    name, target = field.name, field.type
    kinds = {_kind(vtype), _kind(target)}
    ok = _kind(vtype) == "null" or len(kinds) == 1 or kinds <= _NUMERIC
    if not ok:
        raise SchemaMismatch(f"column {name!r} is {target} but the value given for it is "
                             f"{vtype}", column=name, expected=str(target), actual=str(vtype))
    if isinstance(value, pa.Scalar):
        value = pa.repeat(value, rows)  # type: ignore[call-overload]
    elif isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks() if value.num_chunks != 1 else value.chunk(0)
    try:
        out: pa.Array[Any] = _rounded(value, vtype, target).cast(target)
    except (pa.ArrowException, ValueError, OverflowError) as exc:
        detail = str(exc).splitlines()[0][:160]
        raise SchemaMismatch(f"a value for column {name!r} does not fit its type {target}: "
                             f"{detail}", column=name, expected=str(target),
                             actual=str(vtype)) from None
    if not field.nullable and out.null_count:
        raise SchemaMismatch(f"column {name!r} is not nullable but a value given for it is "
                             "NULL", column=name, expected=str(target), actual="null")
    return out


def computed(value: Value, scope: pa.Table, field: pa.Field[Any]) -> pa.Array[Any]:
    """``value`` evaluated on every row of ``scope``, under ``field``'s type."""
    try:
        result, vtype = evaluate_value(value, scope)
    except PredicateEvaluationError as exc:
        raise SchemaMismatch(f"computing the value for column {field.name!r} failed: {exc}",
                             column=field.name, expected=str(field.type)) from None
    return conform_value(result, vtype, field, scope.num_rows)


def with_values(rows: pa.Table, values: Mapping[str, Value], scope: pa.Table,
                schema: pa.Schema) -> pa.Table:
    """``rows`` (the table's columns) with ``values`` computed on ``scope`` (the
    same rows as the names the values may use) replacing their columns."""
    arrays = [computed(values[f.name], scope, f) if f.name in values else rows.column(f.name)
              for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


# --- the target rows ---------------------------------------------------------------------


@dataclass(frozen=True)
class TargetRows:
    """Live rows of a base version with their identity: the table's columns read,
    then :data:`FILE` (an index into ``tasks``, which are sorted by path) and
    ``POSITION``, sorted by (file path, position)."""

    rows: pa.Table
    tasks: tuple[FileTask, ...]

    def hide(self, plan: DeletePlan, picked: pa.Table) -> None:
        """Add the rows of ``picked`` (rows of this table) to ``plan``."""
        files = picked.column(FILE).to_numpy()
        positions = picked.column(POSITION).to_numpy()
        for i in np.unique(files):
            plan.add(self.tasks[int(i)], BitMap(positions[files == i].astype(np.uint32)))

    def columns(self) -> pa.Table:
        return self.rows.drop_columns([FILE, POSITION])


def read_target(ctx: TableContext, base: Snapshot, columns: Sequence[str] | None,
                where: str | Expr | None) -> TargetRows:
    """The live rows of ``base`` matching ``where`` (``columns``: None for all),
    with their files and positions, read as a delete reads them."""
    scan = Scan(ctx.io, ctx.footers, base, columns, where, ctx.tombstones)
    by_path: dict[str, FileTask] = {}
    parts: list[tuple[str, pa.Table]] = []
    for task, rows in scan.matching_rows():
        if rows.num_rows:
            by_path.setdefault(task.file.path, task)
            parts.append((task.file.path, rows))
    paths = sorted(by_path)
    index = {p: i for i, p in enumerate(paths)}
    schema = base.manifest.schema.to_arrow()
    names = [n for n in schema.names if columns is None or n in set(scan.columns)]
    out_schema = pa.schema([*(schema.field(n) for n in names), pa.field(FILE, pa.int32()),
                            pa.field(POSITION, pa.int64())])
    tables = [pa.Table.from_arrays(
        [*(t.column(n) for n in names), pa.repeat(pa.scalar(index[p], pa.int32()), t.num_rows),
         t.column(POSITION).cast(pa.int64())], schema=out_schema) for p, t in parts]
    rows = pa.concat_tables(tables) if tables else out_schema.empty_table()
    rows = rows.sort_by([(FILE, "ascending"), (POSITION, "ascending")])
    return TargetRows(rows, tuple(by_path[p] for p in paths))


# --- UPDATE ------------------------------------------------------------------------------


def update(ctx: TableContext, set_: Mapping[str, object], where: str | Expr | None, *,
           read_version: int | None = None) -> CommitResult:
    """``UPDATE t SET ... WHERE ...`` as one commit (docs/protocol.md, "Update")."""
    schema = ctx.snapshot.manifest.schema.to_arrow()
    values = assignments(set_, schema.names, "update")
    if where is not None:
        where = check_where(where)
        compile_where(where, schema)  # a bad predicate fails before anything is read

    def plan(base: Snapshot) -> Rewrite:
        arrow = base.manifest.schema.to_arrow()
        target = read_target(ctx, base, None, where)
        old = target.columns()
        new = with_values(old, values, old, arrow)
        rewrite = DeletePlan(base)
        target.hide(rewrite, target.rows)
        return Rewrite(rewrite, new)

    params, requirements = update_terms(set_, where, read_version)
    return commit_rewrite(ctx, "update", plan, params=params, requirements=requirements,
                          in_order={PAIR_PARAM: PAIR_BY_POSITION})


def update_terms(set_: Mapping[str, object], where: str | Expr | None,
                 read_version: int | None) -> tuple[dict[str, str], tuple[Requirement, ...]]:
    """An UPDATE commit's operation params and requirements (``read_version``: no
    commit since it changed rows ``where`` could match)."""
    params = {"set": describe(set_)}
    if where is not None:
        params["where"] = str(where)
    requirements: tuple[Requirement, ...] = ()
    if read_version is not None:
        requirements = (ReadSetUnchanged(read_version, (PredicateCondition(
            where if where is not None else "TRUE"),), "update"),)
    return params, requirements
