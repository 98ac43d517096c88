"""RFC-0008 datasets from PySpark: tasks write or read parts, the driver commits or resolves.

    caslake.spark.write_dataset(df, "s3://bucket/lake", "silver/orders", overwrite=True)
    caslake.spark.read_dataset(spark, "s3://bucket/lake", "silver/orders", columns=["id"])

``write_dataset`` is one atomic commit per job: the driver notes the manifest it
replaces (:meth:`ParquetDatasetStore.begin_write`), each task writes its rows
as parts under ``{key}/_gen-<hex>/task-<partition>-<attempt>/`` (so retried
or speculative attempts never collide) and returns their names and row
counts, and the driver commits the parts of the successful attempts with one
conditional write of ``manifest.json``.  A failed job or a lost race removes
its generation; nothing of it is ever visible.

``read_dataset`` resolves and verifies one generation on the driver (every
part exists, row counts and schema hash agree), then reads its parts in tasks,
pinned to the ETags the driver saw, pruning row groups by ``filter``.

The store must be reachable from the executors (a local path on a shared
filesystem, ``s3://``, ``az://`` or ``gs://``: an object store is passed to them as
its URI and :meth:`~caslake.store.s3.ObstoreStore.reopen_options`);
``memory://`` stores live in one process only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from caslake.dataset.manifest import schema_hash
from caslake.dataset.read import ResolvedPart, open_part, part_batches, prune_row_groups
from caslake.dataset.store import ParquetDatasetStore
from caslake.dataset.write import PartLayout, batch_stream, write_parts
from caslake.errors import InvalidArgument, SchemaMismatch, StoreError
from caslake.expr import compile_where
from caslake.spark.arrow_jobs import map_in_arrow
from caslake.store import LocalStore, MemoryStore, ObjectStore, open_store
from caslake.store.options import StorageOptions
from caslake.store.s3 import ObstoreStore

_TASK_SCHEMA = "part string, rows long, schema_hash string"


def _location(uri_or_store: str | ObjectStore,
              storage_options: StorageOptions | None) -> tuple[str, StorageOptions]:
    """A (uri, storage options) pair that executors can open the store from."""
    opts: dict[str, object] = dict(storage_options or {})
    if isinstance(uri_or_store, str):
        uri = uri_or_store
    elif isinstance(uri_or_store, MemoryStore):
        uri = uri_or_store.uri
    elif isinstance(uri_or_store, LocalStore):
        uri = str(uri_or_store.root)
    elif isinstance(uri_or_store, ObstoreStore):  # s3://, az://, gs://
        uri = uri_or_store.uri
        opts = {**uri_or_store.reopen_options(), **opts}
    else:
        raise InvalidArgument(f"cannot hand a {type(uri_or_store).__name__} to Spark "
                              "executors: pass a URI and storage_options")
    if uri.startswith("memory:"):
        raise InvalidArgument(f"{uri!r}: a memory:// store lives in one process; Spark "
                              "executors cannot reach it")
    return uri, cast(StorageOptions, opts)


def write_dataset(df: DataFrame, uri_or_store: str | ObjectStore, dataset_key: str, *,
                  overwrite: bool = False, storage_options: StorageOptions | None = None,
                  compression: str = "zstd", row_group_size: int | None = None,
                  max_rows_per_file: int | None = None, run_id: str | None = None,
                  metadata: dict[str, str] | None = None) -> Any:
    """Write ``df`` as one dataset with exactly one commit; return its DatasetManifest.
    Raises DatasetAlreadyExists (before any task runs) or DatasetConflict like
    :meth:`ParquetDatasetStore.write_dataset`.

    Examples:
        >>> caslake.spark.write_dataset(df, '/data/lake', 'events')  # doctest: +SKIP
    """
    uri, opts = _location(uri_or_store, storage_options)
    pds = ParquetDatasetStore(open_store(uri, opts or None), compression=compression,
                              row_group_size=row_group_size,
                              max_rows_per_file=max_rows_per_file)
    intent = pds.begin_write(dataset_key, overwrite=overwrite)
    layout = PartLayout(pds.compression, pds.row_group_size, pds.max_rows_per_file,
                        pds.max_bytes_per_file)
    key, generation = intent.dataset_key, intent.generation

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next(batches, None)
        if first is None:
            return  # an empty partition writes nothing
        ctx = TaskContext.get()
        where = (f"{generation}/task-{ctx.partitionId():05d}-{ctx.attemptNumber()}"
                 if ctx is not None else f"{generation}/task-driver")
        store = open_store(uri, opts or None)
        schema, stream = batch_stream(_chain(first, batches))
        uploaded: list[str] = []
        try:
            parts = write_parts(store, key, where, schema, stream, layout, uploaded)
        except BaseException:
            for k in uploaded:
                with contextlib.suppress(StoreError):
                    store.delete(k)
            raise
        digest = schema_hash(schema)
        yield pa.record_batch({"part": [p.name for p in parts],
                               "rows": pa.array([p.rows for p in parts], pa.int64()),
                               "schema_hash": [digest] * len(parts)})

    gen_prefix = f"{key}/{generation}/"
    try:
        rows = map_in_arrow(df, task, _TASK_SCHEMA).collect()
        digests = {r["schema_hash"] for r in rows}
        if len(digests) > 1:
            raise SchemaMismatch(f"the tasks of one write produced {len(digests)} different "
                                 "schemas")
        parts = sorted((r["part"], int(r["rows"])) for r in rows)
        if not parts:  # no rows at all: one empty part with the DataFrame's schema
            schema = to_arrow_schema(df.schema, timezone="UTC")
            uploaded: list[str] = []
            written = write_parts(pds.store, key, generation, schema,
                                  iter(()), layout, uploaded)
            parts = [(p.name, p.rows) for p in written]
            digests = {schema_hash(schema)}
        return pds.commit_write(intent, parts, digests.pop(), run_id=run_id,
                                metadata=metadata,
                                uploaded=[f"{key}/{name}" for name, _ in parts])
    except BaseException:
        # Unless the manifest now names this generation, nothing references it.
        with contextlib.suppress(Exception):
            current = pds.read_manifest(key)
            if not any(p.startswith(generation + "/") for p in current.parts):
                for m in list(pds.store.list(gen_prefix)):
                    pds.store.delete(m.key)
        raise


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def read_dataset(spark: SparkSession, uri_or_store: str | ObjectStore, dataset_key: str, *,
                 columns: Sequence[str] | None = None, filter: str | None = None,
                 storage_options: StorageOptions | None = None,
                 verify: bool = True) -> DataFrame:
    """The dataset as a DataFrame, one Spark partition per part.  ``filter`` (SQL text)
    prunes row groups in the tasks and keeps exactly the matching rows.

    Examples:
        >>> df = caslake.spark.read_dataset(spark, '/data/lake', 'events')  # doctest: +SKIP
    """
    uri, opts = _location(uri_or_store, storage_options)
    pds = ParquetDatasetStore(open_store(uri, opts or None))
    plan, _bound = pds.plan_read(dataset_key, columns, filter=filter, verify=verify)
    key = plan.dataset_key
    out_schema = plan.schema
    names = list(plan.columns)
    units = [(part.name, part.etag or "", part.size if part.size is not None else -1)
             for part, _, _ in plan.units]
    if not units:
        return spark.createDataFrame([], from_arrow_schema(out_schema))

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = open_store(uri, opts or None)
        for batch in batches:
            for row in batch.to_pylist():
                name, etag, size = str(row["part"]), row["etag"], int(row["size"])
                part = ResolvedPart(name, f"{key}/{name}", size if size >= 0 else None,
                                    etag or None)
                yield from _read_part(store, key, part, names, filter)

    parts_df = spark.createDataFrame(units, "part string, etag string, size long")
    return map_in_arrow(parts_df.repartition(len(units)), task, from_arrow_schema(out_schema))


def _read_part(store: ObjectStore, key: str, part: ResolvedPart, names: list[str],
               where: str | None) -> Iterator[pa.RecordBatch]:
    pf = open_part(store, key, part, whole=False)
    bound = compile_where(where, pf.schema_arrow)
    yield from part_batches(key, part, pf, prune_row_groups(pf, bound), names, bound)
