"""The public Table facade: create, open, append, overwrite, scan, history.

A ``Table`` is a handle on a table URI.  ``version`` and ``schema`` describe
the snapshot the handle last saw (after its own commits, scans or
``refresh()``); every operation reads the pointer afresh, so writers always
commit on top of the latest version and a plain ``scan()`` reads the latest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from caslake.errors import (
    AlreadyExists,
    InvalidArgument,
    StoreError,
    TableAlreadyExists,
    TableNotFound,
)
from caslake.expr import Expr
from caslake.format.keys import POINTER_KEY, manifest_key, new_token
from caslake.format.manifest import Manifest, Pointer, format_ts
from caslake.format.schema import TableSchema
from caslake.store import open_store
from caslake.store.base import ObjectStore, PutMode
from caslake.table.changes import check_txn, txn_applied, write_prepare
from caslake.table.commit import CommitPolicy, commit_with_retry
from caslake.table.deletion_mask import TombstoneCache
from caslake.table.history import HistoryEntry, commit_counts, complete_summary
from caslake.table.interop import ArrowExport, deleted_rows_by_file, live_file_list
from caslake.table.metadata_io import MetadataIO, Snapshot
from caslake.table.scan import FooterCache, Scan
from caslake.table.transaction import Transaction
from caslake.table.write import WriteOptions, as_reader, write_data_files

if TYPE_CHECKING:
    from caslake.maintenance.gc import GcReport


@dataclass(frozen=True)
class CommitResult:
    """What one committed operation did (the counts of its manifest's summary, as
    in ``history()``; zero for a no-op), and what it cost in store requests."""

    version: int
    commit_id: str
    operation: str
    attempts: int
    files_added: int = 0
    rows_added: int = 0
    files_removed: int = 0
    rows_deleted: int = 0
    tombstones_added: int = 0
    noop: bool = False
    requests: dict[str, int] = field(default_factory=dict)


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


class Table(ArrowExport):
    """``pa.table(t)``, ``duckdb.sql('select ... from t')``, ``pl.DataFrame(t)``,
    ``t.to_pandas()`` and ``t.to_polars()`` read the latest version (see
    :mod:`caslake.table.interop`)."""

    def __init__(self, store: ObjectStore, snapshot: Snapshot, *,
                 write_options: WriteOptions | None = None,
                 commit_policy: CommitPolicy | None = None) -> None:
        self.store = store
        self.io = MetadataIO(store)
        self.io.remember(snapshot.key, snapshot.manifest)
        self._snapshot = snapshot
        self.footers = FooterCache()
        self.tombstones = TombstoneCache()
        self.write_options = write_options or WriteOptions()
        self.commit_policy = commit_policy or CommitPolicy()

    @classmethod
    def load(cls, store: ObjectStore, **kwargs: Any) -> Table:
        """Open the table that lives in ``store`` (any ObjectStore, e.g. a wrapped one)."""
        io = MetadataIO(store)
        table = cls(store, io.latest(), **kwargs)
        table.io = io
        return table

    # --- state ---------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self.store.uri

    @property
    def version(self) -> int:
        return self._snapshot.version

    @property
    def schema(self) -> pa.Schema:
        return self._snapshot.manifest.schema.to_arrow()

    @property
    def table_schema(self) -> TableSchema:
        return self._snapshot.manifest.schema

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def _set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def refresh(self) -> Table:
        self._snapshot = self.io.latest()
        return self

    def _resolve(self, version: int | None, as_of: datetime | str | int | None) -> Snapshot:
        if version is not None and as_of is not None:
            raise InvalidArgument("give either version or as_of, not both")
        head = self.io.latest()
        self._snapshot = head
        if version is not None:
            return self.io.at_version(head, version)
        if as_of is not None:
            return self.io.as_of(head, _ts_to_ms(as_of))
        return head

    # --- reads ---------------------------------------------------------------------

    def scan(self, columns: Sequence[str] | None = None, where: str | Expr | None = None,
             version: int | None = None, as_of: datetime | str | int | None = None) -> Scan:
        """Pin a snapshot (latest, or by version / timestamp) and plan a read of it."""
        return Scan(self.io, self.footers, self._resolve(version, as_of), columns, where,
                    self.tombstones)

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
        from caslake.table.changes import Changes

        if not isinstance(updates, dict) or not updates or not all(
                isinstance(k, str) and k and isinstance(v, str) for k, v in updates.items()):
            raise InvalidArgument("set_properties needs a non-empty dict of non-empty string "
                                  f"keys to string values, not {updates!r}")
        before = self.store.counters.snapshot()
        outcome = commit_with_retry(
            self.io, lambda base: Changes("set_properties", properties=dict(updates),
                                          params={"keys": ",".join(sorted(updates))}),
            policy=self.commit_policy)
        self._snapshot = outcome.snapshot
        after = self.store.counters.snapshot()
        return CommitResult(version=outcome.snapshot.version, commit_id=outcome.commit_id,
                            operation="set_properties", attempts=outcome.attempts,
                            requests={k: after.get(k, 0) - before.get(k, 0) for k in after})

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        head = self._resolve(None, None)
        return [HistoryEntry.of(s.manifest, s.key) for s in self.io.history(head, limit)]

    # --- writes --------------------------------------------------------------------

    def append(self, data: Any, *, txn: tuple[str, int] | None = None,
               params: dict[str, str] | None = None) -> CommitResult:
        """Write ``data`` as new data files and commit them as exactly one new version."""
        return self._write("append", data, remove_all=False, txn=txn, params=params)

    def overwrite(self, data: Any, *, txn: tuple[str, int] | None = None,
                  params: dict[str, str] | None = None) -> CommitResult:
        """Replace every row with ``data`` in one version.

        Conflicts (``CommitConflict``) with any commit that lands between
        planning and committing, so concurrent rows are never silently dropped."""
        return self._write("overwrite", data, remove_all=True, txn=txn, params=params)

    def _write(self, operation: str, data: Any, *, remove_all: bool,
               txn: tuple[str, int] | None, params: dict[str, str] | None) -> CommitResult:
        before = self.store.counters.snapshot()
        if txn is not None:
            txn = check_txn(txn)
        start = self.io.latest() if remove_all or txn else self._snapshot
        if txn_applied(start.manifest.txns, txn):
            return CommitResult(start.version, start.manifest.commit_id, operation, 0, noop=True)
        files = write_data_files(self.store, as_reader(data), start.manifest.schema,
                                 self.write_options)
        if not files and not remove_all:
            return CommitResult(self.version, "", operation, 0, noop=True)
        prepare = write_prepare(operation, files, start.manifest.schema, remove_all=remove_all,
                                txn=txn, params=params,
                                requires_version=start.version if remove_all else None)
        outcome = commit_with_retry(self.io, prepare, policy=self.commit_policy)
        self._snapshot = outcome.snapshot
        after = self.store.counters.snapshot()
        m = outcome.snapshot.manifest
        return CommitResult(
            version=m.version, commit_id=outcome.commit_id, operation=operation,
            attempts=outcome.attempts, noop=outcome.noop,
            **({} if outcome.noop else commit_counts(m)),
            requests={k: after.get(k, 0) - before.get(k, 0) for k in after})

    def delete(self, where: str | Expr, *, read_version: int | None = None) -> CommitResult:
        """Delete the rows matching ``where`` without rewriting any data file.

        One tombstone object and one commit; a delete that matches nothing
        creates no version (``noop`` is True, ``rows_deleted`` 0).  With
        ``read_version`` the delete refuses (CommitConflict) to commit over any
        commit since that version that changed rows ``where`` could match."""
        tx = Transaction(self, read_version=read_version)
        tx.delete(where)
        return tx.commit()

    def upsert(self, data: Any, key: list[str] | str, *, read_version: int | None = None,
               on_duplicate: str = "error") -> CommitResult:
        """CDC-style change in one commit: delete the current rows whose ``key``
        columns equal a key in ``data``, then append ``data``.

        For a read-modify-write (new values computed from rows read at version
        ``v``), pass ``read_version=v``: the upsert then raises CommitConflict
        instead of committing over a concurrent change to any of those keys.

        A key twice in ``data`` raises DuplicateKey; ``on_duplicate="last"`` (or
        ``"first"``) keeps that row of each key instead."""
        tx = Transaction(self, read_version=read_version)
        tx.upsert(data, key, on_duplicate=on_duplicate)
        return tx.commit()

    def transaction(self, *, read_version: int | None = None) -> Transaction:
        """``with table.transaction() as tx: tx.delete(...); tx.append(...)`` commits
        everything as one version on a clean exit, nothing if the block raises.
        ``read_version``: see :meth:`upsert`."""
        return Transaction(self, read_version=read_version)

    def compact(self, *, target_file_size: int | None = None, deleted_fraction: float = 0.1
                ) -> CommitResult:
        """Rewrite small files, and files ``deleted_fraction`` or more of whose rows are
        deleted, into new files in one commit (see :mod:`caslake.maintenance.compact`)."""
        from caslake.maintenance.compact import compact

        return compact(self, target_file_size=target_file_size,
                       deleted_fraction=deleted_fraction)

    def gc(self, *, retention: timedelta = timedelta(days=7), dry_run: bool = False,
           now: datetime | None = None, force: bool = False) -> GcReport:
        """Expire versions older than ``retention`` and delete the objects no retained
        version references (see :mod:`caslake.maintenance.gc`)."""
        from caslake.maintenance.gc import collect_garbage

        return collect_garbage(self, retention=retention, dry_run=dry_run, now=now, force=force)

    def describe(self) -> dict[str, Any]:
        snap = self._resolve(None, None)
        m = snap.manifest
        files = self.io.live_files(snap)
        deleted = deleted_rows_by_file(m)
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


def create_table(uri: str, schema: pa.Schema, *, storage_options: dict[str, str] | None = None,
                 properties: dict[str, str] | None = None,
                 write_options: WriteOptions | None = None) -> Table:
    """Create an empty table (version 0).  Raises TableAlreadyExists."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgument(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
    store = open_store(uri, storage_options)
    table_schema = TableSchema.from_arrow(schema)
    if store.exists(POINTER_KEY):
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
        store.put(POINTER_KEY, pointer.to_bytes(), mode=PutMode.CREATE)
    except (AlreadyExists, StoreError) as err:
        # Settle by reading back: only our commit id means we created it.
        try:
            io = MetadataIO(store)
            current, _ = io.read_pointer()
        except (TableNotFound, StoreError):
            raise err from None
        if current.commit_id != commit_id:
            store.delete(key)  # the slot is provably someone else's: our manifest is an orphan
            raise TableAlreadyExists(f"a table already exists at {store.uri}") from None
    return Table(store, Snapshot(manifest, key), write_options=write_options)


def open_table(uri: str, *, storage_options: dict[str, str] | None = None,
               write_options: WriteOptions | None = None) -> Table:
    """Open an existing table at its latest version.  Raises TableNotFound."""
    return Table.load(open_store(uri, storage_options), write_options=write_options)
