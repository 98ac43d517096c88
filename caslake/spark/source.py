"""The ``caslake`` PySpark data source (Python Data Source API, Spark 4.3).

Read: ``spark.read.format("caslake").option(...).load(uri)``.  The reader pins
one snapshot when the read is planned (its constructor resolves ``version`` /
``timestamp`` or the latest version once), plans the scan on the driver with
the absorbed filters (file and row-group pruning), and hands every executor
task a :class:`~caslake.table.scan.SnapshotSubset` of one data file (its
manifest entry, its tombstones, the surviving row groups), the columns and the
predicate.  The task runs caslake's own Scan on that subset, so deletes and
the exact row filter apply as in ``Table.scan``; no metadata is re-read on
executors.

Write: ``df.write.format("caslake").mode("append" | "overwrite").save(uri)``
(:mod:`caslake.spark.write`): one table commit per job; options ``txnAppId`` +
``txnVersion`` make it idempotent.  Streaming: ``df.writeStream.format("caslake")``
(:mod:`caslake.spark.stream`): one commit per micro-batch, exactly once across
restarts.  Commit and abort rules: :mod:`caslake.spark.commit`.

Options: ``storage_options`` (a JSON object) and ``storage.<key>`` (one each);
for reads also ``version``, ``timestamp`` (ISO-8601 or epoch milliseconds)
and ``columns`` (a comma list narrowing the schema).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    Filter,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from caslake.api import open_table
from caslake.errors import (
    InvalidArgument,
    SchemaMismatch,
)
from caslake.expr import Expr
from caslake.spark.filters import split_filters
from caslake.spark.types import (
    conform_for_read,
    spark_schema_for,
    spark_type_for,
)
from caslake.store import open_store
from caslake.store.base import ObjectStore
from caslake.table.footers import FooterCache
from caslake.table.metadata_io import MetadataIO, Snapshot
from caslake.table.scan import Scan, SnapshotSubset

if TYPE_CHECKING:  # imported where used: these modules import this one
    from caslake.spark.stream import CaslakeStreamWriter
    from caslake.spark.write import CaslakeWriter

log = logging.getLogger(__name__)

SOURCE_NAME = "caslake"
# Reads: a file's surviving row groups are split into runs of about SPLIT_BYTES of
# column chunks, one Spark partition each, so one big file is read by several tasks
# at once; batches go to Spark in slices of at most READ_BATCH_ROWS rows, so the JVM
# never holds a whole decoded unit (up to ~64 MiB compressed) as one Arrow batch.
SPLIT_BYTES = 32 * 1024 * 1024
READ_BATCH_ROWS = 65_536


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


# --- reading ----------------------------------------------------------------------


@dataclass
class CaslakePartition(InputPartition):
    """Row groups of one planned data file of the pinned snapshot (picklable)."""

    uri: str
    storage_options: dict[str, str]
    subset: SnapshotSubset  # one file, its tombstones, the row groups to read
    columns: list[str]
    where: Expr | None = None
    where_text: str = ""

    def __post_init__(self) -> None:
        super().__init__(self.path)

    @property
    def path(self) -> str:
        return self.subset.files[0].path

    @property
    def row_groups(self) -> list[int]:
        return sorted(self.subset.row_groups.get(self.path, ()))


def split_row_groups(groups: Sequence[int], nbytes: int, target: int | None = None
                     ) -> list[list[int]]:
    """A file's surviving row groups (``nbytes`` of column chunks to read) cut into
    contiguous runs of about ``target`` bytes (default :data:`SPLIT_BYTES`): one
    Spark partition each, so one large file is read by several tasks at once."""
    if not groups:
        return []
    target = SPLIT_BYTES if target is None else target
    n = max(1, min(len(groups), -(-nbytes // max(target, 1))))
    size, extra = divmod(len(groups), n)
    out: list[list[int]] = []
    i = 0
    for k in range(n):
        j = i + size + (1 if k < extra else 0)
        out.append(list(groups[i:j]))
        i = j
    return out


def slice_batch(batch: pa.RecordBatch, rows: int) -> Iterator[pa.RecordBatch]:
    """``batch`` as zero-copy slices of at most ``rows`` rows."""
    if batch.num_rows <= rows:
        yield batch
        return
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)


def read_partition(p: CaslakePartition, store: ObjectStore | None = None
                   ) -> Iterator[pa.RecordBatch]:
    """Live, matching rows of one partition, as caslake's Scan produces them.

    ``store``: the store to read through (default: opened from the partition's URI
    and options), e.g. to observe its request counters."""
    if store is None:
        store = open_store(p.uri, p.storage_options or None)
    yield from Scan(MetadataIO(store), FooterCache(), p.subset, p.columns, p.where).to_batches()


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
        self.table_schema = scan.snapshot.manifest.schema
        arrow = self.table_schema.to_arrow()
        for f in schema.fields:
            have = spark_type_for(arrow.field(f.name).type)
            if have != f.dataType:
                raise SchemaMismatch(
                    f"column {f.name!r} is {have.simpleString()} at version {self.version} "
                    f"but the read expects {f.dataType.simpleString()} (the table changed "
                    "since the schema was read: load it again)", column=f.name)
        self.where: Expr | None = None

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        arrow = self.table_schema.to_arrow()
        self.where, rest = split_filters(list(filters), arrow)
        return rest

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        store = open_store(opts.uri, opts.storage_options or None)
        io = MetadataIO(store)
        snapshot = Snapshot(io.load_manifest(self.manifest_key), self.manifest_key)
        plan = Scan(io, FooterCache(), snapshot, self.columns, self.where).plan()
        return [CaslakePartition(
            uri=opts.uri, storage_options=opts.storage_options,
            subset=SnapshotSubset.of(snapshot, [task.file], {task.file.path: groups}),
            columns=self.columns, where=self.where,
            where_text=str(self.where) if self.where is not None else "")
            for task in plan.tasks
            for groups in split_row_groups(task.row_groups, task.bytes_to_read)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, CaslakePartition):
            return iter(())  # Spark's placeholder partition for an empty plan
        expected = to_arrow_schema(self.schema, timezone="UTC")
        return (conform_for_read(piece, expected) for b in read_partition(partition)
                for piece in slice_batch(b, READ_BATCH_ROWS))


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

    def _sink_uri(self) -> str:
        uri = self.options.get("path")
        if not uri:
            raise InvalidArgument("caslake needs the table URI: .save(uri) or .start(uri)")
        for opt in ("version", "timestamp", "columns"):
            if self.options.get(opt):
                raise InvalidArgument(f"option {opt} only applies to reads")
        return str(uri)

    def writer(self, schema: StructType, overwrite: bool) -> CaslakeWriter:
        from caslake.spark.write import CaslakeWriter, txn_from_options

        uri = self._sink_uri()
        txn = txn_from_options(self.options)
        return CaslakeWriter(uri, storage_options_from(self.options), schema, overwrite, txn)

    def streamWriter(self, schema: StructType, overwrite: bool) -> CaslakeStreamWriter:
        from caslake.spark.stream import CaslakeStreamWriter, stream_app_id

        uri = self._sink_uri()
        app_id = stream_app_id(self.options)
        return CaslakeStreamWriter(uri, storage_options_from(self.options), schema, overwrite,
                                   app_id)
