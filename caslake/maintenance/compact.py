"""Compaction: rewrite small files and files with many deleted rows into new files.

Rules (docs/protocol.md, "Compaction"):

* **What is picked.** Live files smaller than half the target file size, and
  files at least ``deleted_fraction`` of whose rows tombstones delete.  A single
  small file with no deletes is left alone (rewriting it gains nothing).  Files
  whose rows are all deleted are dropped without being read.
* **What is written.** The picked files' live rows, read at one pinned version
  (tombstones applied), written as new files of the target size.
* **The commit.** One ``compact`` version that removes the picked files (and with
  them their tombstone references) and adds the new files: the same rows,
  fewer files, no tombstones.  The live row count is checked before committing.
* **Concurrency.** On a rebase the commit is valid only if no picked file was
  removed or got a new tombstone since the version it was read at; otherwise the
  compaction is planned again from the new version (a concurrent delete is never
  lost and a deleted row never comes back), at most ``max_replans`` times.
  Deletes planned before a compaction that land after it re-plan on the new
  files, as they do after any commit that removes files.

The files it replaced become garbage once their versions expire (``gc``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from caslake.errors import CommitConflict, CorruptMetadata, InvalidArgument
from caslake.format.manifest import DataFile
from caslake.table.changes import Changes
from caslake.table.commit import commit_with_retry
from caslake.table.delete import touched_since
from caslake.table.history import commit_counts
from caslake.table.metadata_io import Snapshot
from caslake.table.scan import Scan
from caslake.table.write import write_data_files

if TYPE_CHECKING:
    from caslake.table.table import CommitResult, Table

COMPACT = "compact"


@dataclass(frozen=True)
class CompactionPlan:
    base: Snapshot
    rewrite: tuple[DataFile, ...]  # read, and their live rows written anew
    drop: tuple[DataFile, ...]  # every row deleted: removed without reading
    live_rows: int  # rows the new files must hold

    @property
    def removed(self) -> tuple[DataFile, ...]:
        return self.rewrite + self.drop


def plan_compaction(table: Table, base: Snapshot, *, target_file_size: int,
                    deleted_fraction: float) -> CompactionPlan | None:
    deleted: dict[str, int] = {}
    for ref in base.manifest.tombstones:
        for path, n in ref.files.items():
            deleted[path] = deleted.get(path, 0) + n
    small, dirty, drop = [], [], []
    for f in table.io.live_files(base):
        gone = deleted.get(f.path, 0)
        if gone >= f.row_count:
            drop.append(f)
        elif f.row_count and gone / f.row_count >= deleted_fraction:
            dirty.append(f)
        elif f.size < target_file_size // 2:
            small.append(f)
    if len(small) < 2 and not dirty:
        small = []
    rewrite = tuple(small + dirty)
    if not rewrite and not drop:
        return None
    live = sum(f.row_count - deleted.get(f.path, 0) for f in rewrite)
    return CompactionPlan(base, rewrite, tuple(drop), live)


def compact(table: Table, *, target_file_size: int | None = None,
            deleted_fraction: float = 0.1, max_replans: int = 3) -> CommitResult:
    """Rewrite small and mostly-deleted files of ``table`` in one commit (see module doc).
    Returns a no-op result when there is nothing worth rewriting."""
    from caslake.table.table import CommitResult

    target = target_file_size or table.write_options.target_file_size
    if target <= 0 or not 0 < deleted_fraction <= 1 or max_replans < 0:
        raise InvalidArgument("compact needs target_file_size > 0, 0 < deleted_fraction <= 1 "
                              "and max_replans >= 0")
    before = table.store.counters.snapshot()
    replans = 0  # rounds lost to a concurrent change of a picked file (each >= 1 attempt)
    for attempt in range(max_replans + 1):
        base = table.io.latest()
        plan = plan_compaction(table, base, target_file_size=target,
                               deleted_fraction=deleted_fraction)
        if plan is None:
            table._set_snapshot(base)
            return CommitResult(base.version, base.manifest.commit_id, COMPACT, 0, noop=True)
        new_files = _rewrite(table, plan, target)
        try:
            outcome = commit_with_retry(table.io, _prepare(table, plan, new_files),
                                        policy=table.commit_policy)
        except CommitConflict:
            if attempt == max_replans:
                raise
            replans += 1
            continue  # a picked file changed: plan again from the new version
        table._set_snapshot(outcome.snapshot)
        after = table.store.counters.snapshot()
        return CommitResult(
            version=outcome.snapshot.version, commit_id=outcome.commit_id, operation=COMPACT,
            attempts=outcome.attempts + replans, noop=outcome.noop,
            **({} if outcome.noop else commit_counts(outcome.snapshot.manifest)),
            requests={k: after.get(k, 0) - before.get(k, 0) for k in after})
    raise AssertionError("unreachable")  # pragma: no cover


def _rewrite(table: Table, plan: CompactionPlan, target: int) -> tuple[DataFile, ...]:
    if not plan.rewrite:
        return ()
    scan = Scan(table.io, table.footers, plan.base, None, None, table.tombstones,
                only_files=[f.path for f in plan.rewrite])
    options = table.write_options
    if options.target_file_size != target:
        options = replace(options, target_file_size=target)
    files = write_data_files(table.store, scan.to_reader(), plan.base.manifest.schema, options)
    rows = sum(f.row_count for f in files)
    if rows != plan.live_rows:
        raise CorruptMetadata(plan.base.key, f"compaction read {rows} live rows from "
                              f"{len(plan.rewrite)} files; the tombstones say {plan.live_rows}")
    return tuple(files)


def _prepare(table: Table, plan: CompactionPlan, new_files: tuple[DataFile, ...]
             ) -> Callable[[Snapshot], Changes | None]:
    paths = {f.path for f in plan.removed}

    def prepare(base: Snapshot) -> Changes | None:
        if touched_since(table.io, plan.base, base, paths):
            raise CommitConflict("a file being compacted was changed by a concurrent commit",
                                 help="run compact again")
        return Changes(COMPACT, add_files=new_files, remove_files=plan.removed,
                       params={"files_rewritten": str(len(plan.rewrite)),
                               "files_dropped": str(len(plan.drop))})

    return prepare
