"""The ``caslake`` PySpark data source (Python Data Source API, Spark 4.3).

Read: ``spark.read.format("caslake").option(...).load(uri)``.  The reader pins
one snapshot when the read is planned (its constructor resolves ``version`` /
``timestamp`` or the latest version once), plans the scan on the driver, and
hands every executor task a :class:`~caslake.core.read.scan.SnapshotSubset`
(manifest entries, their tombstones, the row groups: a run of one large file's
row groups, or several small files packed together, sized as Spark sizes its
own file partitions; see :func:`plan_partitions`) and the columns.  The task
runs caslake's own Scan on that subset, so deletes apply as in ``Table.scan``;
no metadata is re-read on executors.  Tasks yield Arrow record batches straight
to Spark (no per-row Python).

The reader takes no pushed filters (it does not implement ``pushFilters``):
PySpark 4.3 keeps the read planned by a query's filter pushdown (the pickled
reader and its partitions) on the loaded DataFrame's data source object and
reuses it, without calling Python, for every later query of that DataFrame
(or a temp view of it) that has no filter Spark can hand to Python -- a plain
``count()``, an ``OR`` -- so a pruned read would leak into them (issue 27).
Spark applies every filter itself.  For file and row-group pruning, the read
option ``where`` (a caslake predicate, SQL text) narrows the DataFrame itself:
its read is planned with it, so reusing that read for the DataFrame's later
queries is right by construction.  ``caslake.spark.read_native`` (Spark's
Parquet reader) prunes by Spark's own filters.

Nested columns (structs, arrays, maps, to any depth) read and write as Spark's
nested types (:mod:`caslake.spark.types` maps every type).  Spark's own nested
column pruning does not reach a Python data source: PySpark 4.3's
``DataSource.reader`` is always handed the full schema (there is no hook to
receive the pruned one), so ``df.select("dev.os")`` decodes all of ``dev``; the
read option ``columns`` with dotted paths prunes the read to those leaves.

Write: ``df.write.format("caslake").mode("append" | "overwrite").save(uri)``
(:mod:`caslake.spark.write`): one table commit per job; options ``txnAppId`` +
``txnVersion`` make it idempotent.  Streaming: ``df.writeStream.format("caslake")``
(:mod:`caslake.spark.stream`): one commit per micro-batch, exactly once across
restarts.  Commit and abort rules: :mod:`caslake.spark.commit`.  Streaming reads
(``spark.readStream.format("caslake")``, offsets are table versions) and the batch
change feed (option ``readChangeFeed``): :mod:`caslake.spark.stream_source`.

Options: ``storage_options`` (a JSON object) and ``storage.<key>`` (one each);
for reads also ``version``, ``timestamp`` (ISO-8601 or epoch milliseconds),
``columns`` (a comma list narrowing the schema; a dotted path projects a nested
field, keeping the struct shape: ``id,dev.os,items.element.price`` gives
``dev struct<os>`` and ``items array<struct<price>>``, and only those leaves are
read), ``where`` (a predicate the
DataFrame's rows satisfy, pruning files and row groups) and ``minPartitions`` (the
cores to spread a read over, as Spark's ``spark.sql.files.minPartitionNum``;
default: the planning process's cores, which is Spark's default in local mode).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from caslake.core import (
    MetadataIO,
    Snapshot,
    external_uris,
    route,
)
from caslake.errors import (
    InvalidArgument,
    SchemaMismatch,
)
from caslake.spark.read_plan import (
    MIN_PARTITIONS,
    READ_BATCH_ROWS,
    CaslakePartition,
    ReadOptions,
    default_parallelism,
    file_partitions,
    read_partition,
    slice_batch,
    storage_options_from,
)
from caslake.spark.types import (
    conform_for_read,
    spark_schema_for,
    spark_type_for,
)
from caslake.store import open_store
from caslake.table import open_table

if TYPE_CHECKING:  # imported where used: these modules import this one
    from caslake.spark.stream import CaslakeStreamWriter
    from caslake.spark.stream_source import StreamOptions
    from caslake.spark.write import CaslakeWriter

log = logging.getLogger(__name__)

SOURCE_NAME = "caslake"



class CaslakeReader(DataSourceReader):
    """Plans a read of one pinned snapshot; see the module docstring.

    Examples:
        >>> df = spark.read.format('caslake').load('/data/events')  # doctest: +SKIP
        >>> df.where('id > 5').count()  # doctest: +SKIP
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        # The option's paths (nested fields projected: ``dev.os``), else the schema's columns.
        self.columns = options.columns or list(schema.fieldNames())
        table = open_table(options.uri, storage_options=options.storage_options or None)
        # Pins the snapshot, once; binds the ``where`` option (an InvalidPredicate
        # naming the construct is raised here, before any task runs).
        scan = table.scan(columns=self.columns, where=options.where, version=options.version,
                          as_of=options.timestamp)
        self.version = scan.snapshot.version
        self.manifest_key = scan.snapshot.key
        self.table_schema = scan.snapshot.manifest.schema
        arrow = scan.schema
        for f in schema.fields:
            if f.name not in arrow.names:
                raise SchemaMismatch(f"column {f.name!r} is not in the table at version "
                                     f"{self.version} (load it again)", column=f.name)
            have = spark_type_for(arrow.field(f.name).type, f.name)
            if have != f.dataType:
                raise SchemaMismatch(
                    f"column {f.name!r} is {have.simpleString()} at version {self.version} "
                    f"but the read expects {f.dataType.simpleString()} (the table changed "
                    "since the schema was read: load it again)", column=f.name)
        self.parallelism = options.min_partitions or default_parallelism()

    # No pushFilters: see the module docstring.  Everything partitions() and read()
    # use is fixed by the constructor (options -- the ``where`` option included --,
    # schema, pinned snapshot), so a read Spark reuses for another query of the same
    # DataFrame returns the same rows.

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        options = opts.storage_options or None
        own = open_store(opts.uri, options)
        manifest = MetadataIO(own).load_manifest(self.manifest_key)  # manifests are own
        io = MetadataIO(route(own, external_uris(manifest), options))
        snapshot = Snapshot(manifest, self.manifest_key)
        return file_partitions(io, snapshot, None, None, self.columns, opts.where,
                               self.parallelism, opts.uri, opts.storage_options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, CaslakePartition):
            return iter(())  # Spark's placeholder partition for an empty plan
        expected = to_arrow_schema(self.schema, timezone="UTC")
        return (conform_for_read(piece, expected) for b in read_partition(partition)
                for piece in slice_batch(b, READ_BATCH_ROWS))


# --- the data source --------------------------------------------------------------


class CaslakeDataSource(DataSource):
    """``format("caslake")``: transactional caslake tables as a Spark source and sink.

    Examples:
        >>> caslake.spark.register(spark)  # doctest: +SKIP
        >>> spark.read.format('caslake').load('/data/events').count()  # doctest: +SKIP
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _streamed(self, streaming: bool) -> StreamOptions | None:
        """The options of a stream or a change-feed read (None: a plain batch read)."""
        from caslake.spark.stream_source import READ_CHANGE_FEED, StreamOptions

        if not streaming and str(self.options.get(READ_CHANGE_FEED) or "").lower() != "true":
            return None
        return StreamOptions.parse(self.options, streaming)

    def schema(self) -> StructType:
        from caslake.spark.stream_source import stream_schema

        streamed = self._streamed(False)
        if streamed is not None:
            return stream_schema(streamed)
        opts = ReadOptions.parse(self.options)
        table = open_table(opts.uri, storage_options=opts.storage_options or None)
        scan = table.scan(columns=opts.columns, version=opts.version, as_of=opts.timestamp)
        return spark_schema_for(scan.schema)  # nested fields projected by the option

    def reader(self, schema: StructType) -> DataSourceReader:
        from caslake.spark.stream_source import CaslakeFeedReader

        streamed = self._streamed(False)
        if streamed is not None:
            return CaslakeFeedReader(streamed, schema)
        return CaslakeReader(ReadOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from caslake.spark.stream_source import CaslakeStreamReader

        # Options are checked here (the stream's schema() already parsed them once).
        return CaslakeStreamReader(cast("StreamOptions", self._streamed(True)), schema)

    def _sink_uri(self) -> str:
        uri = self.options.get("path")
        if not uri:
            raise InvalidArgument("caslake needs the table URI: .save(uri) or .start(uri)")
        for opt in ("version", "timestamp", "columns", "where", MIN_PARTITIONS):
            if self.options.get(opt):
                raise InvalidArgument(f"option {opt} only applies to reads")
        return str(uri)

    def writer(self, schema: StructType, overwrite: bool) -> CaslakeWriter:
        from caslake.spark.write import CaslakeWriter, txn_from_options

        uri = self._sink_uri()
        txn = txn_from_options(self.options)
        return CaslakeWriter(uri, storage_options_from(self.options), schema, overwrite, txn,
                             partition_overwrite_mode=self.options.get("partitionOverwriteMode"))

    def streamWriter(self, schema: StructType, overwrite: bool) -> CaslakeStreamWriter:
        from caslake.spark.stream import CaslakeStreamWriter, stream_app_id

        uri = self._sink_uri()
        app_id = stream_app_id(self.options)
        return CaslakeStreamWriter(uri, storage_options_from(self.options), schema, overwrite,
                                   app_id)
