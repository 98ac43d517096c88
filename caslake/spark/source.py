"""The ``caslake`` PySpark data source (Python Data Source API, Spark 4.3).

Read: ``spark.read.format("caslake").option(...).load(uri)``.  The reader pins
one snapshot when the read is planned (its constructor resolves ``version`` /
``timestamp`` or the latest version once), plans the scan on the driver with
the absorbed filters (file and row-group pruning), and hands every executor
task one data file: its manifest entry, its tombstones, the surviving row
groups, the columns and the predicate.  The task rebuilds a one-file snapshot
and runs caslake's own Scan on it, so deletes and the exact row filter apply
as in ``Table.scan``; no metadata is re-read on executors.

Write: ``df.write.format("caslake").mode("append" | "overwrite").save(uri)``.
Each task writes Parquet data files and returns their manifest entries (as
JSON); the driver makes exactly one commit with all of them (creating the
table from the DataFrame schema first if there is none).  ``abort`` deletes
the files of a failed job, unless the commit outcome may be unknown or the
files are referenced by the table.

Options: ``storage_options`` (a JSON object) and ``storage.<key>`` (one each);
for reads also ``version``, ``timestamp`` (ISO-8601 or epoch milliseconds)
and ``columns`` (a comma list narrowing the schema).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from caslake.errors import (
    CaslakeError,
    CommitConflict,
    CommitOutcomeUnknown,
    InvalidArgument,
    SchemaMismatch,
    StoreError,
    TableAlreadyExists,
    TableNotFound,
    UserInputError,
)
from caslake.expr import Expr
from caslake.format.keys import new_token
from caslake.format.manifest import DataFile, Manifest, TombstoneRef, parse_data_file
from caslake.format.schema import Field, TableSchema
from caslake.spark.filters import split_filters
from caslake.spark.types import (
    arrow_schema_for,
    conform_for_read,
    conform_for_write,
    spark_schema_for,
    spark_type_for,
    writable,
)
from caslake.store import open_store
from caslake.store.base import ObjectStore
from caslake.table.changes import Changes
from caslake.table.commit import commit_with_retry
from caslake.table.deletion_mask import TombstoneCache
from caslake.table.metadata_io import MetadataIO, Snapshot
from caslake.table.scan import FooterCache, Scan
from caslake.table.table import create_table, open_table
from caslake.table.write import WriteOptions, write_data_files

log = logging.getLogger(__name__)

SOURCE_NAME = "caslake"


# --- options ----------------------------------------------------------------------


def storage_options_from(options: Mapping[str, str]) -> dict[str, str]:
    """``storage_options`` (a JSON object) merged with every ``storage.<key>`` option."""
    out: dict[str, str] = {}
    raw = options.get("storage_options")
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError as e:
            raise InvalidArgument(f"option storage_options is not valid JSON ({e})") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument("option storage_options must be a JSON object")
        out.update({str(k): str(v) for k, v in parsed.items()})
    for k, v in options.items():
        if k.lower().startswith("storage.") and len(k) > len("storage."):
            out[k[len("storage."):]] = str(v)
    return out


@dataclass(frozen=True)
class ReadOptions:
    uri: str
    storage_options: dict[str, str]
    version: int | None = None
    timestamp: str | int | None = None
    columns: list[str] | None = None

    @staticmethod
    def parse(options: Mapping[str, str]) -> ReadOptions:
        uri = options.get("path")
        if not uri:
            raise InvalidArgument("caslake needs the table URI: .load(uri) or .option('path', uri)")
        version: int | None = None
        if options.get("version") not in (None, ""):
            try:
                version = int(options["version"])
            except ValueError:
                raise InvalidArgument(f"option version must be an integer, not "
                                      f"{options['version']!r}") from None
        ts: str | int | None = options.get("timestamp") or None
        if isinstance(ts, str) and ts.strip().lstrip("-").isdigit():
            ts = int(ts)
        if version is not None and ts is not None:
            raise InvalidArgument("give either option version or option timestamp, not both")
        columns = None
        if options.get("columns"):
            columns = [c.strip() for c in options["columns"].split(",") if c.strip()]
        return ReadOptions(uri, storage_options_from(options), version, ts, columns)


def _table_schema_from_json(js: Mapping[str, Any]) -> TableSchema:
    return TableSchema(tuple(Field(int(f["id"]), str(f["name"]), str(f["type"]),
                                   bool(f["nullable"])) for f in js["fields"]),
                       schema_id=int(js.get("schema_id", 0)))


def data_file_from_json(obj: Mapping[str, Any], schema: TableSchema) -> DataFile:
    """Parse a ``DataFile.to_json()`` dict back, validated by the manifest codec."""
    return parse_data_file(dict(obj), schema, source="spark commit message")


# --- reading ----------------------------------------------------------------------


@dataclass
class CaslakePartition(InputPartition):
    """One planned data file of the pinned snapshot (picklable: plain values only)."""

    uri: str
    storage_options: dict[str, str]
    version: int
    manifest_key: str
    schema: dict[str, Any]  # TableSchema.to_json()
    file: dict[str, Any]  # DataFile.to_json()
    tombstones: list[tuple[str, int, str, int]]  # (path, size, etag, rows deleted in file)
    row_groups: list[int]
    columns: list[str]
    where: Expr | None = None
    where_text: str = ""

    def __post_init__(self) -> None:
        super().__init__(self.file["path"])


def read_partition(p: CaslakePartition) -> Iterator[pa.RecordBatch]:
    """Live, matching rows of one partition, as caslake's Scan produces them."""
    store = open_store(p.uri, p.storage_options or None)
    schema = _table_schema_from_json(p.schema)
    data_file = data_file_from_json(p.file, schema)
    refs = tuple(TombstoneRef(path, size, etag, {data_file.path: n})
                 for path, size, etag, n in p.tombstones)
    # A one-file view of the pinned version: same schema, this file, its tombstones.
    manifest = Manifest(table_id="", version=p.version, parent=None, commit_id="",
                        created_at_ms=0, operation="spark-read", schema=schema,
                        files=(data_file,), tombstones=refs)
    scan = Scan(MetadataIO(store), FooterCache(), Snapshot(manifest, p.manifest_key),
                p.columns, p.where, TombstoneCache())
    wanted = set(p.row_groups)
    for task in scan.plan().tasks:
        task.row_groups = [rg for rg in task.row_groups if rg in wanted]
    yield from scan.to_batches()


class CaslakeReader(DataSourceReader):
    """Plans a read of one pinned snapshot; see the module docstring."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.columns = list(schema.fieldNames())
        table = open_table(options.uri, storage_options=options.storage_options or None)
        scan = table.scan(columns=self.columns, version=options.version,
                          as_of=options.timestamp)  # pins the snapshot, once
        self.version = scan.snapshot.version
        self.manifest_key = scan.snapshot.key
        self.table_schema = scan.snapshot.manifest.schema.to_json()
        arrow = scan.snapshot.manifest.schema.to_arrow()
        for f in schema.fields:
            have = spark_type_for(arrow.field(f.name).type)
            if have != f.dataType:
                raise SchemaMismatch(
                    f"column {f.name!r} is {have.simpleString()} at version {self.version} "
                    f"but the read expects {f.dataType.simpleString()} (the table changed "
                    "since the schema was read: load it again)", column=f.name)
        self.where: Expr | None = None

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        arrow = _table_schema_from_json(self.table_schema).to_arrow()
        self.where, rest = split_filters(list(filters), arrow)
        return rest

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        store = open_store(opts.uri, opts.storage_options or None)
        io = MetadataIO(store)
        snapshot = Snapshot(io.load_manifest(self.manifest_key), self.manifest_key)
        plan = Scan(io, FooterCache(), snapshot, self.columns, self.where,
                    TombstoneCache()).plan()
        refs = snapshot.manifest.tombstones
        return [CaslakePartition(
            uri=opts.uri, storage_options=opts.storage_options, version=self.version,
            manifest_key=self.manifest_key, schema=self.table_schema,
            file=task.file.to_json(),
            tombstones=[(r.path, r.size, r.etag, r.files[task.file.path])
                        for r in refs if task.file.path in r.files],
            row_groups=list(task.row_groups), columns=self.columns, where=self.where,
            where_text=str(self.where) if self.where is not None else "")
            for task in plan.tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, CaslakePartition):
            return iter(())  # Spark's placeholder partition for an empty plan
        expected = to_arrow_schema(self.schema, timezone="UTC")
        return (conform_for_read(b, expected) for b in read_partition(partition))


# --- writing ----------------------------------------------------------------------


@dataclass
class CaslakeCommitMessage(WriterCommitMessage):
    """What one write task uploaded: ``DataFile.to_json()`` entries (plain, picklable)."""

    job_id: str
    files: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0


def _state_path(job_id: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"caslake-spark-commit-{job_id}")


def _set_state(job_id: str, state: str | None) -> None:
    """Record the commit state of a job on the driver's disk: Spark runs ``commit``
    and ``abort`` in separate Python workers, each with a fresh copy of the writer."""
    path = _state_path(job_id)
    if state is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    with open(path, "w") as f:
        f.write(state)


def _get_state(job_id: str) -> str | None:
    try:
        with open(_state_path(job_id)) as f:
            return f.read().strip() or "committing"
    except FileNotFoundError:
        return None


class CaslakeWriter(DataSourceArrowWriter):
    """One Spark write job: tasks upload data files, the driver commits them once."""

    def __init__(self, uri: str, storage_options: dict[str, str], schema: StructType,
                 overwrite: bool) -> None:
        self.uri = uri
        self.storage_options = storage_options
        self.overwrite = overwrite
        self.job_id = new_token()  # also the commit id
        self.outcome_unknown = False
        io = MetadataIO(open_store(uri, storage_options or None))
        self.start_version: int | None
        try:
            snap = io.latest()
            table_schema = snap.manifest.schema
            self.start_version = snap.version
        except TableNotFound:
            table_schema = TableSchema.from_arrow(arrow_schema_for(schema))
            self.start_version = None  # the commit creates the table
        target = table_schema.to_arrow()
        for f in schema.fields:  # fail on the driver, before any task runs
            if f.name not in target.names:
                raise SchemaMismatch(f"column {f.name!r} is not in the table schema "
                                     f"(columns: {', '.join(target.names)})", column=f.name)
            src = _spark_arrow_type(f)
            if not writable(src, target.field(f.name).type):
                raise SchemaMismatch(f"column {f.name!r} has type {f.dataType.simpleString()} "
                                     f"in the DataFrame but {target.field(f.name).type} in "
                                     "the table", column=f.name)
        self.table_schema = table_schema.to_json()

    def _store(self) -> ObjectStore:
        return open_store(self.uri, self.storage_options or None)

    def write(self, iterator: Iterator[pa.RecordBatch]  # type: ignore[override]
              ) -> CaslakeCommitMessage:
        store = self._store()
        schema = _table_schema_from_json(self.table_schema)
        target = schema.to_arrow()
        uploaded: list[str] = []
        put_file = store.put_file

        def recording_put_file(key: str, path: str, **kwargs: Any) -> str:
            etag = put_file(key, path, **kwargs)
            uploaded.append(key)
            return etag

        store.put_file = recording_put_file  # type: ignore[method-assign]
        try:
            files = write_data_files(store, (conform_for_write(b, target) for b in iterator),
                                     schema, WriteOptions())
        except BaseException:
            for key in uploaded:  # never referenced: remove what this task uploaded
                with contextlib.suppress(StoreError):
                    store.delete(key)
            raise
        return CaslakeCommitMessage(self.job_id, [f.to_json() for f in files],
                                    sum(f.row_count for f in files))

    def _files(self, messages: Sequence[WriterCommitMessage | None]) -> list[DataFile]:
        schema = _table_schema_from_json(self.table_schema)
        return [data_file_from_json(d, schema) for m in messages
                if isinstance(m, CaslakeCommitMessage) for d in m.files]

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = self._files(messages)
        schema = _table_schema_from_json(self.table_schema)
        operation = "overwrite" if self.overwrite else "append"
        _set_state(self.job_id, "committing")
        try:
            io = MetadataIO(self._store())
            required = self.start_version
            if self.start_version is None:
                try:
                    create_table(self.uri, schema.to_arrow(),
                                 storage_options=self.storage_options or None)
                    required = 0
                except TableAlreadyExists:
                    if self.overwrite:
                        raise CommitConflict(
                            "the table was created by another writer during this overwrite",
                            help="re-run the overwrite") from None

            def prepare(base: Snapshot) -> Changes | None:
                if base.manifest.schema != schema:
                    raise CommitConflict("the table schema changed during the write",
                                         help="re-run the write against the new schema")
                if not files and not self.overwrite:
                    return None
                return Changes(operation, add_files=tuple(files), remove_all=self.overwrite,
                               params={"engine": "spark"},
                               requires_version=required if self.overwrite else None)

            commit_with_retry(io, prepare, commit_id=self.job_id)
        except (CommitConflict, UserInputError, TableNotFound):
            _set_state(self.job_id, None)  # provably not committed: abort may clean up
            raise
        except CommitOutcomeUnknown:
            self.outcome_unknown = True
            _set_state(self.job_id, "unknown")
            raise
        except BaseException:
            # Anything else (a store error mid-commit, ...) cannot prove the outcome.
            self.outcome_unknown = True
            _set_state(self.job_id, "unknown")
            raise
        _set_state(self.job_id, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        state = _get_state(self.job_id)
        if self.outcome_unknown or state is not None:
            log.warning("caslake: not deleting the data files of job %s: its commit outcome "
                        "is unknown (state %s); they are orphans for GC if it did not land",
                        self.job_id, state or "unknown")
            return
        files = self._files(messages)
        if not files:
            return
        store = self._store()
        try:  # never delete a file the table references (e.g. the commit did land)
            live = {f.path for f in MetadataIO(store).live_files(MetadataIO(store).latest())}
        except TableNotFound:
            live = set()
        except CaslakeError as e:
            log.warning("caslake: not deleting the data files of job %s: cannot read the "
                        "table to prove them unreferenced (%s)", self.job_id, e)
            return
        for f in files:
            if f.path not in live:
                with contextlib.suppress(StoreError):
                    store.delete(f.path)


def _spark_arrow_type(f: Any) -> pa.DataType:
    schema = to_arrow_schema(StructType([f]), timezone="UTC")
    t: pa.DataType = schema.field(0).type
    return t


# --- the data source --------------------------------------------------------------


class CaslakeDataSource(DataSource):
    """``format("caslake")``: transactional caslake tables as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        opts = ReadOptions.parse(self.options)
        table = open_table(opts.uri, storage_options=opts.storage_options or None)
        scan = table.scan(columns=opts.columns, version=opts.version, as_of=opts.timestamp)
        arrow = scan.snapshot.manifest.schema.to_arrow()
        return spark_schema_for(arrow, scan.columns)

    def reader(self, schema: StructType) -> CaslakeReader:
        return CaslakeReader(ReadOptions.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> CaslakeWriter:
        uri = self.options.get("path")
        if not uri:
            raise InvalidArgument("caslake needs the table URI: .save(uri)")
        for opt in ("version", "timestamp", "columns"):
            if self.options.get(opt):
                raise InvalidArgument(f"option {opt} only applies to reads")
        return CaslakeWriter(uri, storage_options_from(self.options), schema, overwrite)
