"""Compaction: rewrite small files and files with many deleted rows into new files.

Rules (docs/protocol.md, "Compaction"):

* **What is picked.** Live files smaller than half the target file size, and
  files at least ``deleted_fraction`` of whose rows tombstones delete.  A single
  small file with no deletes is left alone (rewriting it gains nothing).  Files
  whose rows are all deleted are dropped without being read.
* **Partitions.** Files are picked and rewritten per partition: the live files
  are grouped by their partition (spec id and values), the rules above apply
  within each group, and each group's rows are written to files of their own
  carrying that partition, so a compacted file never spans partitions and keeps
  pruning.  Files without a recorded partition form one group, written with the
  table's default spec (split by partition, as an append is).
* **What is written.** The picked files' live rows, read at one pinned version
  (tombstones applied), written as new files of the target size.
* **The commit.** One ``compact`` version that removes the picked files (and with
  them their tombstone references) and adds the new files: the same rows,
  fewer files, no tombstones.  The live row count is checked before committing.
* **Concurrency.** The commit requires that no picked file was removed or got a
  new tombstone since the version it was read at (``FilesUntouchedSince``); when
  that fails (:class:`ConcurrentModification`) the compaction is planned again
  from the new version (a concurrent delete is never lost and a deleted row never
  comes back), at most ``max_replans`` times.  Any other conflict -- a retry
  budget that ran out -- is raised as is: planning again would not help.
  Deletes planned before a compaction that land after it re-plan on the new
  files, as they do after any commit that removes files.

* **Clustering** (``sort_by`` / ``zorder_by``, or the ``clustering.columns``
  table property): per partition, the files whose key boxes overlap another
  file's, and the mostly-deleted ones, are read together, ordered and cut into
  files whose boxes are disjoint (:mod:`caslake.ops.cluster`); files already in
  order are left alone, and small files in order are not merged (a plain
  compaction of a table without the property merges them).  Should the cut
  files overlap a file left alone, that file joins the rewrite.  The rows
  rewritten in one partition are held in memory while they are ordered.

The files it replaced become garbage once their versions expire (``gc``).
Works on a :class:`TableContext`, never on the ``Table`` facade; commits only
through :func:`caslake.core.runner.run_operation`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from caslake.core import (
    COMPACT,
    Changes,
    CommitResult,
    FilesUntouchedSince,
    Scan,
    Snapshot,
    SnapshotSubset,
    TableContext,
    WriteOptions,
    noop_result,
    run_operation,
)
from caslake.errors import ConcurrentModification, CorruptMetadata, InvalidArgument
from caslake.format.manifest import DataFile
from caslake.format.partition import FilePartition, write_spec
from caslake.format.properties import SORT, ZORDER, Clustering, clustering_policy
from caslake.ops.cluster import (
    Box,
    ClusterColumn,
    cluster_fields,
    cluster_pieces,
    file_box,
    out_of_order,
    overlaps,
    table_box,
)
from caslake.ops.write import write_data_files

Group = tuple[FilePartition | None, tuple[DataFile, ...]]


@dataclass(frozen=True)
class ClusterOrder:
    """A clustering compaction's order: the clustering and the columns it names."""

    clustering: Clustering
    columns: tuple[ClusterColumn, ...]


@dataclass(frozen=True)
class CompactionPlan:
    base: Snapshot
    groups: tuple[Group, ...]  # per partition (None: not recorded) the files to rewrite
    drop: tuple[DataFile, ...]  # every row deleted: removed without reading
    live_rows: int  # rows the new files must hold
    order: ClusterOrder | None = None
    # Clustering: per partition the files left alone, with their boxes.
    kept: dict[FilePartition | None, list[tuple[DataFile, Box]]] = field(
        default_factory=dict)

    @property
    def rewrite(self) -> tuple[DataFile, ...]:
        """Every file read, and its live rows written anew."""
        return tuple(f for _, files in self.groups for f in files)

    @property
    def removed(self) -> tuple[DataFile, ...]:
        return self.rewrite + self.drop


def plan_compaction(ctx: TableContext, base: Snapshot, *, target_file_size: int,
                    deleted_fraction: float, order: ClusterOrder | None = None
                    ) -> CompactionPlan | None:
    if order is not None:
        return plan_clustering(ctx, base, deleted_fraction=deleted_fraction, order=order)
    deleted = base.manifest.deleted_rows_per_file()
    picks: dict[FilePartition | None, tuple[list[DataFile], list[DataFile]]] = {}
    drop = []
    for f in ctx.io.iter_live_files(base):
        gone = deleted.get(f.path, 0)
        small, dirty = picks.setdefault(f.partition, ([], []))
        if gone >= f.row_count:
            drop.append(f)
        elif f.row_count and gone / f.row_count >= deleted_fraction:
            dirty.append(f)
        elif f.size < target_file_size // 2:
            small.append(f)
    # Within a partition, one small file with no dirty file is left alone.
    groups = tuple((part, tuple(small + dirty) if len(small) >= 2 or dirty else ())
                   for part, (small, dirty) in picks.items())
    groups = tuple(g for g in groups if g[1])
    if not groups and not drop:
        return None
    live = sum(f.row_count - deleted.get(f.path, 0) for _, files in groups for f in files)
    return CompactionPlan(base, groups, tuple(drop), live)


def plan_clustering(ctx: TableContext, base: Snapshot, *, deleted_fraction: float,
                    order: ClusterOrder) -> CompactionPlan | None:
    """Per partition, the files out of key order or mostly deleted (see the module
    doc), and the files left alone with their boxes."""
    deleted = base.manifest.deleted_rows_per_file()
    schema = base.manifest.schema
    parts: dict[FilePartition | None, list[tuple[DataFile, Box]]] = {}
    drop = []
    for f in ctx.io.iter_live_files(base):
        gone = deleted.get(f.path, 0)
        if gone >= f.row_count:
            drop.append(f)
        else:
            parts.setdefault(f.partition, []).append(
                (f, file_box(f, order.columns, schema, base.key)))
    groups: list[Group] = []
    kept: dict[FilePartition | None, list[tuple[DataFile, Box]]] = {}
    for part, entries in parts.items():
        picked = out_of_order([box for _, box in entries])
        picked.update(i for i, (f, _) in enumerate(entries)
                      if deleted.get(f.path, 0) / f.row_count >= deleted_fraction)
        kept[part] = [e for i, e in enumerate(entries) if i not in picked]
        if picked:
            groups.append((part, tuple(entries[i][0] for i in sorted(picked))))
    if not groups and not drop:
        return None
    live = sum(f.row_count - deleted.get(f.path, 0) for _, files in groups for f in files)
    return CompactionPlan(base, tuple(groups), tuple(drop), live, order, kept)


def cluster_order(ctx: TableContext, base: Snapshot, sort_by: Sequence[str] | None,
                  zorder_by: Sequence[str] | None) -> ClusterOrder | None:
    """The clustering a compaction applies: ``sort_by`` or ``zorder_by``, else the
    table's ``clustering.columns`` property, else none."""
    if sort_by is not None and zorder_by is not None:
        raise InvalidArgument("compact takes sort_by or zorder_by, not both")
    clustering: Clustering | None
    if sort_by is not None or zorder_by is not None:
        kind, cols = (SORT, sort_by) if sort_by is not None else (ZORDER, zorder_by)
        if isinstance(cols, str) or not isinstance(cols, Sequence):
            raise InvalidArgument(f"{kind}_by needs a list of column names, not {cols!r}")
        clustering = Clustering(kind, tuple(cols))
    else:
        clustering = clustering_policy(base.manifest.properties)
    if clustering is None:
        return None
    columns = tuple(cluster_fields(base.manifest.schema, clustering))
    # recorded (and compared) by the names the schema gives them
    return ClusterOrder(Clustering(clustering.kind, tuple(c.name for c in columns)), columns)


def compact(ctx: TableContext, *, target_file_size: int | None = None,
            deleted_fraction: float = 0.1, max_replans: int = 3,
            sort_by: Sequence[str] | None = None,
            zorder_by: Sequence[str] | None = None) -> CommitResult:
    """Rewrite small and mostly-deleted files of the table in one commit, or with a
    clustering (``sort_by``, ``zorder_by`` or the ``clustering.columns`` property)
    the files out of key order (see module doc).  Returns a no-op result when
    there is nothing worth rewriting."""
    target = target_file_size or ctx.write_options.target_file_size
    if target <= 0 or not 0 < deleted_fraction <= 1 or max_replans < 0:
        raise InvalidArgument("compact needs target_file_size > 0, 0 < deleted_fraction <= 1 "
                              "and max_replans >= 0")
    started = ctx.meter()
    spent = 0  # commit attempts of rounds lost to a concurrent change of a picked file
    for attempt in range(max_replans + 1):
        base = ctx.refresh()
        order = cluster_order(ctx, base, sort_by, zorder_by)
        plan = plan_compaction(ctx, base, target_file_size=target,
                               deleted_fraction=deleted_fraction, order=order)
        if plan is None:
            return noop_result(ctx, COMPACT, base, started=started, attempts=spent)
        plan, new_files = _rewrite(ctx, plan, target)
        untouched = FilesUntouchedSince(plan.base, frozenset(f.path for f in plan.removed),
                                        COMPACT)
        try:
            result = run_operation(ctx, COMPACT, _prepare(plan, new_files),
                                   requirements=(untouched,), started=started)
        except ConcurrentModification as e:
            if attempt == max_replans:
                raise
            spent += e.attempts
            continue  # a picked file changed: plan again from the new version
        # The summary counts the rewritten rows as deleted with their old files; they
        # are all in the new files, so compaction reports no row deleted.
        return replace(result, attempts=result.attempts + spent, rows_deleted=0)
    raise AssertionError("unreachable")  # pragma: no cover


def _rewrite(ctx: TableContext, plan: CompactionPlan, target: int
             ) -> tuple[CompactionPlan, tuple[DataFile, ...]]:
    """The new files, and the plan as carried out (a clustering may pull in files
    it first left alone)."""
    options = ctx.write_options
    if options.target_file_size != target:
        options = replace(options, target_file_size=target)
    files: list[DataFile] = []
    groups: list[Group] = []
    for part, group in plan.groups:
        if plan.order is None:
            files.extend(_rewrite_group(ctx, plan.base, part, group, options))
        else:
            group, written = _cluster_group(ctx, plan, part, group, options)
            files.extend(written)
        groups.append((part, group))
    if plan.order is not None:
        deleted = plan.base.manifest.deleted_rows_per_file()
        plan = replace(plan, groups=tuple(groups), live_rows=sum(
            f.row_count - deleted.get(f.path, 0) for _, fs in groups for f in fs))
    rows = sum(f.row_count for f in files)
    if rows != plan.live_rows:
        raise CorruptMetadata(plan.base.key, f"compaction read {rows} live rows from "
                              f"{len(plan.rewrite)} files; the tombstones say {plan.live_rows}")
    return plan, tuple(files)


def _cluster_group(ctx: TableContext, plan: CompactionPlan, part: FilePartition | None,
                   group: tuple[DataFile, ...], options: WriteOptions
                   ) -> tuple[tuple[DataFile, ...], list[DataFile]]:
    """The live rows of ``group`` (files of one partition) in clustering order, cut
    into files whose boxes are disjoint; files left alone whose boxes the cut
    pieces overlap join the group first.  Returns the files read and written."""
    order = plan.order
    assert order is not None
    columns = order.columns
    kept = list(plan.kept.get(part, []))
    rows = _live_rows(ctx, plan.base, group)
    while True:
        stored = sum(f.size for f in group)
        per_file = max(1, options.target_file_size * sum(f.row_count for f in group)
                       // max(1, stored))
        pieces = cluster_pieces(rows, order.clustering, columns, per_file)
        boxes = [table_box(p, columns) for p in pieces]
        joining = [f for f, box in kept if any(overlaps(box, b) for b in boxes)]
        if not joining:
            break
        group = group + tuple(joining)
        kept = [(f, box) for f, box in kept if f not in joining]
        rows = pa.concat_tables([rows, _live_rows(ctx, plan.base, tuple(joining))])
    schema = plan.base.manifest.schema
    spec = write_spec(plan.base.manifest.partitioning) if part is None else None
    written: list[DataFile] = []
    for piece in pieces:
        new = write_data_files(ctx.store, piece.to_batches(), schema, options, spec=spec)
        written.extend(new if part is None else [replace(f, partition=part) for f in new])
    return group, written


def _live_rows(ctx: TableContext, base: Snapshot, files: tuple[DataFile, ...]) -> pa.Table:
    """Every live row of ``files`` (tombstones applied), read at ``base``."""
    return Scan(ctx.io, ctx.footers, SnapshotSubset.of(base, files), None, None,
                ctx.tombstones).to_arrow()


def _rewrite_group(ctx: TableContext, base: Snapshot, part: FilePartition | None,
                   group: tuple[DataFile, ...], options: WriteOptions) -> list[DataFile]:
    """The live rows of files of one partition, as new files of that partition.  Their
    rows all had the partition's values, so the new files carry it as is (even when a
    spec that is no longer the default names a dropped column); files without one are
    split by the default spec."""
    scan = Scan(ctx.io, ctx.footers, SnapshotSubset.of(base, group), None, None,
                ctx.tombstones)
    schema = base.manifest.schema
    if part is None:
        return write_data_files(ctx.store, scan.to_reader(), schema, options,
                                spec=write_spec(base.manifest.partitioning))
    return [replace(f, partition=part)
            for f in write_data_files(ctx.store, scan.to_reader(), schema, options)]


def _prepare(plan: CompactionPlan, new_files: tuple[DataFile, ...]
             ) -> Callable[[Snapshot], Changes | None]:
    params = {"files_rewritten": str(len(plan.rewrite)), "files_dropped": str(len(plan.drop))}
    if plan.order is not None:
        params["clustering"] = plan.order.clustering.to_property()

    def prepare(base: Snapshot) -> Changes | None:
        # A clustering also rewrites the segments holding the files it removed, so
        # their summaries no longer span the old files' key ranges.
        return Changes(COMPACT, add_files=new_files, remove_files=plan.removed, params=params,
                       fold_segments=plan.order is not None)

    return prepare
