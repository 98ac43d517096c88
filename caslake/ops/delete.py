"""Delete planning: which rows of which files a delete removes, as one tombstone.

A delete never rewrites a data file.  Planning reads as little as it can:

1. files pruned by the manifest's statistics,
2. row groups pruned by footer statistics (and groups already deleted),
3. only the condition's columns of the candidate row groups, decoded to find
   the positions of live rows that match.

The result becomes one tombstone object: per file, whole row groups (when a
delete empties a group), an inclusive key range (for a simple range predicate
whose position bitmap would be large), or row positions as a roaring bitmap.
A file whose rows are all deleted is dropped from the manifest instead.

Conditions are a ``where`` predicate (:class:`PredicateCondition`) or a set of
keys (:class:`KeyCondition`, for upserts); both go through the scan reader,
so delete semantics have exactly one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from caslake.core import (
    POSITION,
    Changes,
    Condition,
    DeletionMask,
    FileTask,
    FooterCache,
    KeyCondition,
    MetadataIO,
    PredicateCondition,
    Scan,
    Snapshot,
    SnapshotSubset,
    TombstoneCache,
    key_scan_where,
    partition_covers,
    put_new,
)
from caslake.errors import InvalidArgument
from caslake.expr import (
    And,
    BoundExpr,
    Column,
    Compare,
    Expr,
    Literal,
    Not,
    compile_where,
)
from caslake.format.keys import tombstone_key
from caslake.format.manifest import DataFile, TombstoneRef
from caslake.format.stats import value_to_json
from caslake.format.tombstone import FileDeletes, KeyRange, Tombstone

# A range predicate is recorded as a key range instead of positions once the
# position bitmap for a file would be larger than this.
KEY_RANGE_MIN_BITMAP_BYTES = 4096


@dataclass
class DeletePlan:
    base: Snapshot
    per_file: dict[str, BitMap] = field(default_factory=dict)  # new positions per file
    tasks: dict[str, tuple[DataFile, DeletionMask | None, list[int], list[int]]] = field(
        default_factory=dict)  # path -> (file, existing mask, starts, rows per group)

    @property
    def rows_deleted(self) -> int:
        return sum(len(b) for b in self.per_file.values())

    @property
    def target_paths(self) -> set[str]:
        return set(self.per_file)

    def drop_whole(self, f: DataFile) -> None:
        """Delete every row of ``f`` (planned without reading it): the file is dropped."""
        self.per_file[f.path] = BitMap(range(f.row_count))
        self.tasks[f.path] = (f, None, [], [])

    def add(self, task: FileTask, positions: BitMap) -> None:
        """Record ``positions`` (live rows of ``task``'s file that a condition matches)."""
        if not positions:
            return
        path = task.file.path
        bm = self.per_file.setdefault(path, BitMap())
        bm |= positions
        self.tasks.setdefault(path, (task.file, task.mask, list(task.starts),
                                     list(task.footer.group_rows)))


def condition_scan(io: MetadataIO, footers: FooterCache, tombstones: TombstoneCache,
                   base: Snapshot | SnapshotSubset, cond: Condition) -> Scan:
    """The scan of ``base`` (or of a subset of it) that a condition's matches are
    looked for in: its plan holds the candidate files and row groups left after
    statistics pruning (by the predicate, or by each key column's min/max), with
    their deletion masks.  An unknown key column is UnknownColumn."""
    if isinstance(cond, PredicateCondition):
        return Scan(io, footers, base, [], cond.where, tombstones)
    return Scan(io, footers, base, cond.keys.column_names, key_scan_where(cond.keys),
                tombstones)


def matching_positions(scan: Scan, cond: Condition) -> dict[str, tuple[FileTask, BitMap]]:
    """Per file of ``scan``'s plan: the positions of its live rows (not deleted by
    any tombstone yet) that ``cond`` matches.  Files with no match are left out.

    This is the one implementation of delete semantics: ``Table.delete`` and
    upserts call it on the whole candidate scan, the Spark delete on executors,
    one group of files each (``caslake.spark.dml``)."""
    out: dict[str, tuple[FileTask, BitMap]] = {}
    for task, rows in scan.matching_rows():
        if isinstance(cond, KeyCondition):
            names = cond.keys.column_names
            rows = rows.join(cond.keys, keys=names, join_type="inner")
        positions = rows.column(POSITION).to_numpy()
        if not len(positions):
            continue
        found = out.setdefault(task.file.path, (task, BitMap()))
        found[1].update(positions.astype(np.uint32))
    return out


# How a transaction plans its deletes on a base version: ``plan_delete``, or one
# that computes ``matching_positions`` elsewhere (caslake.spark.dml).
Planner = Callable[[MetadataIO, FooterCache, TombstoneCache, Snapshot, Sequence[Condition]],
                   DeletePlan]


def plan_delete(io: MetadataIO, footers: FooterCache, tombstones: TombstoneCache,
                base: Snapshot, conditions: Sequence[Condition]) -> DeletePlan:
    plan = DeletePlan(base)
    for cond in conditions:
        source: Snapshot | SnapshotSubset = base
        whole, rest = whole_partition_files(io, base, cond)
        if whole:
            for f in whole:
                plan.drop_whole(f)
            source = SnapshotSubset.of(base, rest)
        scan = condition_scan(io, footers, tombstones, source, cond)
        for task, positions in matching_positions(scan, cond).values():
            plan.add(task, positions)
    return plan


def whole_partition_files(io: MetadataIO, base: Snapshot, cond: Condition
                          ) -> tuple[list[DataFile], list[DataFile]]:
    """The live files whose partition lies wholly inside a predicate condition (every
    row matches: dropped unread, docs/protocol.md "Hidden partitioning"), and the
    others.  Nothing for a key condition or a table without partition specs."""
    p = base.manifest.partitioning
    if p is None or not isinstance(cond, PredicateCondition):
        return [], []
    where = cond.where
    negated = compile_where(Not(where) if isinstance(where, Expr) else f"NOT ({where})",
                            base.manifest.schema.to_arrow())
    if negated is None:
        return [], []
    whole: list[DataFile] = []
    rest: list[DataFile] = []
    for f in io.live_files(base):
        covered = partition_covers(negated, f, p, base.manifest.schema, key=base.key)
        (whole if covered else rest).append(f)
    return whole, rest


def _simple(e: object) -> tuple[str, str, Any] | None:
    """(column, op, value) of a bound ``column op literal`` comparison; None for
    anything else (column against column, computed values)."""
    if isinstance(e, Compare) and isinstance(e.left, Column) and isinstance(e.right, Literal):
        return e.left.name, e.op, e.right.value
    return None


def simple_range(bound: BoundExpr | None) -> tuple[str, Any, Any] | None:
    """(column, low, high) when the predicate is ``c = v`` or ``c >= lo AND c <= hi``
    on an integer, string, date or timestamp column; else None."""
    if bound is None:
        return None
    e = bound.expr
    found: tuple[str, Any, Any] | None = None
    one = _simple(e)
    if one is not None and one[1] == "=":
        found = (one[0], one[2], one[2])
    elif isinstance(e, And):
        a, b = _simple(e.left), _simple(e.right)
        if a is not None and b is not None and a[0] == b[0] and {a[1], b[1]} == {">=", "<="}:
            low, high = (a, b) if a[1] == ">=" else (b, a)
            found = (a[0], low[2], high[2])
    if found is None:
        return None
    t = bound.schema.field(found[0]).type
    ok = (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
          or pa.types.is_date32(t) or pa.types.is_timestamp(t))
    return found if ok else None


@dataclass(frozen=True)
class TombstoneDraft:
    tombstone: Tombstone | None
    dropped: list[DataFile]
    deleted_per_file: dict[str, int]  # total rows deleted in each file after this delete
    new_rows: int  # rows this delete hides through the tombstone (not via dropped files)


def build_tombstone(plan: DeletePlan, *, table_id: str, commit_id: str,
                    conditions: Sequence[Condition]) -> TombstoneDraft:
    """The tombstone for the plan, and the files to drop whole.

    Each entry holds the file's *merged* mask -- everything earlier tombstones
    deleted there plus this delete -- so it supersedes them: a reader needs one
    tombstone per file however many deletes touched it."""
    key_range = None
    if len(conditions) == 1 and isinstance(conditions[0], PredicateCondition):
        schema = plan.base.manifest.schema
        key_range = simple_range(compile_where(conditions[0].where, schema.to_arrow()))
    entries: list[FileDeletes] = []
    dropped: list[DataFile] = []
    totals: dict[str, int] = {}
    new_rows = 0
    deleted_before = plan.base.manifest.deleted_rows_per_file()
    for path, new in plan.per_file.items():
        data_file, mask, starts, group_rows = plan.tasks[path]
        before = deleted_before.get(path, 0)
        if before + len(new) >= data_file.row_count:
            dropped.append(data_file)
            continue
        groups = set(mask.row_groups) if mask is not None else set()
        ranges = list(mask.raw_key_ranges) if mask is not None else []
        old_positions = BitMap(mask.positions) if mask is not None else BitMap()
        positions = old_positions | new
        if key_range is not None:
            probe = BitMap(new)
            probe.run_optimize()
            if len(probe.serialize()) > KEY_RANGE_MIN_BITMAP_BYTES:
                name, low, high = key_range
                fld = plan.base.manifest.schema.field(name)
                t = fld.arrow_type
                kr = KeyRange(fld.id, value_to_json(low, t), value_to_json(high, t))
                if kr not in ranges:
                    ranges.append(kr)
                positions = old_positions
        for rg, (start, n) in enumerate(zip(starts, group_rows, strict=True)):
            if rg in groups or positions.range_cardinality(start, start + n) == n:
                groups.add(rg)  # a whole group: record it as such, drop its positions
                positions.remove_range(start, start + n)
        entries.append(FileDeletes(path, data_file.row_count, frozenset(groups), tuple(ranges),
                                   positions))
        totals[path] = before + len(new)
        new_rows += len(new)
    tomb = (Tombstone(plan.base.manifest.table_id, commit_id, tuple(entries))
            if entries else None)
    return TombstoneDraft(tomb, dropped, totals, new_rows)


def write_delete(io: MetadataIO, plan: DeletePlan, *, commit_id: str,
                 conditions: Sequence[Condition]
                 ) -> tuple[tuple[TombstoneRef, ...], tuple[DataFile, ...], int]:
    """Upload the plan's tombstone (create-only); return its reference, the files to
    drop and the rows the tombstone newly hides.  A tombstone left unreferenced by a
    failed commit is an orphan for GC."""
    draft = build_tombstone(plan, table_id=plan.base.manifest.table_id, commit_id=commit_id,
                            conditions=conditions)
    refs: tuple[TombstoneRef, ...] = ()
    if draft.tombstone is not None:
        data = draft.tombstone.to_bytes()
        key = tombstone_key()
        etag = put_new(io.store, key, data)
        refs = (TombstoneRef(key, len(data), etag, draft.deleted_per_file),)
    return refs, tuple(draft.dropped), draft.new_rows


def changes_for(operation: str, refs: tuple[TombstoneRef, ...], dropped: tuple[DataFile, ...],
                add_files: tuple[DataFile, ...], params: dict[str, str],
                rows_deleted: int) -> Changes | None:
    if not refs and not dropped and not add_files:
        return None
    return Changes(operation, add_files=add_files, remove_files=dropped, add_tombstones=refs,
                   params=params, rows_deleted=rows_deleted)


def check_where(where: object) -> str | Expr:
    if not isinstance(where, str | Expr):
        raise InvalidArgument(f"where must be a SQL string or an expression, not "
                              f"{type(where).__name__}")
    return where
