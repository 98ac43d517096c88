"""What conflicts with what: the metadata-only checks a commit's requirements run
against the commits that landed since the change was computed.

* :func:`touched_since`: did a delete's planned files get removed or newly
  tombstoned (the delete must re-plan)?
* :func:`changed_since`: did any file whose statistics may hold a row a
  condition matches change (a serializable delete or upsert must fail)?

Conditions (:class:`PredicateCondition`, :class:`KeyCondition`) are plain
values; the checks read only manifests and segment summaries, never data.
(Before, these lived in the delete operation, so the requirements stood on it.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.core.read.scan import leaf_stats, predicate_leaves, summary_matcher
from caslake.expr import And, BoundExpr, Expr, col, compile_where, might_match


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


def key_scan_where(keys: pa.Table) -> Expr | None:
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


def _condition_filter(cond: Condition, schema: pa.Schema) -> BoundExpr | None:
    """A sound file filter for the rows a condition can match (None: any row)."""
    if isinstance(cond, PredicateCondition):
        return compile_where(cond.where, schema)
    return compile_where(key_scan_where(cond.keys), schema)


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
            stats = leaf_stats(f.stats, predicate_leaves(bound, schema), key=key, path=f.path)
            if might_match(bound, stats, f.row_count):
                return f"{f.path}, which may hold rows matching {cond.describe()}, changed"
    return None
