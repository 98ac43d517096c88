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

The files it replaced become garbage once their versions expire (``gc``).
Works on a :class:`TableContext`, never on the ``Table`` facade; commits only
through :func:`caslake.core.runner.run_operation`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

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
from caslake.ops.write import write_data_files

Group = tuple[FilePartition | None, tuple[DataFile, ...]]


@dataclass(frozen=True)
class CompactionPlan:
    base: Snapshot
    groups: tuple[Group, ...]  # per partition (None: not recorded) the files to rewrite
    drop: tuple[DataFile, ...]  # every row deleted: removed without reading
    live_rows: int  # rows the new files must hold

    @property
    def rewrite(self) -> tuple[DataFile, ...]:
        """Every file read, and its live rows written anew."""
        return tuple(f for _, files in self.groups for f in files)

    @property
    def removed(self) -> tuple[DataFile, ...]:
        return self.rewrite + self.drop


def plan_compaction(ctx: TableContext, base: Snapshot, *, target_file_size: int,
                    deleted_fraction: float) -> CompactionPlan | None:
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


def compact(ctx: TableContext, *, target_file_size: int | None = None,
            deleted_fraction: float = 0.1, max_replans: int = 3) -> CommitResult:
    """Rewrite small and mostly-deleted files of the table in one commit (see module
    doc).  Returns a no-op result when there is nothing worth rewriting."""
    target = target_file_size or ctx.write_options.target_file_size
    if target <= 0 or not 0 < deleted_fraction <= 1 or max_replans < 0:
        raise InvalidArgument("compact needs target_file_size > 0, 0 < deleted_fraction <= 1 "
                              "and max_replans >= 0")
    started = ctx.meter()
    spent = 0  # commit attempts of rounds lost to a concurrent change of a picked file
    for attempt in range(max_replans + 1):
        base = ctx.refresh()
        plan = plan_compaction(ctx, base, target_file_size=target,
                               deleted_fraction=deleted_fraction)
        if plan is None:
            return noop_result(ctx, COMPACT, base, started=started, attempts=spent)
        new_files = _rewrite(ctx, plan, target)
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


def _rewrite(ctx: TableContext, plan: CompactionPlan, target: int) -> tuple[DataFile, ...]:
    options = ctx.write_options
    if options.target_file_size != target:
        options = replace(options, target_file_size=target)
    files: list[DataFile] = []
    for part, group in plan.groups:
        files.extend(_rewrite_group(ctx, plan.base, part, group, options))
    rows = sum(f.row_count for f in files)
    if rows != plan.live_rows:
        raise CorruptMetadata(plan.base.key, f"compaction read {rows} live rows from "
                              f"{len(plan.rewrite)} files; the tombstones say {plan.live_rows}")
    return tuple(files)


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
    def prepare(base: Snapshot) -> Changes | None:
        return Changes(COMPACT, add_files=new_files, remove_files=plan.removed,
                       params={"files_rewritten": str(len(plan.rewrite)),
                               "files_dropped": str(len(plan.drop))})

    return prepare
