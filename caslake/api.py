"""The public table facade: ``caslake.Table``, ``create_table``, ``open_table``.

:class:`Table` is the table layer's :class:`~caslake.table.table.TableCore`
(reads, writes, deletes, transactions, history) plus the maintenance
operations, which live one layer up (``caslake.maintenance``) and see only
the handle's :class:`~caslake.table.runner.TableContext`.  Keeping these two
methods here is what lets ``table/`` never import ``maintenance/``
(docs/architecture.md).

This module owns no logic of its own: every method is a call into the layer
that owns it.  Nothing below it imports it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from caslake.expr import Expr
from caslake.store.options import StorageOptions
from caslake.table.metadata_io import Snapshot
from caslake.table.runner import CommitResult, TableContext
from caslake.table.table import HistoryEntry, TableCore
from caslake.table.write import WriteOptions

if TYPE_CHECKING:
    from caslake.export.result import ExportResult
    from caslake.maintenance.gc import GcReport
    from caslake.maintenance.purge import Progress, PurgeReport

# ``caslake.export`` and ``caslake.maintenance`` are imported by the methods that
# use them: ``import caslake`` and a scan never load them (tests/test_import_cost.py).
EXPORT_PROPERTY_PREFIX = "export."


def _export_on_commit(ctx: TableContext, snapshot: Snapshot) -> None:
    """The ``export.*`` table properties' export of a commit (export loaded only
    when the table has such a property)."""
    if any(k.startswith(EXPORT_PROPERTY_PREFIX) for k in snapshot.manifest.properties):
        from caslake.export.hook import export_on_commit

        export_on_commit(ctx, snapshot)


class Table(TableCore):
    """A handle on a table: see :class:`~caslake.table.table.TableCore` for reads,
    writes, deletes, upserts and transactions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # ``export.iceberg`` / ``export.delta`` table properties: export each commit.
        ctx = self.context
        def export_on_commit(snapshot: Snapshot) -> None:  # the name the runner logs
            _export_on_commit(ctx, snapshot)

        ctx.on_commit.append(export_on_commit)

    def compact(self, *, target_file_size: int | None = None, deleted_fraction: float = 0.1
                ) -> CommitResult:
        """Rewrite small files, and files ``deleted_fraction`` or more of whose rows are
        deleted, into new files in one commit (see :mod:`caslake.maintenance.compact`)."""
        from caslake.maintenance.compact import compact

        return compact(self.context, target_file_size=target_file_size,
                       deleted_fraction=deleted_fraction)

    def purge(self, where: str | Expr, *, dry_run: bool = False, expire: bool = False,
              progress: Progress | None = None, audit_key: bytes | None = None
              ) -> PurgeReport:
        """Physically erase the rows ``where`` matches, by row-group splice, in one
        version (see :mod:`caslake.maintenance.purge`)."""
        from caslake.export.erase import describe_erasure, erase_export_history
        from caslake.export.roots import export_roots
        from caslake.maintenance.purge import purge

        ctx = self.context

        def erase_exports(dry: bool) -> list[str]:
            # the exports' erasure: rewritten to the purge's version, older objects gone
            return describe_erasure(ctx.store) if dry else erase_export_history(ctx)

        return purge(ctx, where, dry_run=dry_run, expire=expire, progress=progress,
                     audit_key=audit_key, extra_roots=(export_roots,),
                     erase_exports=erase_exports)

    def gc(self, *, retention: timedelta | None = None, dry_run: bool = False,
           now: datetime | None = None, force: bool = False) -> GcReport:
        """Expire versions older than ``retention`` and delete the objects no retained
        version references (see :mod:`caslake.maintenance.gc`)."""
        from caslake.export.roots import export_roots
        from caslake.maintenance.gc import collect_garbage

        return collect_garbage(self.context, retention=retention, dry_run=dry_run, now=now,
                               force=force, extra_roots=(export_roots,))

    def export_iceberg(self, version: int | None = None, out: str | None = None,
                       storage_options: StorageOptions | None = None) -> ExportResult:
        """Write Iceberg v2 metadata for ``version`` (latest if None) under
        ``<out or the table root>/metadata/`` (see :mod:`caslake.export.iceberg`)."""
        from caslake.export.iceberg import export_iceberg

        return export_iceberg(self.context, version, out, storage_options)

    def export_delta(self, version: int | None = None) -> ExportResult:
        """Append a Delta commit to ``_delta_log/`` showing ``version`` (latest if None;
        see :mod:`caslake.export.delta`)."""
        from caslake.export.delta import export_delta

        return export_delta(self.context, version)

    def drop_export(self, format: str, *, out: str | None = None,
                    storage_options: StorageOptions | None = None) -> int:
        """Delete the ``format`` ("iceberg" or "delta") export at the table root (or an
        Iceberg export at ``out``): every object of it.  Refused with
        ExportOnCommitEnabled while the table property ``export.<format>`` is true;
        returns the number of objects deleted (0: none; see
        :mod:`caslake.export.erase`)."""
        from caslake.export.erase import drop_export

        return drop_export(self.context, format, out=out, storage_options=storage_options)


def create_table(uri: str, schema: pa.Schema, *, storage_options: StorageOptions | None = None,
                 properties: dict[str, str] | None = None,
                 write_options: WriteOptions | None = None) -> Table:
    """Create an empty table (version 0).  Raises TableAlreadyExists."""
    return Table.create(uri, schema, storage_options=storage_options, properties=properties,
                        write_options=write_options)


def clone(source_uri: str, target_uri: str, *, version: int | None = None,
          tag: str | None = None, branch: str = "main",
          storage_options: StorageOptions | None = None,
          write_options: WriteOptions | None = None) -> Table:
    """A zero-copy clone of ``source_uri`` (at ``version``, tag ``tag`` or the head of
    ``branch``) at ``target_uri``: it references the source's files where they lie
    (held by a record under the source, so the source's gc keeps them); new writes
    go to the target.  Released by :func:`drop_table`, or by the clone's gc once
    nothing the clone retains references the source (e.g. after compaction)."""
    from caslake.table.clone import clone as _clone

    _clone(source_uri, target_uri, version=version, tag=tag, branch=branch,
           storage_options=storage_options)
    return open_table(target_uri, storage_options=storage_options, write_options=write_options)


def drop_table(uri: str, *, storage_options: StorageOptions | None = None) -> None:
    """Delete the table at ``uri`` (every object) and release its holds on the tables
    it was cloned from.  Idempotent."""
    from caslake.table.clone import drop_table as _drop

    _drop(uri, storage_options=storage_options)


def open_table(uri: str, *, storage_options: StorageOptions | None = None,
               write_options: WriteOptions | None = None) -> Table:
    """Open an existing table at its latest version.  Raises TableNotFound."""
    return Table.open(uri, storage_options=storage_options, write_options=write_options)


__all__ = ["CommitResult", "HistoryEntry", "Table", "clone", "create_table", "drop_table",
           "open_table"]
