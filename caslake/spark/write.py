"""Spark batch writes into a caslake table: ``df.write.format("caslake")``.

Each task writes Parquet data files and returns their manifest entries (plain
JSON, plus the table schema they were written with); the driver commits all of
them as exactly one version (:mod:`caslake.spark.commit`), creating the table
from the DataFrame schema first if there is none.  ``abort`` deletes the files
of a failed job unless its commit may have landed.

Options (besides the storage ones): ``txnAppId`` and ``txnVersion`` make the
write idempotent: the pair is recorded in the same commit as the data, and a
write whose app id already has this version or a later one in the table is a
no-op (checked when the job is planned, so no task writes anything, and again
at commit time).  Give both or neither.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from caslake.core import MetadataIO, check_txn, txn_applied
from caslake.errors import InvalidArgument, SchemaMismatch, StoreError, TableNotFound
from caslake.format import PARTITION_FORMAT_VERSION
from caslake.format.keys import new_token
from caslake.format.manifest import DataFile, parse_data_file, parse_partitioning
from caslake.format.partition import Partitioning, PartitionSpec, write_spec
from caslake.format.schema import TableSchema
from caslake.ops.write import WriteOptions, write_data_files
from caslake.spark.commit import abort_files, commit_files, forget_commit
from caslake.spark.messages import table_schema_from_json
from caslake.spark.types import arrow_schema_for, check_writable, conform_for_write
from caslake.store import open_store
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions

TXN_APP_ID = "txnAppId"
TXN_VERSION = "txnVersion"


def txn_from_options(options: Mapping[str, str]) -> tuple[str, int] | None:
    """``(txnAppId, txnVersion)`` from the write options, or None if neither is given.
    Raises InvalidArgument (naming the option) if only one is given or one is bad."""
    app_id = options.get(TXN_APP_ID)
    raw = options.get(TXN_VERSION)
    if app_id is None and raw is None:
        return None
    if raw is None:
        raise InvalidArgument(f"option {TXN_APP_ID} needs option {TXN_VERSION} (the "
                              "version of this write for that app id): give both or neither")
    if app_id is None:
        raise InvalidArgument(f"option {TXN_VERSION} needs option {TXN_APP_ID} (the id of "
                              "the application whose writes it numbers): give both or neither")
    if not app_id.strip():
        raise InvalidArgument(f"option {TXN_APP_ID} must not be empty")
    try:
        version = int(raw)
    except ValueError:
        raise InvalidArgument(f"option {TXN_VERSION} must be an integer >= 0, "
                              f"not {raw!r}") from None
    if version < 0:
        raise InvalidArgument(f"option {TXN_VERSION} must be an integer >= 0, not {raw!r}")
    return check_txn((app_id, version))


PARTITION_OVERWRITE_MODE = "partitionOverwriteMode"


def dynamic_overwrite(mode: str | None) -> bool:
    """Is Spark's ``partitionOverwriteMode`` ``dynamic`` (else ``static``, the default)?
    Anything else is InvalidArgument naming the option."""
    if mode is None or mode.strip().lower() == "static":
        return False
    if mode.strip().lower() == "dynamic":
        return True
    raise InvalidArgument(f"option {PARTITION_OVERWRITE_MODE} must be 'static' or "
                          f"'dynamic', not {mode!r}")


def specs_from_json(obj: Mapping[str, Any] | None, schema: TableSchema) -> Partitioning | None:
    """``Partitioning.to_json()`` parsed back (None stays None); CorruptMetadata if bad."""
    if obj is None:
        return None
    return parse_partitioning(dict(obj), schema, PARTITION_FORMAT_VERSION,
                              source="spark commit message")


def data_file(obj: Mapping[str, Any], schema: TableSchema,
              partitioning: Mapping[str, Any] | None) -> DataFile:
    """A task's ``DataFile.to_json()`` entry parsed back, its partition checked against
    the specs it was written under (``Partitioning.to_json()``); CorruptMetadata if bad."""
    return parse_data_file(dict(obj), schema, source="spark commit message",
                           partitioning=specs_from_json(partitioning, schema))


def _spark_arrow_type(f: StructField) -> pa.DataType:
    t: pa.DataType = to_arrow_schema(StructType([f]), timezone="UTC").field(0).type
    return t


@dataclass
class CaslakeCommitMessage(WriterCommitMessage):
    """What one write task uploaded: ``DataFile.to_json()`` entries and the table
    schema (``TableSchema.to_json()``) they were written with.  Plain, picklable.

    Examples:
        >>> msg = CaslakeCommitMessage(job_id='j1', rows=0)  # what a task sends its driver
        >>> msg.rows
        0
    """

    job_id: str
    files: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    schema: dict[str, Any] | None = None
    started_at_ms: int | None = None  # the task's clock before its first upload
    # The table's partition specs the files were written under (None: unpartitioned).
    partitioning: dict[str, Any] | None = None


class WriteTarget:
    """The table a job writes to, resolved once on the driver (picklable: plain values).

    Checks the DataFrame schema against the table before any task runs; for a
    table that does not exist yet the schema comes from the DataFrame."""

    def __init__(self, uri: str, storage_options: StorageOptions, schema: StructType) -> None:
        self.uri = uri
        self.storage_options = storage_options
        self.start_version: int | None
        self.txns: dict[str, int] = {}
        # The table's partition specs (Partitioning.to_json()): tasks write with
        # the default one, so no file spans partitions.  None: unpartitioned.
        self.partitioning: dict[str, Any] | None = None
        try:
            snap = MetadataIO(self.open_store()).latest()
            table_schema = snap.manifest.schema
            self.start_version = snap.version
            self.txns = dict(snap.manifest.txns)
            if snap.manifest.partitioning is not None:
                self.partitioning = snap.manifest.partitioning.to_json()
        except TableNotFound:
            table_schema = TableSchema.from_arrow(arrow_schema_for(schema))
            self.start_version = None  # the commit creates the table
        target = table_schema.to_arrow()
        for f in schema.fields:
            if f.name not in target.names:
                raise SchemaMismatch(f"column {f.name!r} is not in the table schema "
                                     f"(columns: {', '.join(target.names)})", column=f.name)
            check_writable(_spark_arrow_type(f), target.field(f.name).type, f.name,
                           f.dataType.simpleString())
        # As Table.append (and deltalake): every table column must be in the data.
        # Checked here, on the driver, so no task runs and the error is not wrapped.
        given = set(schema.fieldNames())
        missing = [tf for tf in target if tf.name not in given]
        if missing:
            listed = ", ".join(f"{tf.name!r} ({tf.type})" for tf in missing)
            raise SchemaMismatch(f"the DataFrame is missing column(s) {listed} of the table; "
                                 "add them (F.lit(None).cast(...) where unknown) or select "
                                 "them", column=missing[0].name, expected=str(missing[0].type))
        self.table_schema = table_schema.to_json()

    def spec(self, schema: TableSchema) -> PartitionSpec | None:
        """The partition spec tasks write with (None: unpartitioned)."""
        return write_spec(specs_from_json(self.partitioning, schema))

    def open_store(self) -> ObjectStore:
        return open_store(self.uri, self.storage_options or None)

    def write_task(self, store: ObjectStore, job_id: str,
                   batches: Iterator[pa.RecordBatch]) -> CaslakeCommitMessage:
        """Upload one task's rows as data files (on an executor); on failure remove
        what this task uploaded, since nothing can reference it."""
        started_at_ms = int(time.time() * 1000)
        schema = table_schema_from_json(self.table_schema)
        target = schema.to_arrow()
        uploaded: list[str] = []
        put_file = store.put_file

        def recording_put_file(key: str, path: str, **kwargs: Any) -> str:
            etag = put_file(key, path, **kwargs)
            uploaded.append(key)
            return etag

        store.put_file = recording_put_file  # type: ignore[method-assign]
        try:
            files = write_data_files(store, (conform_for_write(b, target) for b in batches),
                                     schema, WriteOptions(), spec=self.spec(schema))
        except BaseException:
            for key in uploaded:
                with contextlib.suppress(StoreError):
                    store.delete(key)
            raise
        return CaslakeCommitMessage(job_id, [f.to_json() for f in files],
                                    sum(f.row_count for f in files), self.table_schema,
                                    started_at_ms, self.partitioning)


def written_files_task(target: WriteTarget, job_id: str, batches: Iterator[pa.RecordBatch]
                       ) -> Iterator[pa.RecordBatch]:
    """A Spark task of a ``mapInArrow`` job (``"file string"``): write the rows as data
    files (:meth:`WriteTarget.write_task`), return their ``DataFile.to_json()`` as JSON."""
    message = target.write_task(target.open_store(), job_id, batches)
    yield pa.RecordBatch.from_arrays(
        [pa.array([json.dumps(f) for f in message.files], pa.string())], names=["file"])


def uploads_started(messages: Sequence[WriterCommitMessage | None]) -> int | None:
    """When the first task that uploaded a file began (ms), for gc's fence."""
    starts = [m.started_at_ms for m in messages if isinstance(m, CaslakeCommitMessage)
              and m.files and m.started_at_ms is not None]
    return min(starts) if starts else None


def message_files(messages: Sequence[WriterCommitMessage | None],
                  default_schema: Mapping[str, Any]) -> tuple[TableSchema, list[DataFile]]:
    """The schema the tasks wrote with and every file they uploaded (each file's
    partition checked against the specs its task wrote with)."""
    ours = [m for m in messages if isinstance(m, CaslakeCommitMessage)]
    schemas = {json.dumps(m.schema, sort_keys=True) for m in ours
               if m.schema is not None and m.files}
    if len(schemas) > 1:
        raise SchemaMismatch("the tasks of one write used different table schemas "
                             "(the table was created or changed during the write)")
    js = next((m.schema for m in ours if m.schema is not None and m.files), default_schema)
    schema = table_schema_from_json(js)
    return schema, [data_file(d, schema, m.partitioning) for m in ours for d in m.files]


class CaslakeWriter(DataSourceArrowWriter):
    """One Spark batch write job: tasks upload data files, the driver commits them once.

    ``commit`` and ``abort`` open their store through :meth:`open_store`, the one
    place to wrap it (e.g. in a FaultyStore for fault-injection tests).

    Examples:
        >>> df.write.format('caslake').mode('append').save('/data/events')  # doctest: +SKIP
    """

    def __init__(self, uri: str, storage_options: StorageOptions, schema: StructType,
                 overwrite: bool, txn: tuple[str, int] | None = None,
                 partition_overwrite_mode: str | None = None) -> None:
        self.overwrite = overwrite
        # Spark's partitionOverwriteMode: "dynamic" replaces only the partitions the
        # job writes (an unpartitioned table: every row, as Delta does).
        self.dynamic = dynamic_overwrite(partition_overwrite_mode)
        self.txn = check_txn(txn) if txn is not None else None
        self.job_id = new_token()  # also the commit id
        self.target = WriteTarget(uri, storage_options, schema)
        # A replayed job (its txn already landed) writes nothing at all.
        self.replay = self.txn is not None and txn_applied(self.target.txns, self.txn)

    @property
    def uri(self) -> str:
        return self.target.uri

    def open_store(self) -> ObjectStore:
        return self.target.open_store()

    def write(self, iterator: Iterator[pa.RecordBatch]  # type: ignore[override]
              ) -> CaslakeCommitMessage:
        if self.replay:
            return CaslakeCommitMessage(self.job_id, [], 0, self.target.table_schema)
        return self.target.write_task(self.open_store(), self.job_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        schema, files = message_files(messages, self.target.table_schema)
        params = {"engine": "spark"}
        if self.txn is not None:
            params["txn_app_id"] = self.txn[0]
        commit_files(self.open_store(), uri=self.target.uri,
                     storage_options=self.target.storage_options, schema=schema, files=files,
                     start_version=self.target.start_version, commit_id=self.job_id,
                     overwrite=self.overwrite, txn=self.txn, params=params,
                     started_at_ms=uploads_started(messages), dynamic=self.dynamic)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _, files = message_files(messages, self.target.table_schema)
        if not files:
            forget_commit(self.job_id)
            return
        abort_files(self.open_store(), files, commit_id=self.job_id,
                    start_version=self.target.start_version, txn=self.txn)

