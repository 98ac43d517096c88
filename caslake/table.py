"""The public facade: :class:`Table`, ``create_table``, ``open_table``, ``clone``, ``drop_table``.

A handle is on a table URI (and a branch: ``main`` unless bound with
:meth:`Table.branch`).  ``version`` and ``schema`` describe the snapshot the
handle last saw (after its own commits, scans or ``refresh()``); every
operation reads the pointer afresh, so writers always commit on top of the
latest version and a plain ``scan()`` reads the latest.

This module owns no logic of its own: every method is a call into the layer
that owns it -- reads into the core's read path (:mod:`caslake.core`), writes,
refs, clones and maintenance into one module each of :mod:`caslake.ops`
(maintenance and export loaded only when used), every commit through the one
runner (:func:`caslake.core.run_operation`).  Nothing in the library below it
imports it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Self, overload

import pyarrow as pa

from caslake.core import (
    ArrowExport,
    Changes,
    CommitPolicy,
    CommitResult,
    FooterCache,
    GroupWrite,
    HistoryEntry,
    MetadataIO,
    Scan,
    Snapshot,
    TableContext,
    TombstoneCache,
    WriteOptions,
    adopt_ref_move,
    as_reader,
    check_txn,
    complete_summary,
    create_record,
    live_file_list,
    noop_result,
    put_new,
    pyarrow_dataset,
    run_operation,
    txn_applied,
    write_prepare,
    write_requirements,
)
from caslake.errors import (
    InvalidArgument,
    RefNotFound,
    StoreError,
    TableAlreadyExists,
    TableNotFound,
)
from caslake.expr import Expr
from caslake.format import BASE_FORMAT_VERSION, PARTITION_FORMAT_VERSION, TYPES_FORMAT_VERSION
from caslake.format.keys import POINTER_KEY, manifest_key, new_token
from caslake.format.manifest import Manifest, Pointer, format_ts
from caslake.format.properties import clustering_policy, group_commit, retention_policy
from caslake.format.refs import BRANCH_PREFIX, MAIN, branch_key, name_from_key, validate_ref_name
from caslake.format.schema import TableSchema
from caslake.ops import refs
from caslake.ops.clone import with_externals
from caslake.ops.cluster import cluster_fields
from caslake.ops.partition import (
    create_partitioning,
    default_spec,
    overwrite_where,
    update_spec,
)
from caslake.ops.schema import SchemaUpdate, align_input, with_schema
from caslake.ops.transaction import Transaction
from caslake.ops.write import write_data_files
from caslake.store import open_store
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions

if TYPE_CHECKING:
    from caslake.export.result import ExportResult
    from caslake.ops.change_feed import ChangeScan
    from caslake.ops.gc import GcReport
    from caslake.ops.merge import MergeBuilder
    from caslake.ops.purge import Progress, PurgeReport
    from caslake.ops.report import Health

def _ts_to_ms(as_of: datetime | str | int | float) -> int:
    if isinstance(as_of, int | float) and not isinstance(as_of, bool):
        return int(as_of)
    if isinstance(as_of, str):
        try:
            as_of = datetime.fromisoformat(as_of)
        except ValueError:
            raise InvalidArgument(f"as_of {as_of!r} is not an ISO-8601 timestamp") from None
    if isinstance(as_of, datetime):
        if as_of.tzinfo is None:
            as_of = as_of.replace(tzinfo=UTC)
        return int(as_of.timestamp() * 1000)
    raise InvalidArgument(f"as_of must be a datetime, ISO string or epoch ms, not {as_of!r}")


# use them: ``import caslake`` and a scan never load them (tests/test_import_cost.py).
EXPORT_PROPERTY_PREFIX = "export."


def _export_on_commit(ctx: TableContext, snapshot: Snapshot) -> None:
    """The ``export.*`` table properties' export of a commit (export loaded only
    when the table has such a property)."""
    if any(k.startswith(EXPORT_PROPERTY_PREFIX) for k in snapshot.manifest.properties):
        from caslake.export.hook import export_on_commit

        export_on_commit(ctx, snapshot)



class Table(ArrowExport):
    """``pa.table(t)``, ``duckdb.sql('select ... from t')``, ``pl.DataFrame(t)``,
    ``t.to_pandas()`` and ``t.to_polars()`` read the latest version (see
    :mod:`caslake.core.read.interop`).

    Examples:
        >>> import caslake, pyarrow as pa
        >>> schema = pa.schema([('id', pa.int64()), ('city', pa.string())])
        >>> t = caslake.create_table('memory://', schema)
        >>> _ = t.append(pa.table({'id': [1, 2, 3], 'city': ['Oslo', 'Lima', 'Pune']}))
        >>> t.version, t.scan(where="city = 'Lima'").to_arrow().num_rows
        (1, 1)

        The examples of the methods below start from this ``t``.
    """

    def __init__(self, store: ObjectStore, snapshot: Snapshot, *,
                 write_options: WriteOptions | None = None,
                 commit_policy: CommitPolicy | None = None, io: MetadataIO | None = None,
                 pointer_key: str = POINTER_KEY) -> None:
        self._context = ctx = TableContext(store, snapshot, io=io, write_options=write_options,
                                           commit_policy=commit_policy, pointer_key=pointer_key)

        # ``export.iceberg`` / ``export.delta`` table properties: export each commit.
        def export_on_commit(snapshot: Snapshot) -> None:  # the name the runner logs
            _export_on_commit(ctx, snapshot)

        ctx.on_commit.append(export_on_commit)

    @classmethod
    def load(cls, store: ObjectStore, *, pointer_key: str = POINTER_KEY,
             **kwargs: Any) -> Self:
        """Open the table that lives in ``store`` (any ObjectStore, e.g. a wrapped one),
        at the latest version of the ref whose pointer is ``pointer_key``.

        Examples:
            >>> caslake.Table.load(t.store).version
            1
        """
        io = MetadataIO(store, pointer_key=pointer_key)
        return cls(store, io.latest(), io=io, pointer_key=pointer_key, **kwargs)

    @classmethod
    def open(cls, uri: str, *, storage_options: StorageOptions | None = None,
             write_options: WriteOptions | None = None) -> Self:
        """Open an existing table at its latest version.  Raises TableNotFound.  A
        clone's store also reads the objects it references in its source.

        Examples:
            >>> caslake.Table.open('/data/events').version  # doctest: +SKIP
            12
        """
        store = open_store(uri, storage_options)
        head = MetadataIO(store).latest()
        return cls.load(with_externals(store, head.manifest, storage_options),
                        write_options=write_options)

    @classmethod
    def create(cls, uri: str, schema: pa.Schema, *,
               storage_options: StorageOptions | None = None,
               properties: dict[str, str] | None = None,
               write_options: WriteOptions | None = None,
               partition_by: Sequence[str] | None = None) -> Self:
        """Create an empty table (version 0).  Raises TableAlreadyExists.
        ``partition_by``: a partition spec (see :func:`create_table`).

        Examples:
            >>> caslake.Table.create('memory://', pa.schema([('id', pa.int64())])).version
            0
        """
        store = open_store(uri, storage_options)
        return cls(store, _create(store, schema, properties, partition_by=partition_by),
                   write_options=write_options)

    def _handle_for(self, pointer_key: str, snapshot: Snapshot) -> Self:
        return type(self)(self.store, snapshot, write_options=self.write_options,
                          commit_policy=self.commit_policy, pointer_key=pointer_key)

    # --- state ---------------------------------------------------------------------
    # The handle's context and caches are read-only from outside: operations get the
    # context (``table.context``); only the runner moves its snapshot.

    @property
    def context(self) -> TableContext:
        """The handle's :class:`~caslake.core.TableContext` (store, metadata IO, caches,
        options, clock), as the operations below the facade see it.

        Examples:
            >>> t.context.store.uri
            'memory://'
        """
        return self._context

    @property
    def store(self) -> ObjectStore:
        """The object store the table lives in.

        Examples:
            >>> t.store.uri
            'memory://'
        """
        return self.context.store

    @property
    def io(self) -> MetadataIO:
        """The metadata IO of this table: manifests, segments, history.

        Examples:
            >>> t.io.latest().version
            1
        """
        return self.context.io

    @property
    def footers(self) -> FooterCache:
        """The cache of Parquet footers this handle has read.

        Examples:
            >>> t.footers  # doctest: +ELLIPSIS
            <caslake.core.footers.FooterCache object at ...>
        """
        return self.context.footers

    @property
    def tombstones(self) -> TombstoneCache:
        """The cache of tombstones (deleted rows) this handle has read.

        Examples:
            >>> _ = t.delete('id = 1')
            >>> t.tombstones  # doctest: +ELLIPSIS
            <caslake.core.read.deletion_mask.TombstoneCache object at ...>
        """
        return self.context.tombstones

    @property
    def write_options(self) -> WriteOptions:
        """How new data files are written (a WriteOptions); settable.

        Examples:
            >>> t.write_options = caslake.WriteOptions(target_file_size=64 * 2**20)
        """
        return self.context.write_options

    @write_options.setter
    def write_options(self, options: WriteOptions) -> None:
        self.context.write_options = options

    @property
    def commit_policy(self) -> CommitPolicy:
        """How commits retry on conflicts (a CommitPolicy); settable.

        Examples:
            >>> t.commit_policy = caslake.CommitPolicy(max_attempts=10)
        """
        return self.context.commit_policy

    @commit_policy.setter
    def commit_policy(self, policy: CommitPolicy) -> None:
        self.context.commit_policy = policy

    @property
    def uri(self) -> str:
        """Where the table lives.

        Examples:
            >>> t.uri
            'memory://'
        """
        return self.store.uri

    @property
    def version(self) -> int:
        """The version this handle sees.

        Examples:
            >>> t.version
            1
        """
        return self.snapshot.version

    @property
    def schema(self) -> pa.Schema:
        """The table's schema as Arrow (with field ids in the field metadata).

        Examples:
            >>> t.schema.names
            ['id', 'city']
        """
        return self.snapshot.manifest.schema.to_arrow()

    @property
    def table_schema(self) -> TableSchema:
        """The table's schema as caslake's field tree (ids, nested children).

        Examples:
            >>> [f.name for f in t.table_schema.fields]
            ['id', 'city']
        """
        return self.snapshot.manifest.schema

    @property
    def snapshot(self) -> Snapshot:
        """The version this handle sees (its manifest and key); see :meth:`refresh`.

        Examples:
            >>> t.snapshot.manifest.totals.live_rows
            3
        """
        return self.context.snapshot

    def refresh(self) -> Self:
        """Re-read the table's pointer: later commits (from any writer) become visible.

        Examples:
            >>> t.refresh().version
            1
        """
        self.context.refresh()
        return self

    def _resolve(self, version: int | None, as_of: datetime | str | int | None) -> Snapshot:
        if version is not None and as_of is not None:
            raise InvalidArgument("give either version or as_of, not both")
        head = self.context.refresh()
        # A staged version of a multi-table transaction reads as committed or not.
        if version is not None:
            return self.io.visible(self.io.at_version(head, version))
        if as_of is not None:
            return self.io.visible(self.io.as_of(head, _ts_to_ms(as_of)))
        return head

    # --- reads ---------------------------------------------------------------------

    def scan(self, columns: Sequence[str] | None = None, where: str | Expr | None = None,
             version: int | None = None, as_of: datetime | str | int | None = None, *,
             ref: str | None = None, tag: str | None = None) -> Scan:
        """Pin a snapshot (latest, or by version / timestamp; of this handle's branch,
        of branch ``ref``, or the version tag ``tag`` names) and plan a read of it.

        Examples:
            >>> t.scan(columns=['id'], where='id >= 2').to_arrow().column('id').to_pylist()
            [2, 3]
        """
        return Scan(self.io, self.footers, self._resolve_ref(version, as_of, ref, tag),
                    columns, where, self.tombstones)

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        """Read the table (``scan`` arguments) into one ``pyarrow.Table``.

        Examples:
            >>> t.to_arrow(where='id = 3').column('city').to_pylist()
            ['Pune']
        """
        return self.scan(**kwargs).to_arrow()

    def to_pyarrow_dataset(self, version: int | None = None,
                           as_of: datetime | str | int | None = None, *,
                           ref: str | None = None, tag: str | None = None) -> Any:
        """The table at one version (pinned now: the latest, or by version / timestamp
        / branch / tag) as a ``pyarrow.dataset.Dataset``: ``duckdb.sql("select ...
        from ds where ...")`` and ``pl.scan_pyarrow_dataset(ds)`` push their
        projection and filter into caslake's scan (files and row groups pruned,
        deleted rows dropped); a filter caslake cannot translate is applied by
        pyarrow after the read (see :mod:`caslake.core.read.pyarrow_dataset`).

        Examples:
            >>> import pyarrow.dataset as pads
            >>> ds = t.to_pyarrow_dataset()
            >>> ds.to_table(filter=pads.field('city') == 'Lima').num_rows
            1
        """
        snap = self._resolve_ref(version, as_of, ref, tag)
        io, footers, tombstones = self.io, self.footers, self.tombstones

        def open_scan(columns: list[str] | None, where: Expr | None) -> Scan:
            return Scan(io, footers, snap, columns, where, tombstones)

        return pyarrow_dataset(open_scan, snap.manifest.schema.to_arrow(),
                               f"{self.uri} version {snap.version}")

    def head(self, n: int = 5, **kwargs: Any) -> pa.Table:
        """The first ``n`` rows of ``scan(**kwargs)`` (columns, where, version...), read
        row group by row group and no further (:meth:`Scan.limit`).

        Examples:
            >>> t.head(2, columns=['id']).num_rows
            2
        """
        return self.scan(**kwargs).limit(n).to_arrow()

    def _export_reader(self) -> pa.RecordBatchReader:
        return self.scan().to_reader()

    def live_files(self, version: int | None = None) -> list[dict[str, Any]]:
        """The live data files of the latest version (or ``version``): full ``uri``,
        ``path``, ``rows``, ``deleted_rows`` (rows tombstones hide: another engine
        reading the file directly sees them) and ``bytes``.

        Examples:
            >>> [f['rows'] for f in t.live_files()]
            [3]
        """
        return live_file_list(self.store, self.io, self._resolve(version, None))

    @property
    def properties(self) -> dict[str, str]:
        """The table properties at the latest version.

        Examples:
            >>> _ = t.set_properties({'owner': 'data-eng'})
            >>> t.properties['owner']
            'data-eng'
        """
        return dict(self._resolve(None, None).manifest.properties)

    def set_properties(self, updates: dict[str, str]) -> CommitResult:
        """Set (add or replace) table properties as one new version.

        Examples:
            >>> t.set_properties({'owner': 'data-eng'}).version
            2
        """
        if not isinstance(updates, dict) or not updates or not all(
                isinstance(k, str) and k and isinstance(v, str) for k, v in updates.items()):
            raise InvalidArgument("set_properties needs a non-empty dict of non-empty string "
                                  f"keys to string values, not {updates!r}")
        # A bad value of a property caslake reads commits nothing.
        from caslake.export.delta import checkpoint_interval

        retention_policy(updates)
        clustering = clustering_policy(updates)
        if clustering is not None:  # its columns exist and have an order (as Delta checks)
            cluster_fields(self.context.snapshot.manifest.schema, clustering)
        group_commit(updates)
        checkpoint_interval(updates)
        ctx = self.context
        started = ctx.meter()
        changes = Changes("set_properties", properties=dict(updates),
                          params={"keys": ",".join(sorted(updates))})
        return run_operation(ctx, "set_properties", lambda base: changes, started=started)

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Every version of this branch, newest first (``limit``: the newest ``limit``).

        Examples:
            >>> [e.operation for e in t.history()]
            ['append', 'create']
        """
        head = self._resolve(None, None)
        return [HistoryEntry.of(s.manifest, s.key) for s in self.io.history(head, limit)]

    # --- writes --------------------------------------------------------------------

    def append(self, data: Any, *, txn: tuple[str, int] | None = None,
               params: dict[str, str] | None = None,
               schema_mode: str | None = None) -> CommitResult:
        """Write ``data`` as new data files and commit them as exactly one new version.

        Columns match the table by name, and a column renamed since the data was
        read matches by its field id.  Columns the table lacks are refused
        (SchemaMismatch naming them) unless ``schema_mode="merge"``, which adds
        them (nullable) in the same commit.

        Examples:
            >>> t.append(pa.table({'id': [4], 'city': ['Rome']})).rows_added
            1
        """
        return self._write("append", data, remove_all=False, txn=txn, params=params,
                           schema_mode=schema_mode)

    def update_schema(self) -> SchemaUpdate:
        """A builder of schema changes that commits once: ``.add_column(name, type)``,
        ``.rename_column(old, new)``, ``.drop_column(name)``, ``.widen_column(name,
        type)``, ``.make_nullable(name)``, then ``.commit()``.

        Examples:
            >>> with t.update_schema() as upd:  # doctest: +SKIP
            ...     upd.add_column('country', 'string')
        """
        return SchemaUpdate(self.context)

    def overwrite(self, data: Any, *, where: str | Expr | None = None,
                  txn: tuple[str, int] | None = None,
                  params: dict[str, str] | None = None) -> CommitResult:
        """Replace every row with ``data`` in one version.

        Conflicts (``ConcurrentModification``) with any commit that lands between
        planning and committing, so concurrent rows are never silently dropped.

        With ``where`` (Delta's replaceWhere) only the live rows matching it are
        replaced, in one commit that deletes them (a file whose partition lies wholly
        inside ``where`` is dropped unread) and adds ``data``; every row of ``data``
        must match ``where``, else ``RowsOutsideWhere`` and nothing is written.

        Examples:
            >>> t.overwrite(pa.table({'id': [7], 'city': ['Baku']})).version
            2
            >>> t.to_arrow().num_rows
            1
        """
        if where is not None:
            if txn is not None:
                raise InvalidArgument("overwrite(where=...) does not take txn")
            return overwrite_where(self.context, data, where, params=params)
        return self._write("overwrite", data, remove_all=True, txn=txn, params=params)

    def update_spec(self, partition_by: Sequence[str]) -> CommitResult:
        """Make ``partition_by`` (``["day(ts)", "bucket(16, id)"]``; ``[]``: none) the
        partition spec new files are written with, in one ``partition_spec`` commit.
        Files written before keep their spec and still prune by it.

        Examples:
            >>> t.update_spec(['city']).version  # new files are partitioned by city
            2
        """
        return update_spec(self.context, partition_by)

    def _write(self, operation: str, data: Any, *, remove_all: bool,
               txn: tuple[str, int] | None, params: dict[str, str] | None,
               schema_mode: str | None = None) -> CommitResult:
        ctx = self.context
        started = ctx.meter()
        if txn is not None:
            txn = check_txn(txn)
        start = ctx.refresh() if remove_all or txn else ctx.snapshot
        if txn_applied(start.manifest.txns, txn):
            return noop_result(ctx, operation, start, started=started)
        schema = start.manifest.schema
        reader, merged = align_input(as_reader(data, schema.to_arrow()), schema, schema_mode)
        if merged is not None:
            refs.ensure_format(ctx.io)  # a schema change: format 2
        files = write_data_files(self.store, reader, merged or schema, self.write_options,
                                 spec=default_spec(start.manifest))
        if not files and not remove_all and merged is None:
            return noop_result(ctx, operation, start, started=started, commit_id="")
        prepare = write_prepare(operation, files, remove_all=remove_all, txn=txn,
                                params=params)
        # An append does not depend on the base: it may join a group commit.
        group = (GroupWrite(operation, tuple(files), schema, None, txn)
                 if not remove_all and merged is None else None)
        return run_operation(
            ctx, operation, lambda base: with_schema(prepare(base), merged), group=group,
            # A merge-mode append changes the schema itself: even a concurrent
            # add_column is a conflict (its column would vanish under our schema).
            requirements=write_requirements(operation, schema, txn=txn,
                                            base_version=start.version if remove_all else None,
                                            exact_schema=merged is not None),
            started=started)

    def delete(self, where: str | Expr, *, read_version: int | None = None) -> CommitResult:
        """Delete the rows matching ``where`` without rewriting any data file.

        One tombstone object and one commit; a delete that matches nothing
        creates no version (``noop`` is True, ``rows_deleted`` 0).  With
        ``read_version`` the delete refuses (ReadValidationFailed) to commit over any
        commit since that version that changed rows ``where`` could match.

        Examples:
            >>> t.delete("city = 'Oslo'").rows_deleted
            1
        """
        tx = Transaction(self.context, read_version=read_version)
        tx.delete(where)
        return tx.commit()

    def upsert(self, data: Any, key: list[str] | str, *, read_version: int | None = None,
               on_duplicate: str = "error") -> CommitResult:
        """CDC-style change in one commit: delete the current rows whose ``key``
        columns equal a key in ``data``, then append ``data``.

        For a read-modify-write (new values computed from rows read at version
        ``v``), pass ``read_version=v``: the upsert then raises ReadValidationFailed
        instead of committing over a concurrent change to any of those keys.

        A key twice in ``data`` raises DuplicateKey; ``on_duplicate="last"`` (or
        ``"first"``) keeps that row of each key instead.

        Examples:
            >>> t.upsert(pa.table({'id': [3, 4], 'city': ['Delhi', 'Rome']}), key='id').version
            2
            >>> t.to_arrow().num_rows
            4
        """
        tx = Transaction(self.context, read_version=read_version)
        tx.upsert(data, key, on_duplicate=on_duplicate)
        return tx.commit()

    def update(self, set: dict[str, Any], where: str | Expr | None = None, *,
               read_version: int | None = None) -> CommitResult:
        """``UPDATE t SET column = value, ... WHERE where`` as one commit: a tombstone
        hiding the matching rows and their new values appended (docs/protocol.md,
        "Update").  A value is SQL text (``"amount * 1.1"``, ``"'closed'"``), a
        ``caslake.col(...)`` expression or a Python literal; a value of the wrong
        type is SchemaMismatch naming the column, and nothing is committed.
        Matching nothing creates no version.  ``read_version``: see :meth:`upsert`.

        Examples:
            >>> t.update({'city': "upper(city)"}, where='id < 3').rows_deleted  # doctest: +SKIP
            2
            >>> t.update({'city': "CASE WHEN id = 1 THEN 'one' ELSE city END"}).version
            2
        """
        from caslake.ops.update import update

        return update(self.context, set, where, read_version=read_version)

    def transaction(self, *, read_version: int | None = None,
                    txn: tuple[str, int] | None = None) -> Transaction:
        """``with table.transaction() as tx: tx.delete(...); tx.append(...)`` commits
        everything as one version on a clean exit, nothing if the block raises.
        ``read_version``: see :meth:`upsert`.  ``txn``: an idempotency token
        ``(app_id, version)``, as for :meth:`append`: the block is a no-op once the
        table records that app id at that version or a later one.

        Examples:
            >>> with t.transaction() as tx:
            ...     _ = tx.delete('id = 1')
            ...     _ = tx.append(pa.table({'id': [10], 'city': ['Nice']}))
            >>> t.version  # both in one commit
            2
        """
        return Transaction(self.context, read_version=read_version, txn=txn)

    def describe(self) -> dict[str, Any]:
        """The latest version at a glance: schema, files, rows, deleted rows, bytes,
        tombstones, metadata.

        Examples:
            >>> t.describe()['rows']
            3
        """
        snap = self._resolve(None, None)
        m = snap.manifest
        files = self.io.live_files(snap)
        deleted = m.deleted_rows_per_file()
        return {
            "uri": self.uri, "table_id": m.table_id, "version": m.version,
            "created_at": format_ts(m.created_at_ms), "operation": m.operation,
            "schema": [f.to_json() for f in m.schema.fields],
            "files": len(files), "rows": m.totals.live_rows, "stored_rows": m.totals.rows,
            "deleted_rows": m.totals.deleted_rows, "bytes": m.totals.bytes,
            "tombstones": len(m.tombstones),
            "metadata": {"inline_entries": len(m.files), "segments": len(m.segments),
                         "removed_entries": len(m.removed)},
            "data_files": [{"path": f.path, "rows": f.row_count, "bytes": f.size,
                            "row_groups": f.row_group_count,
                            "deleted_rows": deleted.get(f.path, 0)}
                           for f in files],
        }

    # --- which ref -------------------------------------------------------------------

    @property
    def ref(self) -> str:
        """The branch this handle reads and commits to (``main`` by default).

        Examples:
            >>> t.ref
            'main'
        """
        key = self.context.pointer_key
        return MAIN if key == POINTER_KEY else name_from_key(key, BRANCH_PREFIX) or key

    def branch(self, name: str) -> Self:
        """A handle bound to branch ``name``: its appends, deletes, upserts,
        transactions, compaction and gc marker commit to that branch.  Raises
        RefNotFound.

        Examples:
            >>> _ = t.create_branch('dev')
            >>> t.branch('dev').ref
            'dev'
        """
        head = refs.branch_head(self.context.io, name)
        return self._handle_for(branch_key(name), head)

    def create_branch(self, name: str, from_version: int | None = None, *,
                      tag: str | None = None) -> Self:
        """Create branch ``name`` at ``from_version`` of this handle's branch (default:
        its latest version) or at tag ``tag``, and return a handle bound to it.

        Examples:
            >>> dev = t.create_branch('dev')
            >>> _ = dev.append(pa.table({'id': [9], 'city': ['Kyiv']}))
            >>> dev.to_arrow().num_rows, t.refresh().to_arrow().num_rows
            (4, 3)
        """
        validate_ref_name(name, kind="branch")
        io = self.context.io
        if tag is not None:
            if from_version is not None:
                raise InvalidArgument("give either from_version or tag, not both")
            snap = refs.tag_snapshot(io, tag)
            floor = snap.version  # below a tag, nothing is guaranteed to exist
        else:
            head = self._head()
            snap = head if from_version is None else io.at_version(head, from_version)
            floor = head.manifest.oldest_version
        fork = refs.create_branch(io, name, snap, floor=floor)
        return self._handle_for(branch_key(name), fork)

    def create_tag(self, name: str, version: int | None = None) -> refs.RefInfo:
        """Tag ``version`` of this handle's branch (default: its latest) as ``name``;
        tags are immutable, and a dropped tag's name can never be used again.

        Examples:
            >>> _ = t.create_tag('v1')
            >>> t.scan(version='v1').to_arrow().num_rows  # doctest: +SKIP
            3
        """
        validate_ref_name(name, kind="tag")
        head = self._head()
        snap = head if version is None else self.context.io.at_version(head, version)
        t = refs.create_tag(self.context.io, name, snap, branch=self.ref,
                            now_ms=self.context.now_ms)
        return refs.RefInfo("tag", t.name, t.target.version, t.target.commit_id,
                            t.target.manifest, branch=t.branch)

    def list_refs(self) -> list[refs.RefInfo]:
        """Every branch (``main`` first), live tag and clone hold of the table.

        Examples:
            >>> _ = t.create_tag('v1')
            >>> sorted(r.name for r in t.list_refs())
            ['main', 'v1']
        """
        return refs.list_refs(self.context.io)

    def drop_branch(self, name: str) -> None:
        """Drop branch ``name``.  Refused (RefInUse, naming them) while a tag or a
        clone still needs a version only this branch has.

        Examples:
            >>> _ = t.create_branch('tmp')
            >>> t.drop_branch('tmp')
        """
        refs.drop_branch(self.context.io, name)

    def drop_tag(self, name: str) -> None:
        """Drop tag ``name``; its name stays retired (a tombstone).

        Examples:
            >>> _ = t.create_tag('v1')
            >>> t.drop_tag('v1')
        """
        refs.drop_tag(self.context.io, name, now_ms=self.context.now_ms)

    def fast_forward(self, target: str = MAIN, *, source: str) -> int:
        """Move branch ``target`` to ``source``'s head if ``target`` has not moved since
        the fork (else BranchDiverged).  Returns ``target``'s new version.

        Examples:
            >>> dev = t.create_branch('dev')
            >>> _ = dev.append(pa.table({'id': [9], 'city': ['Kyiv']}))
            >>> t.fast_forward('main', source='dev')
            2
        """
        validate_ref_name(target, kind="branch")
        validate_ref_name(source, kind="branch")
        snap = refs.fast_forward(self.context.io, target, source)
        if target == self.ref:
            # No store call after the move: a failing read now would report a
            # fast-forward that happened as a failure.
            adopt_ref_move(self.context, snap)
        return snap.version

    @overload
    def merge(self, source: str, *, into: str = MAIN) -> CommitResult: ...

    @overload
    def merge(self, source: Any, *, on: Sequence[str] | str) -> MergeBuilder: ...

    def merge(self, source: Any, *, into: str = MAIN, on: Sequence[str] | str | None = None
              ) -> CommitResult | MergeBuilder:
        """Two merges, told apart by ``on``:

        * ``merge(data, on=["id"])``: a MERGE of ``data`` into this table, matched
          on the ``on`` columns -- returns a builder taking ``when_matched_update``,
          ``when_matched_update_all``, ``when_matched_delete``,
          ``when_not_matched_insert``, ``when_not_matched_insert_all``,
          ``when_not_matched_by_source_update`` / ``_delete`` clauses and
          ``execute()``, one commit (docs/protocol.md, "Merge");
        * ``merge("branch", into="main")``: commit branch ``source``'s changes since
          its fork onto branch ``into`` as one version, provided ``into`` only
          appended since the fork (else BranchDiverged).

        Examples:
            >>> dev = t.create_branch('dev')
            >>> _ = dev.append(pa.table({'id': [9], 'city': ['Kyiv']}))
            >>> t.merge('dev').version  # a branch into main
            2
        """
        if on is not None:
            from caslake.ops.merge import MergeBuilder

            return MergeBuilder(self.context, source, on)
        if not isinstance(source, str):
            raise InvalidArgument("merge of data needs on=[key columns]; merge of a branch "
                                  "takes its name")
        validate_ref_name(source, kind="branch")
        target = self if into == self.ref else self.branch(into)
        ctx = target.context
        started = ctx.meter()
        refs.branch_head(ctx.io, source)  # RefNotFound before anything else
        return run_operation(ctx, "merge", refs.merge_changes(ctx.io, into, source),
                             started=started)

    # --- reads -----------------------------------------------------------------------

    def _head(self) -> Snapshot:
        try:
            return self.context.refresh()
        except TableNotFound:
            if self.ref != MAIN:
                raise RefNotFound("branch", self.ref) from None
            raise

    def _resolve_ref(self, version: int | None, as_of: datetime | str | int | None,
                     ref: str | None, tag: str | None) -> Snapshot:
        """The snapshot a read names: a tag, a version or time of branch ``ref``, or
        of this handle's branch."""
        if tag is not None:
            if version is not None or as_of is not None or ref is not None:
                raise InvalidArgument("a tag names one version: give tag alone, without "
                                      "ref, version or as_of")
            return refs.tag_snapshot(self.context.io, tag)
        if ref is None or (validate_ref_name(ref, kind="branch") == self.ref):
            return self._resolve(version, as_of)
        return self.branch(ref)._resolve(version, as_of)

    def changes(self, start_version: int | str, end_version: int | str | None = None, *,
                columns: Sequence[str] | None = None, where: str | Expr | None = None,
                ref: str | None = None) -> ChangeScan:
        """The change feed of versions ``start_version`` .. ``end_version`` (both
        inclusive, as Delta's ``table_changes``; None: the latest; a string is a tag)
        of this handle's branch or branch ``ref``: the table's columns plus
        ``_change_type`` (insert, delete, update_preimage, update_postimage),
        ``_commit_version`` and ``_commit_timestamp`` (docs/protocol.md, "Change
        feed"; see :mod:`caslake.ops.change_feed`).

        Examples:
            >>> _ = t.delete('id = 1')
            >>> t.changes(2).to_arrow().num_rows  # version 2's delete: one change row
            1
        """
        from caslake.ops.change_feed import changes

        handle = self if ref is None or validate_ref_name(ref, kind="branch") == self.ref \
            else self.branch(ref)
        io = handle.context.io
        return changes(io, handle.footers, handle.tombstones, handle._head(), start_version,
                       end_version, columns=columns, where=where,
                       tag=lambda name: refs.tag_snapshot(io, name))

    def follow(self, start_version: int | str | None = None, *,
               columns: Sequence[str] | None = None, where: str | Expr | None = None,
               ref: str | None = None, poll_initial_s: float = 0.1, poll_max_s: float = 5.0,
               stop: Callable[[], bool] | None = None) -> Iterator[pa.RecordBatch]:
        """Follow the table: yield the change feed's record batches from
        ``start_version`` (default: the first version after the current head) on,
        as new versions land, polling the pointer with a delay that doubles from
        ``poll_initial_s`` up to ``poll_max_s`` while nothing lands.  ``stop()`` is
        asked before each poll (True ends it); without it the iterator runs until
        the caller stops iterating.

        Examples:
            >>> feed = t.follow(0)  # waits for new commits; stop= ends it
            >>> next(feed).num_rows  # version 1's append
            3
        """
        from caslake.ops.change_feed import follow

        handle = self if ref is None or validate_ref_name(ref, kind="branch") == self.ref \
            else self.branch(ref)
        head = handle._head()
        start = head.version + 1 if start_version is None else start_version
        if isinstance(start, str):
            start = refs.tag_snapshot(handle.context.io, start).version
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise InvalidArgument(f"start_version must be a version >= 0 or a tag, not "
                                  f"{start_version!r}")

        def feed(lo: int, hi: int) -> ChangeScan:
            return handle.changes(lo, hi, columns=columns, where=where)

        return follow(handle._head, feed, start, poll_initial_s=poll_initial_s,
                      poll_max_s=poll_max_s, stop=stop)

    def restore(self, *, version: int | None = None,
                timestamp: datetime | str | int | None = None,
                tag: str | None = None) -> CommitResult:
        """Make a new version whose contents equal ``version`` (or the version current
        at ``timestamp``, or tag ``tag``) of this handle's branch, as one commit that
        re-references that version's data files and tombstones (nothing rewritten).
        Conflicts like an overwrite with a commit landing meanwhile (see
        :mod:`caslake.ops.restore`).

        Examples:
            >>> _ = t.delete('id > 0')
            >>> t.restore(version=1).version  # a new version with version 1's rows
            3
            >>> t.to_arrow().num_rows
            3
        """
        from caslake.ops.restore import restore

        return restore(self.context, version=version,
                       timestamp=None if timestamp is None else _ts_to_ms(timestamp),
                       tag=tag, tag_snapshot=lambda name: refs.tag_snapshot(self.io, name))

    def compact(self, *, target_file_size: int | None = None, deleted_fraction: float = 0.1,
                sort_by: Sequence[str] | None = None,
                zorder_by: Sequence[str] | None = None) -> CommitResult:
        """Rewrite small files, and files ``deleted_fraction`` or more of whose rows are
        deleted, into new files in one commit (see :mod:`caslake.ops.compact`).

        With ``sort_by=[cols]`` or ``zorder_by=[cols]`` (or the table property
        ``clustering.columns``, ``"zorder(id, ts)"``) it clusters instead: the files
        whose key ranges overlap others' (and mostly-deleted ones) are rewritten in
        key order into files with disjoint key ranges, so a point read opens one;
        files already in order are left alone.

        Examples:
            >>> _ = t.append(pa.table({'id': [4], 'city': ['Rome']}))
            >>> t.compact().files_removed
            2
        """
        from caslake.ops.compact import compact

        return compact(self.context, target_file_size=target_file_size,
                       deleted_fraction=deleted_fraction, sort_by=sort_by,
                       zorder_by=zorder_by)

    def purge(self, where: str | Expr, *, dry_run: bool = False, expire: bool = False,
              progress: Progress | None = None, audit_key: bytes | None = None
              ) -> PurgeReport:
        """Physically erase the rows ``where`` matches, by row-group splice, in one
        version (see :mod:`caslake.ops.purge`).

        Examples:
            >>> t.purge("city = 'Lima'").rows_erased  # rewritten without the row
            1
        """
        from caslake.export.erase import describe_erasure, erase_export_history
        from caslake.export.roots import export_roots
        from caslake.ops.purge import purge

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
        version references (see :mod:`caslake.ops.gc`).

        Examples:
            >>> t.gc(dry_run=True).deleted_count  # everything is young: nothing to delete
            0
        """
        from caslake.export.roots import export_roots
        from caslake.ops.gc import collect_garbage

        return collect_garbage(self.context, retention=retention, dry_run=dry_run, now=now,
                               force=force, extra_roots=(export_roots,))

    def report(self, path: str | os.PathLike[str]) -> Health:
        """Write the table's health report -- one self-contained HTML page of charts
        (versions, file sizes, deleted rows, tombstones and segments, pruning width,
        requests per operation, what compact and gc would do) -- to ``path``; needs
        the ``report`` extra (matplotlib).  See :mod:`caslake.ops.report`.

        Examples:
            >>> import caslake, pyarrow as pa, tempfile, os
            >>> t = caslake.create_table("memory://", pa.schema([("id", pa.int64())]))
            >>> _ = t.append(pa.table({"id": [1, 2, 3]}))
            >>> health = t.report(os.path.join(tempfile.mkdtemp(), "health.html"))
            >>> health.counts["live files"]
            1
        """
        from caslake.export.roots import export_roots
        from caslake.ops.report import write_report

        return write_report(self.context, path,
                            target_file_size=self.write_options.target_file_size,
                            extra_roots=(export_roots,))

    def export_iceberg(self, version: int | None = None, out: str | None = None,
                       storage_options: StorageOptions | None = None) -> ExportResult:
        """Write Iceberg v2 metadata for ``version`` (latest if None) under
        ``<out or the table root>/metadata/`` (see :mod:`caslake.export.iceberg`).

        Examples:
            >>> t.export_iceberg().version
            1
        """
        from caslake.export.iceberg import export_iceberg

        return export_iceberg(self.context, version, out, storage_options)

    def export_delta(self, version: int | None = None) -> ExportResult:
        """Append a Delta commit to ``_delta_log/`` showing ``version`` (latest if None;
        see :mod:`caslake.export.delta`).

        Examples:
            >>> t.export_delta().version
            1
        """
        from caslake.export.delta import export_delta

        return export_delta(self.context, version)

    def drop_export(self, format: str, *, out: str | None = None,
                    storage_options: StorageOptions | None = None) -> int:
        """Delete the ``format`` ("iceberg" or "delta") export at the table root (or an
        Iceberg export at ``out``): every object of it.  Refused with
        ExportOnCommitEnabled while the table property ``export.<format>`` is true;
        returns the number of objects deleted (0: none; see
        :mod:`caslake.export.erase`).

        Examples:
            >>> t.drop_export('delta')  # no Delta export yet: nothing deleted
            0
        """
        from caslake.export.erase import drop_export

        return drop_export(self.context, format, out=out, storage_options=storage_options)


def _create(store: ObjectStore, schema: pa.Schema, properties: dict[str, str] | None,
            pointer_key: str = POINTER_KEY, *,
            partition_by: Sequence[str] | None = None) -> Snapshot:
    """Write version 0 and create the pointer.  Raises TableAlreadyExists, or
    CommitOutcomeUnknown if the pointer write's outcome cannot be read back."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgument(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
    table_schema = TableSchema.from_arrow(schema)
    partitioning = create_partitioning(partition_by, table_schema)  # bad items: nothing written
    if store.exists(pointer_key):
        raise TableAlreadyExists(f"a table already exists at {store.uri}")
    commit_id, token = new_token(), new_token()
    # Nested fields or a newer type: format 4 (docs/format.md, "Format version rule").
    fv = TYPES_FORMAT_VERSION if table_schema.needs_v4 else BASE_FORMAT_VERSION
    if partitioning is not None:  # a partition spec: format 5
        fv = PARTITION_FORMAT_VERSION
    manifest = Manifest(table_id=new_token(), version=0, parent=None, commit_id=commit_id,
                        created_at_ms=int(time.time() * 1000), operation="create",
                        schema=table_schema, properties=dict(properties or {}),
                        summary=complete_summary({}), format_version=fv,
                        partitioning=partitioning)
    key = manifest_key(0, token)
    put_new(store, key, manifest.to_bytes())
    pointer = Pointer(manifest.table_id, 0, key, commit_id, format_version=fv)
    # The pointer bytes carry our commit id: equal bytes read back mean ours.
    if not create_record(store, pointer_key, pointer.to_bytes(),
                         what=f"the table pointer at {store.uri}", commit_id=commit_id,
                         version=0):
        with contextlib.suppress(StoreError):
            store.delete(key)  # the slot is provably someone else's: our manifest is an orphan
        raise TableAlreadyExists(f"a table already exists at {store.uri}")
    return Snapshot(manifest, key)


def create_table(uri: str, schema: pa.Schema, *, storage_options: StorageOptions | None = None,
                 properties: dict[str, str] | None = None,
                 write_options: WriteOptions | None = None,
                 partition_by: Sequence[str] | None = None) -> Table:
    """Create an empty table (version 0).  Raises TableAlreadyExists.

    ``partition_by`` is a partition spec, Iceberg's hidden partitioning:
    ``["day(ts)", "bucket(16, user_id)", "region"]`` (transforms identity, year,
    month, day, hour, bucket(N, col), truncate(W, col)); every data file then holds
    one partition and scans skip files by predicates on the source columns.  Bad
    items are InvalidPartitionSpec; the table is format version 5.

    ``schema`` may nest lists, structs and maps to any depth, and use the newer
    primitives (time32/64, date64, decimal32/64/256, float16, uuid,
    fixed_size_binary); Arrow encodings are stored as their plain type
    (``string_view``/``large_string`` as string, ``large_list``/``fixed_size_list``
    /list views as list, dictionaries as their values).  Appends match struct
    fields by name and convert any encoding; ``scan(columns=["dev.os"])``
    projects a nested field keeping the struct shape.  A schema using any of
    these makes the table format version 4.

    Examples:
        >>> import caslake, pyarrow as pa
        >>> t = caslake.create_table('memory://', pa.schema([('id', pa.int64())]))
        >>> t.version
        0
    """
    return Table.create(uri, schema, storage_options=storage_options, properties=properties,
                        write_options=write_options, partition_by=partition_by)


def clone(source_uri: str, target_uri: str, *, version: int | None = None,
          tag: str | None = None, branch: str = "main",
          storage_options: StorageOptions | None = None,
          write_options: WriteOptions | None = None) -> Table:
    """A zero-copy clone of ``source_uri`` (at ``version``, tag ``tag`` or the head of
    ``branch``) at ``target_uri``: it references the source's files where they lie
    (held by a record under the source, so the source's gc keeps them); new writes
    go to the target.  Released by :func:`drop_table`, or by the clone's gc once
    nothing the clone retains references the source (e.g. after compaction).

    Examples:
        >>> import caslake, pyarrow as pa, tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> src = caslake.create_table(os.path.join(d, 'src'), pa.schema([('id', pa.int64())]))
        >>> _ = src.append(pa.table({'id': [1, 2]}))
        >>> c = caslake.clone(src.uri, os.path.join(d, 'copy'))  # no data copied
        >>> c.to_arrow().num_rows
        2
    """
    from caslake.ops.clone import clone as _clone

    _clone(source_uri, target_uri, version=version, tag=tag, branch=branch,
           storage_options=storage_options)
    return open_table(target_uri, storage_options=storage_options, write_options=write_options)


def drop_table(uri: str, *, storage_options: StorageOptions | None = None) -> None:
    """Delete the table at ``uri`` (every object) and release its holds on the tables
    it was cloned from.  Idempotent.

    Examples:
        >>> import caslake, pyarrow as pa, tempfile, os
        >>> uri = os.path.join(tempfile.mkdtemp(), 't')
        >>> _ = caslake.create_table(uri, pa.schema([('id', pa.int64())]))
        >>> caslake.drop_table(uri)
    """
    from caslake.ops.clone import drop_table as _drop

    _drop(uri, storage_options=storage_options)


def open_table(uri: str, *, storage_options: StorageOptions | None = None,
               write_options: WriteOptions | None = None) -> Table:
    """Open an existing table at its latest version.  Raises TableNotFound.

    Examples:
        >>> import caslake, pyarrow as pa, tempfile, os
        >>> uri = os.path.join(tempfile.mkdtemp(), 't')
        >>> _ = caslake.create_table(uri, pa.schema([('id', pa.int64())]))
        >>> caslake.open_table(uri).version
        0
    """
    return Table.open(uri, storage_options=storage_options, write_options=write_options)


__all__ = ["CommitResult", "HistoryEntry", "Table", "clone", "create_table", "drop_table",
           "open_table"]
