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
import pyarrow.compute as pc
from pyroaring import BitMap

from caslake.errors import InvalidArgument
from caslake.expr import (
    And,
    BoundExpr,
    Column,
    Compare,
    Expr,
    Literal,
    col,
    compile_where,
    might_match,
)
from caslake.format.keys import tombstone_key
from caslake.format.manifest import DataFile, TombstoneRef
from caslake.format.stats import data_file_stats, value_to_json
from caslake.format.tombstone import FileDeletes, KeyRange, Tombstone
from caslake.store.base import PutMode
from caslake.table.changes import Changes
from caslake.table.deletion_mask import DeletionMask, TombstoneCache
from caslake.table.footers import FooterCache
from caslake.table.metadata_io import MetadataIO, Snapshot
from caslake.table.scan import POSITION, FileTask, Scan, SnapshotSubset, summary_matcher

# A range predicate is recorded as a key range instead of positions once the
# position bitmap for a file would be larger than this.
KEY_RANGE_MIN_BITMAP_BYTES = 4096


@dataclass(frozen=True)
class PredicateCondition:
    where: str | Expr

    def describe(self) -> str:
        return str(self.where)


@dataclass(frozen=True)
class KeyCondition:
    """Rows whose key columns equal a row of ``keys`` (NULL keys never match)."""

    keys: pa.Table

    def describe(self) -> str:
        return f"key ({', '.join(self.keys.column_names)}) in {self.keys.num_rows} keys"


Condition = PredicateCondition | KeyCondition


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

    def add(self, task: FileTask, positions: BitMap) -> None:
        """Record ``positions`` (live rows of ``task``'s file that a condition matches)."""
        if not positions:
            return
        path = task.file.path
        bm = self.per_file.setdefault(path, BitMap())
        bm |= positions
        self.tasks.setdefault(path, (task.file, task.mask, list(task.starts),
                                     list(task.footer.group_rows)))


def _key_scan_where(keys: pa.Table) -> Expr | None:
    """A sound pruning predicate for a key set: each key column within its min/max."""
    expr: Expr | None = None
    for name in keys.column_names:
        mm: Any = pc.min_max(keys.column(name))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None:
            return None
        part: Expr = col(name).between(lo, hi)
        expr = part if expr is None else And(expr, part)
    return expr


def condition_scan(io: MetadataIO, footers: FooterCache, tombstones: TombstoneCache,
                   base: Snapshot | SnapshotSubset, cond: Condition) -> Scan:
    """The scan of ``base`` (or of a subset of it) that a condition's matches are
    looked for in: its plan holds the candidate files and row groups left after
    statistics pruning (by the predicate, or by each key column's min/max), with
    their deletion masks.  An unknown key column is UnknownColumn."""
    if isinstance(cond, PredicateCondition):
        return Scan(io, footers, base, [], cond.where, tombstones)
    return Scan(io, footers, base, cond.keys.column_names, _key_scan_where(cond.keys),
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
        scan = condition_scan(io, footers, tombstones, base, cond)
        for task, positions in matching_positions(scan, cond).values():
            plan.add(task, positions)
    return plan


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
        etag = io.store.put(key, data, mode=PutMode.CREATE)
        refs = (TombstoneRef(key, len(data), etag, draft.deleted_per_file),)
    return refs, tuple(draft.dropped), draft.new_rows


def touched_since(io: MetadataIO, planned: Snapshot, base: Snapshot, paths: set[str]) -> bool:
    """Did commits between ``planned`` and ``base`` remove any of ``paths`` or add a
    tombstone touching them?  If so a delete planned on ``planned`` must re-plan."""
    if base.key == planned.key or not paths:
        return False
    known = {r.path for r in planned.manifest.tombstones}
    for ref in base.manifest.tombstones:
        if ref.path not in known and paths.intersection(ref.files):
            return True
    if _nothing_removed_between(io, planned, base):
        return False  # every planned path is still live: no segment need be opened
    live = {f.path for f in io.iter_live_files(base)}
    return not paths <= live


REMOVAL_WALK = 32  # commits walked back before falling back to the live file list


def _nothing_removed_between(io: MetadataIO, planned: Snapshot, base: Snapshot) -> bool:
    """True when ``base`` descends from ``planned`` through commits that removed no
    data file (each manifest's ``summary.removed_files``): then every file live at
    ``planned`` is live at ``base``.  A cheap check on the parents' manifests (the
    usual retry after a concurrent append or delete), instead of decoding every
    segment of ``base``; False when unsure."""
    snap = base
    for _ in range(REMOVAL_WALK):
        if snap.version <= planned.version:
            return snap.key == planned.key
        m = snap.manifest
        if m.summary.get("removed_files", 1) != 0 or m.parent is None:
            return False
        snap = Snapshot(io.load_manifest(m.parent), m.parent)
    return False


def changes_for(operation: str, refs: tuple[TombstoneRef, ...], dropped: tuple[DataFile, ...],
                add_files: tuple[DataFile, ...], params: dict[str, str],
                rows_deleted: int) -> Changes | None:
    if not refs and not dropped and not add_files:
        return None
    return Changes(operation, add_files=add_files, remove_files=dropped, add_tombstones=refs,
                   params=params, rows_deleted=rows_deleted)


def _condition_filter(cond: Condition, schema: pa.Schema) -> BoundExpr | None:
    """A sound file filter for the rows a condition can match (None: any row)."""
    if isinstance(cond, PredicateCondition):
        return compile_where(cond.where, schema)
    return compile_where(_key_scan_where(cond.keys), schema)


def changed_since(io: MetadataIO, read: Snapshot, base: Snapshot,
                  conditions: Sequence[Condition]) -> str | None:
    """Why a change computed from version ``read`` may not commit on ``base``, or None.

    Conflict when any commit in between added a file, removed a file, or added
    a tombstone on a file, whose statistics say it could hold a row one of the
    conditions matches.  Conservative: unknown statistics count as a match."""
    if base.key == read.key:
        return None
    schema = base.manifest.schema
    known = {r.path for r in read.manifest.tombstones}
    tombstoned = {p for r in base.manifest.tombstones if r.path not in known for p in r.files}
    for cond in conditions:
        bound = _condition_filter(cond, schema.to_arrow())
        # Only files whose statistics might match matter, and every such file lies
        # in a segment block whose summary might match: both versions are read
        # through the pruned path (all of them when the condition bounds nothing).
        matcher = None if bound is None else summary_matcher(bound, schema=schema)
        before = {f.path: f for f in io.pruned_files(read, matcher)}
        after = {f.path: f for f in io.pruned_files(base, matcher)}
        # (file, the manifest whose entry it is: names bad statistics)
        changed = ([(f, base.key) for p, f in after.items() if p not in before or p in tombstoned]
                   + [(f, read.key) for p, f in before.items() if p not in after])
        for f, key in changed:
            if bound is None:
                return f"{f.path} changed"
            fields = [fld for fld in schema.fields if fld.name in bound.columns]
            if might_match(bound, data_file_stats(f, fields, key=key), f.row_count):
                return f"{f.path}, which may hold rows matching {cond.describe()}, changed"
    return None


def check_where(where: object) -> str | Expr:
    if not isinstance(where, str | Expr):
        raise InvalidArgument(f"where must be a SQL string or an expression, not "
                              f"{type(where).__name__}")
    return where
