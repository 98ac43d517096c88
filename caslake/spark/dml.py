"""Distributed delete and upsert: caslake's own planner and commit, Spark's executors.

    caslake.spark.delete(spark, uri, "user = 'u1' AND day < DATE '2024-01-01'")
    caslake.spark.upsert(spark, uri, cdc_df, key=["id"])

Both run exactly like ``Table.delete`` / ``Table.upsert``: a
:class:`~caslake.ops.transaction.Transaction` pins the latest version, plans,
writes one tombstone and makes **one** commit (with the core's rebase rules and
``read_version`` validation).  Only two steps move to Spark:

* **Which rows match.**  The driver runs the core planner's pruning
  (:func:`~caslake.ops.delete.condition_scan`: manifest statistics, footers,
  wholly deleted row groups) and splits the surviving files into groups, one
  Spark task each.  Each task calls the core's
  :func:`~caslake.ops.delete.matching_positions` on its files (live rows that
  match, minus rows already deleted) and returns one roaring bitmap per file.
  For an upsert with more distinct keys than ``broadcast_keys_limit``, tasks
  return the live rows' keys and positions instead, and a Spark semi-join with
  the batch's keys picks the matching ones.
* **Writing an upsert's rows.**  Tasks write the batch's data files the way the
  ``caslake`` data source's write tasks do (:class:`~caslake.spark.write.WriteTarget`).

If the table moves before the commit and a concurrent commit touched the
targeted files, the core re-plans, which runs the Spark job again.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
from pyroaring import BitMap
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from caslake.core import (
    POSITION,
    Condition,
    FileTask,
    FooterCache,
    KeyCondition,
    MetadataIO,
    Scan,
    Snapshot,
    SnapshotSubset,
    TombstoneCache,
    check_txn,
    external_uris,
    noop_result,
    route,
    txn_applied,
)
from caslake.errors import (
    CaslakeError,
    CommitConflict,
    InvalidArgument,
    SchemaMismatch,
    StoreError,
    UserInputError,
)
from caslake.expr import Expr
from caslake.format.keys import new_token
from caslake.ops.delete import DeletePlan, Planner, check_where, condition_scan, matching_positions
from caslake.ops.transaction import Transaction, upsert_keys
from caslake.ops.upsert import duplicate_key
from caslake.spark.messages import data_file_from_json
from caslake.spark.save import caslake_error_from_spark
from caslake.spark.types import conform_for_read, conform_for_write, spark_type_for
from caslake.spark.write import WriteTarget
from caslake.store import open_store
from caslake.store.options import StorageOptions
from caslake.table import CommitResult, open_table

# Upserts with at most this many distinct keys send the key set to every task
# (a broadcast); larger key sets are matched by a Spark semi-join.
BROADCAST_KEYS_LIMIT = 1_000_000
PATH = "path"
POSITIONS = "positions"


# --- the units of work Spark tasks get (plain, picklable values) ------------------


@dataclass(frozen=True)
class MatchJob:
    """Where executors open the table's store (a clone's routed to its sources, as
    ``Table.open`` does: :mod:`caslake.core.routing`)."""

    uri: str
    storage_options: StorageOptions
    external: dict[str, str] = field(default_factory=dict)  # a clone's sources: routing


def group_tasks(tasks: Sequence[FileTask], snapshot: Snapshot, groups: int
                ) -> list[SnapshotSubset]:
    """Split planned file tasks into at most ``groups`` groups of similar bytes: one
    Spark task each, as the subset of ``snapshot`` holding the group's files, their
    tombstones and their surviving row groups."""
    bins: list[list[FileTask]] = [[] for _ in range(max(1, min(groups, len(tasks))))]
    sizes = [0] * len(bins)
    for task in sorted(tasks, key=lambda t: -t.bytes_to_read):
        i = sizes.index(min(sizes))
        bins[i].append(task)
        sizes[i] += max(1, task.bytes_to_read)
    return [SnapshotSubset.of(snapshot, [t.file for t in members],
                              {t.file.path: t.row_groups for t in members})
            for members in bins]


def group_scan(job: MatchJob, group: SnapshotSubset, cond: Condition) -> Scan:
    """On an executor: the core's condition scan over the group's subset of the
    pinned version (the row groups the driver planned)."""
    options = job.storage_options or None
    store = route(open_store(job.uri, options), job.external, options)
    return condition_scan(MetadataIO(store), FooterCache(), TombstoneCache(), group, cond)


_POSITIONS_SCHEMA = StructType([StructField(PATH, StringType()),
                                StructField(POSITIONS, BinaryType())])


def _positions_task(job: MatchJob, groups: Any, cond: Any,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A Spark task: for each group index it is given, the core's matching positions
    of each file, as a serialized roaring bitmap."""
    condition: Condition = cond.value
    for batch in batches:
        for i in batch.column(0).to_pylist():
            scan = group_scan(job, groups.value[i], condition)
            found = matching_positions(scan, condition)
            if found:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(list(found), pa.string()),
                     pa.array([bm.serialize() for _, bm in found.values()], pa.binary())],
                    names=[PATH, POSITIONS])


def _live_keys_task(job: MatchJob, groups: Any, cond: Any, expected: pa.Schema,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A Spark task for the semi-join: every live row of the group's candidate row
    groups (within the keys' bounds), as its file, position and key columns."""
    condition: Condition = cond.value
    for batch in batches:
        for i in batch.column(0).to_pylist():
            scan = group_scan(job, groups.value[i], condition)
            for task, rows in scan.matching_rows():
                if not rows.num_rows:
                    continue
                rows = rows.append_column(PATH, pa.array([task.file.path] * rows.num_rows,
                                                         pa.string()))
                for b in rows.to_batches():
                    yield conform_for_read(b, expected)


def _bitmap_of_file(table: pa.Table) -> pa.Table:
    bm = BitMap(table.column(POSITION).to_numpy().astype("uint32"))
    return pa.table({PATH: [table.column(PATH)[0].as_py()], POSITIONS: [bm.serialize()]},
                    schema=to_arrow_schema(_POSITIONS_SCHEMA))


def run_match_job(spark: SparkSession, job: MatchJob, groups: list[SnapshotSubset],
                  cond: Condition, key_frame: DataFrame | None = None
                  ) -> dict[str, BitMap]:
    """Run one Spark task per group; return the matching positions per file.

    Without ``key_frame`` each task computes them with the core's
    ``matching_positions``.  With it (an upsert's keys, already in the table's
    Spark types), tasks return the live rows' keys and positions and a
    semi-join with ``key_frame`` keeps the matching ones."""
    sc = spark.sparkContext
    groups_bc = sc.broadcast(groups)
    cond_bc = sc.broadcast(cond)
    try:
        tasks = spark.range(0, len(groups), 1, len(groups))
        if key_frame is None:
            out = tasks.mapInArrow(functools.partial(_positions_task, job, groups_bc, cond_bc),
                                   _POSITIONS_SCHEMA)
        else:
            keys = key_frame.columns
            live_schema = StructType([*(StructField(k, key_frame.schema[k].dataType)
                                        for k in keys),
                                      StructField(POSITION, LongType()),
                                      StructField(PATH, StringType())])
            expected = to_arrow_schema(live_schema, timezone="UTC")
            live = tasks.mapInArrow(functools.partial(_live_keys_task, job, groups_bc, cond_bc,
                                                      expected), live_schema)
            out = (live.join(key_frame, on=keys, how="left_semi")
                   .select(PATH, POSITION).groupBy(PATH)
                   .applyInArrow(_bitmap_of_file, _POSITIONS_SCHEMA))
        result: dict[str, BitMap] = {}
        for row in out.collect():
            bm = BitMap.deserialize(bytes(row[POSITIONS]))
            result[row[PATH]] = result[row[PATH]] | bm if row[PATH] in result else bm
        return result
    finally:
        for bc in (groups_bc, cond_bc):
            with contextlib.suppress(Exception):
                bc.destroy()


def spark_planner(spark: SparkSession, uri: str, storage_options: StorageOptions | None,
                  key_frame: DataFrame | None = None) -> Planner:
    """A :data:`~caslake.ops.delete.Planner` that prunes on the driver with the core
    planner and finds the matching positions with Spark tasks."""

    def plan(io: MetadataIO, footers: FooterCache, tombstones: TombstoneCache,
             base: Snapshot, conditions: Sequence[Condition]) -> DeletePlan:
        out = DeletePlan(base)
        opts = cast(StorageOptions, dict(storage_options or {}))
        job = MatchJob(uri, opts, external_uris(base.manifest))
        for cond in conditions:
            tasks = condition_scan(io, footers, tombstones, base, cond).plan().tasks
            if not tasks:
                continue
            n = 2 * spark.sparkContext.defaultParallelism
            groups = group_tasks(tasks, base, n)
            by_path = {t.file.path: t for t in tasks}
            frame = key_frame if isinstance(cond, KeyCondition) else None
            for path, positions in run_match_job(spark, job, groups, cond, frame).items():
                out.add(by_path[path], positions)
        return out

    return plan


# --- delete -----------------------------------------------------------------------


def delete(spark: SparkSession, uri: str, where: str | Expr, *,
           storage_options: StorageOptions | None = None,
           read_version: int | None = None) -> CommitResult:
    """Delete the rows matching ``where`` (the SQL predicate or expression
    ``Table.delete`` takes), with Spark tasks computing the matching row positions.

    One tombstone and one commit, exactly as ``Table.delete``; a delete that
    matches nothing creates no version.  ``read_version``: see ``Table.delete``.

    Examples:
        >>> caslake.spark.delete(spark, '/data/events', "city = 'Lima'")  # doctest: +SKIP
    """
    where = check_where(where)
    table = open_table(uri, storage_options=storage_options)
    tx = Transaction(table.context, read_version=read_version,
                     planner=spark_planner(spark, uri, storage_options))
    tx.delete(where)
    tx.stage("delete", params={"engine": "spark"})
    return tx.commit()


# --- upsert -----------------------------------------------------------------------


def _written_files(target: WriteTarget, job_id: str, batches: Iterator[pa.RecordBatch]
                   ) -> Iterator[pa.RecordBatch]:
    """A Spark task: write the partition's rows as data files (the data source's
    write task), return their manifest entries as JSON."""
    message = target.write_task(target.open_store(), job_id, batches)
    yield pa.RecordBatch.from_arrays(
        [pa.array([json.dumps(f) for f in message.files], pa.string())], names=["file"])


def _key_table(batches: list[pa.RecordBatch], target: pa.Schema, keys: list[str]) -> pa.Table:
    """The distinct keys in the table's types.  Nullable fields whatever the table
    says (as conform_for_write gives them): the keys carry no NULL (they were
    dropped: a NULL key never matches), so a NOT NULL key column holds too."""
    conformed = [conform_for_write(b, target) for b in batches]
    schema = pa.schema([pa.field(k, target.field(k).type) for k in keys])
    table = pa.Table.from_batches(conformed, schema=schema) if conformed else schema.empty_table()
    return table.group_by(keys).aggregate([])


def upsert(spark: SparkSession, uri: str, df: DataFrame, key: Sequence[str] | str, *,
           storage_options: StorageOptions | None = None,
           broadcast_keys_limit: int = BROADCAST_KEYS_LIMIT,
           txn: tuple[str, int] | None = None) -> CommitResult:
    """:func:`upsert_once` with ``txn`` (a ``foreachBatch``'s ``(app id, batch id)``),
    else one upsert commit; see :func:`upsert_once`.

    Examples:
        >>> caslake.spark.upsert(spark, '/data/events', updates_df, key='id')  # doctest: +SKIP
    """
    if txn is not None:
        return upsert_once(spark, uri, df, key, txn, storage_options=storage_options,
                           broadcast_keys_limit=broadcast_keys_limit)
    return _upsert(spark, uri, df, key, storage_options, broadcast_keys_limit)


def upsert_once(spark: SparkSession, uri: str, df: DataFrame, key: Sequence[str] | str,
                txn: tuple[str, int], *, storage_options: StorageOptions | None = None,
                broadcast_keys_limit: int = BROADCAST_KEYS_LIMIT) -> CommitResult:
    """An upsert applied once per ``txn`` = ``(app id, version)`` (a streaming
    ``foreachBatch``'s app id and batch id), in one commit that records the txn:
    a no-op when the table's ``txns`` already have that app id at this version or
    later (checked before any work, and again by the commit against its base)."""
    txn = check_txn(txn)
    table = open_table(uri, storage_options=storage_options)
    if txn_applied(table.snapshot.manifest.txns, txn):
        return noop_result(table.context, "upsert", table.snapshot,
                           started=table.context.meter())
    return _upsert(spark, uri, df, key, storage_options, broadcast_keys_limit, txn=txn)


def _upsert(spark: SparkSession, uri: str, df: DataFrame, key: Sequence[str] | str,
            storage_options: StorageOptions | None, broadcast_keys_limit: int,
            txn: tuple[str, int] | None = None) -> CommitResult:
    """Apply a CDC batch in one commit: delete the live rows whose ``key`` columns
    equal a key of ``df`` (NULL keys never match), and append ``df``'s rows.

    Equivalent to ``Table.upsert(df, key)``.  Spark tasks write ``df``'s data
    files and find the rows to delete; the driver commits once.  ``df`` is
    evaluated twice (its rows, then its keys): persist it first if it is costly
    or not deterministic.  Up to ``broadcast_keys_limit`` distinct keys are
    sent to every task; more are matched with a Spark semi-join.  A key that occurs
    twice in ``df`` is a ``DuplicateKey`` error before anything is written."""
    if broadcast_keys_limit < 0:
        raise InvalidArgument("broadcast_keys_limit must be >= 0")
    table = open_table(uri, storage_options=storage_options)
    target = table.schema
    keys = upsert_keys(key, df.columns, target.names)
    for f in target:
        if not f.nullable and f.name not in df.columns:
            raise SchemaMismatch(f"column {f.name!r} ({f.type}, not null) is missing from "
                                 "the data", column=f.name, expected=str(f.type))
    _refuse_duplicate_keys(df, keys)
    started = table.context.meter()  # before the tasks upload: gc's fence counts from here
    # Checks df's columns against the table before any task runs.
    writer = WriteTarget(uri, cast(StorageOptions, dict(storage_options or {})), df.schema)
    try:
        entries = df.mapInArrow(functools.partial(_written_files, writer, new_token()),
                                "file string").collect()
    except CaslakeError:
        raise
    except Exception as e:  # a caslake error in a task (a NULL in a NOT NULL column...)
        raised = caslake_error_from_spark(e)
        if raised is None:
            raise
        raise raised from None
    schema = table.table_schema
    files = [data_file_from_json(json.loads(r["file"]), schema) for r in entries]
    # Files are deleted on a failure only when no commit of them can have landed:
    # before the commit starts, when the first planning job fails (nothing was
    # written yet), or when the core says so (conflict, bad input).
    provable = True
    first_plan_failed = False
    plans = 0

    try:
        cond, key_frame = _key_condition(df, keys, target, broadcast_keys_limit)
        inner = spark_planner(spark, uri, storage_options, key_frame)

        def planner(io: MetadataIO, footers: FooterCache, tombstones: TombstoneCache,
                    base: Snapshot, conditions: Sequence[Condition]) -> DeletePlan:
            nonlocal plans, first_plan_failed
            plans += 1
            try:
                return inner(io, footers, tombstones, base, conditions)
            except BaseException:
                first_plan_failed = plans == 1
                raise

        tx = Transaction(table.context, planner=planner, started=started, txn=txn)
        tx.stage("upsert", files=files, conditions=[cond] if cond is not None else [],
                 params={"key": ",".join(keys), "engine": "spark"})
        provable = False
        result = tx.commit()
        if result.noop:  # a replayed txn: no version references the files
            for written in files:
                with contextlib.suppress(StoreError):
                    table.store.delete(written.path)
        return result
    except BaseException as e:
        if provable or first_plan_failed or isinstance(e, CommitConflict | UserInputError):
            for written in files:  # no manifest references them
                with contextlib.suppress(StoreError):
                    table.store.delete(written.path)
        raise


def _refuse_duplicate_keys(df: DataFrame, keys: list[str]) -> None:
    """DuplicateKey if a key occurs in ``df`` more than once (one Spark job, before
    anything is written): as ``Table.upsert``, the batch must say one thing per key."""
    n = "__caslake_rows"
    dup = (df.groupBy(*keys).agg(F.count(F.lit(1)).alias(n)).where(F.col(n) > 1)
           .limit(1).collect())
    if dup:
        row = dup[0].asDict()
        raise duplicate_key({k: row[k] for k in keys}, int(row[n]), None,
                            "deduplicate first (e.g. df.dropDuplicates(keys))")


def _key_condition(df: DataFrame, keys: list[str], target: pa.Schema, limit: int
                   ) -> tuple[KeyCondition | None, DataFrame | None]:
    """The upsert's key condition (the distinct keys, or for a semi-join only their
    bounds, for pruning) and, for a semi-join, the keys as a frame of table types."""
    cast = [F.col(k).cast(spark_type_for(target.field(k).type)).alias(k) for k in keys]
    frame = df.select(*cast).dropna()
    small = frame.distinct().limit(limit + 1).toArrow()
    if small.num_rows <= limit:
        key_table = _key_table(small.to_batches(), target, keys)
        return (KeyCondition(key_table) if key_table.num_rows else None), None
    aggs = [f(k).alias(f"{name}_{i}") for i, k in enumerate(keys)
            for name, f in (("lo", F.min), ("hi", F.max))]
    row = frame.agg(*aggs).toArrow()
    bounds = pa.table({k: pa.concat_arrays([row.column(f"lo_{i}").combine_chunks(),
                                            row.column(f"hi_{i}").combine_chunks()])
                       for i, k in enumerate(keys)})
    return KeyCondition(_key_table(bounds.to_batches(), target, keys)), frame


__all__ = ["BROADCAST_KEYS_LIMIT", "delete", "run_match_job", "spark_planner", "upsert"]
