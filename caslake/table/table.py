"""The table handle: create, open, append, overwrite, delete, upsert, scan, history.

:class:`TableCore` is everything a table handle does within the table layer;
the public ``caslake.Table`` (``caslake/api.py``) adds the maintenance
operations (compact, gc) on top, so nothing in ``table/`` depends on
``maintenance/``.  Every commit runs through :mod:`caslake.table.runner`.

A handle is on a table URI.  ``version`` and ``schema`` describe
the snapshot the handle last saw (after its own commits, scans or
``refresh()``); every operation reads the pointer afresh, so writers always
commit on top of the latest version and a plain ``scan()`` reads the latest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Self

import pyarrow as pa

from caslake.errors import (
    AlreadyExists,
    CommitOutcomeUnknown,
    InvalidArgument,
    StoreError,
    TableAlreadyExists,
    TableNotFound,
)
from caslake.expr import Expr
from caslake.format.keys import POINTER_KEY, manifest_key, new_token
from caslake.format.manifest import Manifest, Pointer, format_ts
from caslake.format.properties import retention_policy
from caslake.format.schema import TableSchema
from caslake.store import open_store
from caslake.store.base import ObjectStore, PutMode
from caslake.store.options import StorageOptions
from caslake.table import refs
from caslake.table.changes import Changes, check_txn, txn_applied, write_prepare
from caslake.table.clone import with_externals
from caslake.table.commit import CommitPolicy
from caslake.table.deletion_mask import TombstoneCache
from caslake.table.footers import FooterCache
from caslake.table.history import HistoryEntry, complete_summary
from caslake.table.interop import ArrowExport, live_file_list
from caslake.table.metadata_io import MetadataIO, Snapshot
from caslake.table.ref_methods import RefMethods
from caslake.table.requirements import write_requirements
from caslake.table.runner import CommitResult, TableContext, noop_result, run_operation
from caslake.table.scan import Scan
from caslake.table.schema_update import SchemaUpdate, align_input, with_schema
from caslake.table.transaction import Transaction
from caslake.table.write import WriteOptions, as_reader, write_data_files

__all__ = ["CommitResult", "HistoryEntry", "TableCore"]


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


class TableCore(ArrowExport, RefMethods):
    """``pa.table(t)``, ``duckdb.sql('select ... from t')``, ``pl.DataFrame(t)``,
    ``t.to_pandas()`` and ``t.to_polars()`` read the latest version (see
    :mod:`caslake.table.interop`)."""

    def __init__(self, store: ObjectStore, snapshot: Snapshot, *,
                 write_options: WriteOptions | None = None,
                 commit_policy: CommitPolicy | None = None, io: MetadataIO | None = None,
                 pointer_key: str = POINTER_KEY) -> None:
        self.context = TableContext(store, snapshot, io=io, write_options=write_options,
                                    commit_policy=commit_policy, pointer_key=pointer_key)

    @classmethod
    def load(cls, store: ObjectStore, *, pointer_key: str = POINTER_KEY,
             **kwargs: Any) -> Self:
        """Open the table that lives in ``store`` (any ObjectStore, e.g. a wrapped one),
        at the latest version of the ref whose pointer is ``pointer_key``."""
        io = MetadataIO(store, pointer_key=pointer_key)
        return cls(store, io.latest(), io=io, pointer_key=pointer_key, **kwargs)

    @classmethod
    def open(cls, uri: str, *, storage_options: StorageOptions | None = None,
             write_options: WriteOptions | None = None) -> Self:
        """Open an existing table at its latest version.  Raises TableNotFound.  A
        clone's store also reads the objects it references in its source."""
        store = open_store(uri, storage_options)
        head = MetadataIO(store).latest()
        return cls.load(with_externals(store, head.manifest, storage_options),
                        write_options=write_options)

    @classmethod
    def create(cls, uri: str, schema: pa.Schema, *,
               storage_options: StorageOptions | None = None,
               properties: dict[str, str] | None = None,
               write_options: WriteOptions | None = None) -> Self:
        """Create an empty table (version 0).  Raises TableAlreadyExists."""
        store = open_store(uri, storage_options)
        return cls(store, _create(store, schema, properties), write_options=write_options)

    def _handle_for(self, pointer_key: str, snapshot: Snapshot) -> Self:
        return type(self)(self.store, snapshot, write_options=self.write_options,
                          commit_policy=self.commit_policy, pointer_key=pointer_key)

    # --- state ---------------------------------------------------------------------

    @property
    def store(self) -> ObjectStore:
        return self.context.store

    @property
    def io(self) -> MetadataIO:
        return self.context.io

    @io.setter
    def io(self, io: MetadataIO) -> None:
        self.context.io = io

    @property
    def footers(self) -> FooterCache:
        return self.context.footers

    @property
    def tombstones(self) -> TombstoneCache:
        return self.context.tombstones

    @tombstones.setter
    def tombstones(self, cache: TombstoneCache) -> None:
        self.context.tombstones = cache

    @property
    def write_options(self) -> WriteOptions:
        return self.context.write_options

    @write_options.setter
    def write_options(self, options: WriteOptions) -> None:
        self.context.write_options = options

    @property
    def commit_policy(self) -> CommitPolicy:
        return self.context.commit_policy

    @commit_policy.setter
    def commit_policy(self, policy: CommitPolicy) -> None:
        self.context.commit_policy = policy

    @property
    def uri(self) -> str:
        return self.store.uri

    @property
    def version(self) -> int:
        return self.snapshot.version

    @property
    def schema(self) -> pa.Schema:
        return self.snapshot.manifest.schema.to_arrow()

    @property
    def table_schema(self) -> TableSchema:
        return self.snapshot.manifest.schema

    @property
    def snapshot(self) -> Snapshot:
        return self.context.snapshot

    def refresh(self) -> Self:
        self.context.refresh()
        return self

    def _resolve(self, version: int | None, as_of: datetime | str | int | None) -> Snapshot:
        if version is not None and as_of is not None:
            raise InvalidArgument("give either version or as_of, not both")
        head = self.context.refresh()
        if version is not None:
            return self.io.at_version(head, version)
        if as_of is not None:
            return self.io.as_of(head, _ts_to_ms(as_of))
        return head

    # --- reads ---------------------------------------------------------------------

    def scan(self, columns: Sequence[str] | None = None, where: str | Expr | None = None,
             version: int | None = None, as_of: datetime | str | int | None = None, *,
             ref: str | None = None, tag: str | None = None) -> Scan:
        """Pin a snapshot (latest, or by version / timestamp; of this handle's branch,
        of branch ``ref``, or the version tag ``tag`` names) and plan a read of it."""
        return Scan(self.io, self.footers, self._resolve_ref(version, as_of, ref, tag),
                    columns, where, self.tombstones)

    def to_arrow(self, **kwargs: Any) -> pa.Table:
        return self.scan(**kwargs).to_arrow()

    def _export_reader(self) -> pa.RecordBatchReader:
        return self.scan().to_reader()

    def live_files(self, version: int | None = None) -> list[dict[str, Any]]:
        """The live data files of the latest version (or ``version``): full ``uri``,
        ``path``, ``rows``, ``deleted_rows`` (rows tombstones hide: another engine
        reading the file directly sees them) and ``bytes``."""
        return live_file_list(self.store, self.io, self._resolve(version, None))

    @property
    def properties(self) -> dict[str, str]:
        """The table properties at the latest version."""
        return dict(self._resolve(None, None).manifest.properties)

    def set_properties(self, updates: dict[str, str]) -> CommitResult:
        """Set (add or replace) table properties as one new version."""
        if not isinstance(updates, dict) or not updates or not all(
                isinstance(k, str) and k and isinstance(v, str) for k, v in updates.items()):
            raise InvalidArgument("set_properties needs a non-empty dict of non-empty string "
                                  f"keys to string values, not {updates!r}")
        retention_policy(updates)  # a bad retention.* value commits nothing
        ctx = self.context
        started = ctx.meter()
        changes = Changes("set_properties", properties=dict(updates),
                          params={"keys": ",".join(sorted(updates))})
        return run_operation(ctx, "set_properties", lambda base: changes, started=started)

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
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
        them (nullable) in the same commit."""
        return self._write("append", data, remove_all=False, txn=txn, params=params,
                           schema_mode=schema_mode)

    def update_schema(self) -> SchemaUpdate:
        """A builder of schema changes that commits once: ``.add_column(name, type)``,
        ``.rename_column(old, new)``, ``.drop_column(name)``, ``.widen_column(name,
        type)``, ``.make_nullable(name)``, then ``.commit()``."""
        return SchemaUpdate(self.context)

    def overwrite(self, data: Any, *, txn: tuple[str, int] | None = None,
                  params: dict[str, str] | None = None) -> CommitResult:
        """Replace every row with ``data`` in one version.

        Conflicts (``ConcurrentModification``) with any commit that lands between
        planning and committing, so concurrent rows are never silently dropped."""
        return self._write("overwrite", data, remove_all=True, txn=txn, params=params)

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
        reader, merged = align_input(as_reader(data), schema, schema_mode)
        if merged is not None:
            refs.ensure_format(ctx.io)  # a schema change: format 2
        files = write_data_files(self.store, reader, merged or schema, self.write_options)
        if not files and not remove_all and merged is None:
            return noop_result(ctx, operation, start, started=started, commit_id="")
        prepare = write_prepare(operation, files, remove_all=remove_all, txn=txn,
                                params=params)
        return run_operation(
            ctx, operation, lambda base: with_schema(prepare(base), merged),
            requirements=write_requirements(operation, schema, txn=txn,
                                            base_version=start.version if remove_all else None),
            started=started)

    def delete(self, where: str | Expr, *, read_version: int | None = None) -> CommitResult:
        """Delete the rows matching ``where`` without rewriting any data file.

        One tombstone object and one commit; a delete that matches nothing
        creates no version (``noop`` is True, ``rows_deleted`` 0).  With
        ``read_version`` the delete refuses (ReadValidationFailed) to commit over any
        commit since that version that changed rows ``where`` could match."""
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
        ``"first"``) keeps that row of each key instead."""
        tx = Transaction(self.context, read_version=read_version)
        tx.upsert(data, key, on_duplicate=on_duplicate)
        return tx.commit()

    def transaction(self, *, read_version: int | None = None) -> Transaction:
        """``with table.transaction() as tx: tx.delete(...); tx.append(...)`` commits
        everything as one version on a clean exit, nothing if the block raises.
        ``read_version``: see :meth:`upsert`."""
        return Transaction(self.context, read_version=read_version)

    def describe(self) -> dict[str, Any]:
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


def _create(store: ObjectStore, schema: pa.Schema, properties: dict[str, str] | None,
            pointer_key: str = POINTER_KEY) -> Snapshot:
    """Write version 0 and create the pointer.  Raises TableAlreadyExists, or
    CommitOutcomeUnknown if the pointer write's outcome cannot be read back."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgument(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
    table_schema = TableSchema.from_arrow(schema)
    if store.exists(pointer_key):
        raise TableAlreadyExists(f"a table already exists at {store.uri}")
    commit_id, token = new_token(), new_token()
    manifest = Manifest(table_id=new_token(), version=0, parent=None, commit_id=commit_id,
                        created_at_ms=int(time.time() * 1000), operation="create",
                        schema=table_schema, properties=dict(properties or {}),
                        summary=complete_summary({}))
    key = manifest_key(0, token)
    store.put(key, manifest.to_bytes(), mode=PutMode.CREATE)
    pointer = Pointer(manifest.table_id, 0, key, commit_id)
    try:
        store.put(pointer_key, pointer.to_bytes(), mode=PutMode.CREATE)
    except (AlreadyExists, StoreError) as err:
        # Settle by reading back: only our commit id means we created it.
        try:
            current, _ = MetadataIO(store, pointer_key=pointer_key).read_pointer()
        except TableNotFound:
            raise err from None
        except StoreError as unreadable:
            raise CommitOutcomeUnknown(f"creating the table at {store.uri}: the pointer "
                                       f"write failed ({err}) and could not be read back "
                                       f"({unreadable})", commit_id=commit_id, version=0
                                       ) from err
        if current.commit_id != commit_id:
            store.delete(key)  # the slot is provably someone else's: our manifest is an orphan
            raise TableAlreadyExists(f"a table already exists at {store.uri}") from None
    return Snapshot(manifest, key)
