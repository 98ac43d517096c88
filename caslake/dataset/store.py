"""``ParquetDatasetStore`` (RFC-0008) on caslake's store layer, safe under concurrent writers.

Owns the write protocol of a dataset and the public API.  A write:

1. notes the current ``manifest.json`` (its ETag, or that there is none) --
   without ``overwrite`` an existing manifest is :class:`DatasetAlreadyExists`
   before anything is uploaded;
2. uploads its parts create-only under a fresh generation directory
   ``{key}/_gen-<hex>/`` (:mod:`caslake.dataset.write`);
3. commits by one conditional PUT of the top-level ``manifest.json``:
   create-only if there was none, a swap conditional on the noted ETag
   otherwise (both through :mod:`caslake.core.pointer`).
   A lost race is :class:`DatasetAlreadyExists` (no overwrite) or
   :class:`DatasetConflict`; an unclear reply is settled by reading the
   manifest back and comparing bytes;
4. writes the empty ``_SUCCESS`` marker, then ``_gen-<hex>/_COMMITTED``.

Old generations are never deleted by a write (readers may be reading them);
:meth:`ParquetDatasetStore.vacuum` does that later.  This module must never
import :mod:`caslake.table`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from caslake.core import Swap, create_record, put_new, record_holds, swap_record
from caslake.dataset.manifest import (
    COMMITTED,
    MANIFEST,
    SUCCESS,
    DatasetManifest,
    new_generation,
    schema_hash,
)
from caslake.dataset.read import (
    ReadPlan,
    load_manifest,
    plan_read,
    read_whole,
    resolve,
    stream,
)
from caslake.dataset.vacuum import VacuumReport, vacuum_datasets
from caslake.dataset.write import MiB, PartLayout, batch_stream, write_parts
from caslake.errors import (
    CommitOutcomeUnknown,
    DatasetAlreadyExists,
    DatasetConflict,
    DatasetIncomplete,
    DatasetNotFound,
    InvalidArgument,
    NotFound,
    StoreError,
)
from caslake.expr import BoundExpr, Expr
from caslake.store import open_store
from caslake.store.base import ObjectStore, PutMode
from caslake.store.keys import check_key
from caslake.store.options import StorageOptions

CODECS = frozenset({"none", "uncompressed", "snappy", "gzip", "brotli", "lz4", "zstd"})
#: Compressed bytes after which a part is closed and the next one started.
DEFAULT_MAX_BYTES_PER_FILE = 128 * MiB
#: Commit attempts after an unclear (transient) failure of the manifest PUT.
COMMIT_ATTEMPTS = 3


def _positive(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgument(f"{name} must be a positive integer or None, got {value!r}")
    return value


def _check_dataset_key(dataset_key: object) -> str:
    if not isinstance(dataset_key, str):
        raise InvalidArgument(f"dataset_key must be a string, got {type(dataset_key).__name__}")
    return check_key(dataset_key.strip("/") or dataset_key)


@dataclass(frozen=True)
class WriteIntent:
    """A write between :meth:`ParquetDatasetStore.begin_write` and ``commit_write``
    (plain values: picklable, e.g. for Spark tasks)."""

    dataset_key: str
    generation: str  # the directory, under the key, that holds this write's parts
    expected_etag: str | None  # the manifest this write replaces; None: create-only
    overwrite: bool


class ParquetDatasetStore:
    """Parquet datasets (parts + ``manifest.json`` + ``_SUCCESS``) on an ObjectStore.

    ``store`` is an :class:`~caslake.store.ObjectStore` or a URI (with
    ``storage_options`` for ``s3://``).  Construction does no I/O."""

    def __init__(self, store: ObjectStore | str, *, compression: str = "zstd",
                 row_group_size: int | None = None, max_rows_per_file: int | None = None,
                 max_bytes_per_file: int | None = DEFAULT_MAX_BYTES_PER_FILE,
                 storage_options: StorageOptions | None = None) -> None:
        if isinstance(store, str):
            store = open_store(store, storage_options)
        elif not isinstance(store, ObjectStore):
            raise InvalidArgument(f"store must be a caslake ObjectStore or a URI, "
                                  f"got {type(store).__name__}")
        elif storage_options:
            raise InvalidArgument("storage_options only apply when store is a URI")
        if not isinstance(compression, str) or compression.lower() not in CODECS:
            raise InvalidArgument(f"compression must be one of {sorted(CODECS)}, "
                                  f"got {compression!r}")
        self._store = store
        self._compression = compression.lower()
        self._row_group_size = _positive("row_group_size", row_group_size)
        self._max_rows_per_file = _positive("max_rows_per_file", max_rows_per_file)
        self._max_bytes_per_file = _positive("max_bytes_per_file", max_bytes_per_file)

    def __repr__(self) -> str:
        return f"ParquetDatasetStore({self._store!r}, compression={self._compression!r})"

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def compression(self) -> str:
        return self._compression

    @property
    def row_group_size(self) -> int | None:
        return self._row_group_size

    @property
    def max_rows_per_file(self) -> int | None:
        return self._max_rows_per_file

    @property
    def max_bytes_per_file(self) -> int | None:
        return self._max_bytes_per_file

    # --- writes -------------------------------------------------------------------

    def write_dataset(self, table: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch],
                      dataset_key: str, *, overwrite: bool = False, run_id: str | None = None,
                      metadata: dict[str, str] | None = None) -> DatasetManifest:
        """Write ``table`` (or a stream of batches) as the dataset at ``dataset_key``.

        Without ``overwrite`` an existing dataset raises DatasetAlreadyExists; with
        it the dataset is replaced atomically (readers see the old or the new one,
        never a mix or nothing).  A concurrent writer that wins makes this one raise
        DatasetAlreadyExists or DatasetConflict, and nothing of this write becomes
        visible.  Returns the committed manifest."""
        key = _check_dataset_key(dataset_key)
        if run_id is not None and not isinstance(run_id, str):
            raise InvalidArgument(f"run_id must be a string or None, got {run_id!r}")
        if metadata is not None and not (
                isinstance(metadata, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
            raise InvalidArgument("metadata must be a dict of strings to strings")
        schema, batches = batch_stream(table)
        intent = self.begin_write(key, overwrite=overwrite)
        uploaded: list[str] = []
        layout = PartLayout(self._compression, self._row_group_size, self._max_rows_per_file,
                            self._max_bytes_per_file)
        try:
            parts = write_parts(self._store, key, intent.generation, schema, batches, layout,
                                uploaded)
        except Exception:
            self._remove(uploaded)  # nothing references them
            raise
        return self.commit_write(intent, [(p.name, p.rows) for p in parts], schema_hash(schema),
                                 run_id=run_id, metadata=metadata, uploaded=uploaded)

    def begin_write(self, dataset_key: str, *, overwrite: bool) -> WriteIntent:
        """Phase one of a (possibly distributed) write: note the manifest this write
        replaces and pick its generation.  Raises DatasetAlreadyExists without
        ``overwrite`` when there is a dataset.  Parts go under
        ``{dataset_key}/{intent.generation}/``."""
        key = _check_dataset_key(dataset_key)
        expected = self._current_etag(key)
        if expected is not None and not overwrite:
            raise self._already_exists(key)
        return WriteIntent(key, new_generation(), expected, overwrite)

    def commit_write(self, intent: WriteIntent, parts: Sequence[tuple[str, int]],
                     schema_digest: str, *, run_id: str | None = None,
                     metadata: dict[str, str] | None = None,
                     uploaded: Sequence[str] = ()) -> DatasetManifest:
        """Phase two: commit the uploaded ``parts`` (relative names and row counts, in
        order) with one conditional write of the manifest.  ``uploaded`` keys are
        deleted if the commit provably lost."""
        if not parts:
            raise InvalidArgument("a dataset needs at least one part")
        manifest = DatasetManifest(
            dataset_key=intent.dataset_key, parts=[name for name, _ in parts],
            row_count=sum(rows for _, rows in parts), schema_hash=schema_digest,
            compression=self._compression,
            created_at_utc=datetime.now(UTC).isoformat(), run_id=run_id,
            metadata=dict(metadata) if metadata is not None else None)
        self._commit(intent.dataset_key, manifest, intent.expected_etag,
                     overwrite=intent.overwrite, generation=intent.generation,
                     uploaded=list(uploaded))
        return manifest

    def _remove(self, keys: Iterable[str]) -> None:
        for k in keys:
            with contextlib.suppress(StoreError):
                self._store.delete(k)

    def _current_etag(self, key: str) -> str | None:
        try:
            return self._store.head(f"{key}/{MANIFEST}").etag
        except NotFound:
            return None

    def _already_exists(self, key: str) -> DatasetAlreadyExists:
        complete = self._store.exists(f"{key}/{SUCCESS}")
        why = "" if complete else (f" (its {MANIFEST} has no {SUCCESS} yet: a writer is "
                                   "committing it or crashed)")
        return DatasetAlreadyExists(f"dataset {key!r} already exists{why}; pass "
                                    "overwrite=True to replace it", key=f"{key}/{MANIFEST}")

    def _commit(self, key: str, manifest: DatasetManifest, expected: str | None, *,
                overwrite: bool, generation: str, uploaded: list[str]) -> None:
        mkey = f"{key}/{MANIFEST}"
        body = manifest.to_json().encode("utf-8")

        def lost(reason: str) -> Exception:
            self._remove(uploaded)  # the commit provably did not land: our parts can go
            if expected is None and not overwrite:
                return self._already_exists(key)
            return DatasetConflict(f"dataset {key!r}: {reason}",
                                   help="write the dataset again (overwrite=True replaces "
                                        "the new one)")

        if expected is None:
            if not create_record(self._store, mkey, body, what=f"dataset {key!r}",
                                 attempts=COMMIT_ATTEMPTS, commit_id=generation):
                raise lost("another writer created it first")
        else:
            self._swap_manifest(key, mkey, body, expected, generation, lost)
        # Committed.  The marker makes it readable for RFC readers; re-sending an
        # empty object is idempotent.
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                self._store.put(f"{key}/{SUCCESS}", b"", mode=PutMode.OVERWRITE)
                break
            except StoreError as exc:
                if attempt == COMMIT_ATTEMPTS:
                    raise DatasetIncomplete(
                        f"dataset {key!r}: the manifest was committed but {SUCCESS} could "
                        f"not be written ({exc}); write it again with overwrite=True",
                        dataset_key=key) from exc
        with contextlib.suppress(StoreError):  # only helps vacuum date the switch
            put_new(self._store, f"{key}/{generation}/{COMMITTED}", b"")

    def _swap_manifest(self, key: str, mkey: str, body: bytes, expected: str,
                       generation: str, lost: Callable[[str], Exception]) -> None:
        """Swap ``manifest.json`` from ``expected`` to ``body``; raise ``lost(...)``
        when provably lost, CommitOutcomeUnknown when it may still apply."""
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                done = swap_record(self._store, mkey, body, expected)
            except NotFound:
                raise lost("it was deleted while this write ran") from None
            if done:
                return
            if done.outcome is Swap.LOST:
                if record_holds(self._store, mkey, body):
                    return  # an unclear try of the store's own landed
                raise lost("another writer replaced it after this write started"
                           ) from done.error
            # Unclear: the PUT may have applied.  Settle by reading back.
            try:
                current = self._store.get(mkey)
            except NotFound:
                current = None
            except StoreError:
                if attempt == COMMIT_ATTEMPTS:
                    raise CommitOutcomeUnknown(
                        f"dataset {key!r}: the manifest write failed ({done.error}) and "
                        "could not be read back; read the dataset before writing again",
                        commit_id=generation) from done.error
                continue
            if current is not None and current.data == body:
                return
            if current is None or current.etag != expected:
                # Our conditional PUT can no longer apply: provably lost.
                raise lost("another writer moved it while this write ran") from done.error
        # A delayed copy of our PUT may still apply: keep the parts.
        raise CommitOutcomeUnknown(
            f"dataset {key!r}: the manifest write kept failing and may still apply; read "
            "the dataset before writing again", commit_id=generation)

    # --- reads --------------------------------------------------------------------

    def read_dataset(self, dataset_key: str, *, columns: Sequence[str] | None = None,
                     filter: str | Expr | None = None, verify: bool = True) -> pa.Table:
        """The dataset as one Table.  Raises DatasetIncomplete without ``_SUCCESS`` or
        with a missing part (checked before any part is read), ManifestCorrupted when
        the manifest is damaged or disagrees with the parts (``verify``)."""
        key = _check_dataset_key(dataset_key)
        resolved = resolve(self._store, key, verify=verify)
        if filter is None:
            return read_whole(self._store, resolved, columns, verify=verify)
        plan, bound = plan_read(self._store, resolved, columns, filter, verify=verify)
        return pa.Table.from_batches(list(stream(plan, bound)), schema=plan.schema)

    def read_batches(self, dataset_key: str, columns: Sequence[str] | None = None, *,
                     filter: str | Expr | None = None, verify: bool = True
                     ) -> pa.RecordBatchReader:
        """Stream the dataset one row group at a time.  ``filter`` is a caslake
        predicate (SQL text or ``caslake.col(...)`` expression); parts and row groups
        whose statistics rule it out are skipped, the rest filtered exactly.  All
        parts are checked before the first batch."""
        plan, bound = self.plan_read(dataset_key, columns, filter=filter, verify=verify)
        return pa.RecordBatchReader.from_batches(plan.schema, stream(plan, bound))

    def plan_read(self, dataset_key: str, columns: Sequence[str] | None = None, *,
                  filter: str | Expr | None = None, verify: bool = True
                  ) -> tuple[ReadPlan, BoundExpr | None]:
        """What :meth:`read_batches` would read (``plan.describe()`` for humans)."""
        key = _check_dataset_key(dataset_key)
        resolved = resolve(self._store, key, verify=verify)
        return plan_read(self._store, resolved, columns, filter, verify=verify)

    def read_manifest(self, dataset_key: str) -> DatasetManifest:
        """The current manifest.  Raises DatasetNotFound when there is none."""
        key = _check_dataset_key(dataset_key)
        try:
            return load_manifest(self._store, key)[0]
        except NotFound:
            raise DatasetNotFound(f"no dataset at {key!r} ({MANIFEST} is missing)",
                                  key=f"{key}/{MANIFEST}") from None

    def dataset_exists(self, dataset_key: str) -> bool:
        """True when ``_SUCCESS`` exists (RFC PDS-007)."""
        return self._store.exists(f"{_check_dataset_key(dataset_key)}/{SUCCESS}")

    def list_datasets(self, prefix: str = "") -> list[str]:
        """Keys of every dataset (with a ``manifest.json``) under ``prefix``."""
        suffix = "/" + MANIFEST
        keys = {m.key[: -len(suffix)] for m in self._store.list(prefix)
                if m.key.endswith(suffix) and "/_gen-" not in m.key}
        return sorted(keys)

    # --- deletes ------------------------------------------------------------------

    def delete_dataset(self, dataset_key: str) -> None:
        """Remove every object under ``{dataset_key}/`` (RFC PDS-010): ``_SUCCESS`` first,
        so readers see an incomplete dataset rather than missing parts, then the
        manifest, then the rest.  Raises DatasetNotFound when nothing is there."""
        key = _check_dataset_key(dataset_key)
        objects = [m.key for m in self._store.list(key + "/")]
        if not objects:
            raise DatasetNotFound(f"no dataset at {key!r} (nothing under it)", key=key)
        first = [f"{key}/{SUCCESS}", f"{key}/{MANIFEST}"]
        for k in first:
            if k in objects:
                self._store.delete(k)
        for k in objects:
            if k not in first:
                self._store.delete(k)

    def vacuum(self, dataset_key: str | None = None, *,
               older_than: timedelta = timedelta(hours=1), dry_run: bool = False,
               now: Callable[[], datetime] | None = None) -> VacuumReport:
        """Delete generations superseded more than ``older_than`` ago and the parts of
        failed writes of that age (one dataset, or every dataset in the store).
        ``dry_run`` reports without deleting; ``now`` is the clock (tests)."""
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            raise InvalidArgument(f"older_than must be a timedelta >= 0, got {older_than!r}")
        key = None if dataset_key is None else _check_dataset_key(dataset_key)
        return vacuum_datasets(self._store, key, older_than=older_than, dry_run=dry_run,
                               now=now or (lambda: datetime.now(UTC)))
