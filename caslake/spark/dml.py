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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
    PredicateCondition,
    ReadSetUnchanged,
    Requirement,
    Scan,
    Snapshot,
    SnapshotSubset,
    TombstoneCache,
    check_txn,
    external_uris,
    key_scan_where,
    noop_result,
    route,
    txn_applied,
)
from caslake.errors import (
    CommitConflict,
    InvalidArgument,
    SchemaMismatch,
    StoreError,
    UserInputError,
)
from caslake.expr import Expr, Value, compile_where
from caslake.format.keys import new_token
from caslake.format.manifest import DataFile, parse_data_file
from caslake.format.partition import write_spec
from caslake.format.schema import TableSchema
from caslake.ops.delete import DeletePlan, Planner, check_where, condition_scan, matching_positions
from caslake.ops.merge import BY_SOURCE, NOT_MATCHED, Clause, MergeBuilder, merge_rows
from caslake.ops.transaction import Rewrite, Transaction, commit_rewrite, upsert_keys
from caslake.ops.update import FILE, TargetRows, assignments, update_terms, with_values
from caslake.ops.upsert import duplicate_key
from caslake.ops.write import WriteOptions, write_data_files
from caslake.spark.arrow_jobs import apply_in_arrow, map_in_arrow
from caslake.spark.messages import table_schema_from_json
from caslake.spark.save import caslake_errors
from caslake.spark.types import conform_for_read, conform_for_write, spark_type_for
from caslake.spark.write import WriteTarget, data_file, specs_from_json, written_files_task
from caslake.store import open_store
from caslake.store.options import StorageOptions
from caslake.table import CommitResult, open_table

# Upserts with at most this many distinct keys send the key set to every task
# (a broadcast); larger key sets are matched by a Spark semi-join.
BROADCAST_KEYS_LIMIT = 1_000_000
PATH = "path"
POSITIONS = "positions"
FILE_ENTRY = "file"


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
            out = map_in_arrow(tasks, functools.partial(_positions_task, job, groups_bc, cond_bc),
                               _POSITIONS_SCHEMA)
        else:
            keys = key_frame.columns
            live_schema = StructType([*(StructField(k, key_frame.schema[k].dataType)
                                        for k in keys),
                                      StructField(POSITION, LongType()),
                                      StructField(PATH, StringType())])
            expected = to_arrow_schema(live_schema, timezone="UTC")
            live = map_in_arrow(tasks, functools.partial(_live_keys_task, job, groups_bc, cond_bc,
                                                          expected), live_schema)
            out = apply_in_arrow(live.join(key_frame, on=keys, how="left_semi")
                                 .select(PATH, POSITION).groupBy(PATH),
                                 _bitmap_of_file, _POSITIONS_SCHEMA)
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
    with caslake_errors():  # a NULL in a NOT NULL column...
        entries = map_in_arrow(df, functools.partial(written_files_task, writer, new_token()),
                               "file string").collect()
    schema = table.table_schema
    files = [data_file(json.loads(r["file"]), schema, writer.partitioning) for r in entries]
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




# --- update and merge: Spark tasks compute and write the new rows -----------------------


_REWRITE_SCHEMA = StructType([StructField(PATH, StringType()),
                              StructField(POSITIONS, BinaryType()),
                              StructField(FILE_ENTRY, StringType())])


@dataclass(frozen=True)
class RewriteJob:
    """What an UPDATE's or MERGE's tasks need (plain, picklable): where to read
    (``match``), the table schema and partition specs the base had (their JSON), and
    for a merge its source columns (the DataFrame's order), keys and clauses."""

    match: MatchJob
    schema: dict[str, Any]
    partitioning: dict[str, Any] | None
    values: dict[str, Value] = field(default_factory=dict)
    where: str | Expr | None = None
    source_names: tuple[str, ...] = ()
    keys: tuple[tuple[str, str], ...] = ()
    clauses: tuple[Clause, ...] = ()

    def table_schema(self) -> TableSchema:
        return table_schema_from_json(self.schema)


def _rewrite_job(uri: str, storage_options: StorageOptions | None, base: Snapshot,
                 **kwargs: Any) -> RewriteJob:
    p = base.manifest.partitioning
    opts = cast(StorageOptions, dict(storage_options or {}))
    return RewriteJob(MatchJob(uri, opts, external_uris(base.manifest)),
                      base.manifest.schema.to_json(), None if p is None else p.to_json(),
                      **kwargs)


def _written(job: RewriteJob, hidden: dict[str, BitMap], rows: pa.Table
             ) -> Iterator[pa.RecordBatch]:
    """A task's result: ``rows`` written as data files with the base's partition spec
    (the table's own store), then one output row per file hidden and per file written."""
    schema = job.table_schema()
    files: list[DataFile] = []
    if rows.num_rows:
        spec = write_spec(specs_from_json(job.partitioning, schema))
        files = write_data_files(open_store(job.match.uri, job.match.storage_options or None),
                                 rows.to_reader(), schema, WriteOptions(), spec=spec)
    paths = [*hidden, *([None] * len(files))]
    blobs = [*(bm.serialize() for bm in hidden.values()), *([None] * len(files))]
    entries = [*([None] * len(hidden)), *(json.dumps(f.to_json()) for f in files)]
    if paths:
        yield pa.RecordBatch.from_arrays(
            [pa.array(paths, pa.string()), pa.array(blobs, pa.binary()),
             pa.array(entries, pa.string())], names=[PATH, POSITIONS, FILE_ENTRY])


def _update_task(job: RewriteJob, groups: Any, batches: Iterator[pa.RecordBatch]
                 ) -> Iterator[pa.RecordBatch]:
    """A Spark task of an UPDATE: for each group index, the group's live rows matching
    ``where`` get their new values (the core's type rule); returns their positions
    and the data files of the new rows."""
    arrow = job.table_schema().to_arrow()
    hidden: dict[str, BitMap] = {}
    new: list[pa.Table] = []
    for batch in batches:
        for i in batch.column(0).to_pylist():
            store = route(open_store(job.match.uri, job.match.storage_options or None),
                          job.match.external, job.match.storage_options or None)
            scan = Scan(MetadataIO(store), FooterCache(), groups.value[i], None, job.where,
                        TombstoneCache())
            for task, rows in scan.matching_rows():
                if not rows.num_rows:
                    continue
                old = rows.drop_columns([POSITION]).select(arrow.names)
                new.append(with_values(old, job.values, old, arrow))
                positions = BitMap(rows.column(POSITION).to_numpy().astype("uint32"))
                hidden[task.file.path] = hidden.get(task.file.path, BitMap()) | positions
    yield from _written(job, hidden, pa.concat_tables(new) if new else arrow.empty_table())


def _run_rewrite(frame: DataFrame, task: Any, base: Snapshot, by_path: dict[str, FileTask]
                 ) -> Rewrite:
    """Collect a rewrite job's output as the commit's :class:`Rewrite`: the positions
    hidden per file (the driver's planned tasks) and the files the tasks wrote."""
    with caslake_errors():  # a value that does not fit, DuplicateKey...
        out = map_in_arrow(frame, task, _REWRITE_SCHEMA).collect()
    plan = DeletePlan(base)
    files: list[DataFile] = []
    schema = base.manifest.schema
    for row in out:
        if row[PATH] is not None:
            plan.add(by_path[row[PATH]], BitMap.deserialize(bytes(row[POSITIONS])))
        else:
            files.append(parse_data_file(json.loads(row[FILE_ENTRY]), schema,
                                         source="spark rewrite task",
                                         partitioning=base.manifest.partitioning))
    return Rewrite(plan, schema.to_arrow().empty_table(), tuple(files))


def update(spark: SparkSession, uri: str, set: Mapping[str, object],
           where: str | Expr | None = None, *, storage_options: StorageOptions | None = None,
           read_version: int | None = None) -> CommitResult:
    """``UPDATE t SET ... WHERE ...`` as ``Table.update`` does it (one tombstone, the
    new rows appended, one commit, the same rebase rules and ``read_version``), with
    Spark tasks reading the matching rows, computing their new values and writing
    them (files split by the table's partition spec).  The driver prunes with the
    core planner and checks the values' types before any task runs.

    Examples:
        >>> caslake.spark.update(spark, '/data/orders', set={'status': "'closed'"},
        ...                      where='amount < 0')  # doctest: +SKIP
    """
    table = open_table(uri, storage_options=storage_options)
    ctx = table.context
    arrow = ctx.snapshot.manifest.schema.to_arrow()
    values = assignments(set, arrow.names, "update")
    if where is not None:
        where = check_where(where)
        compile_where(where, arrow)
    empty = arrow.empty_table()
    with_values(empty, values, empty, arrow)  # a value of the wrong type: SchemaMismatch now

    def plan(base: Snapshot) -> Rewrite:
        cond = PredicateCondition(where if where is not None else "TRUE")
        tasks = condition_scan(ctx.io, ctx.footers, ctx.tombstones, base, cond).plan().tasks
        if not tasks:
            return Rewrite(DeletePlan(base), base.manifest.schema.to_arrow().empty_table())
        groups = group_tasks(tasks, base, 2 * spark.sparkContext.defaultParallelism)
        job = _rewrite_job(uri, storage_options, base, values=values, where=where)
        groups_bc = spark.sparkContext.broadcast(groups)
        try:
            frame = spark.range(0, len(groups), 1, len(groups))
            return _run_rewrite(frame, functools.partial(_update_task, job, groups_bc), base,
                                {t.file.path: t for t in tasks})
        finally:
            with contextlib.suppress(Exception):
                groups_bc.destroy()

    params, requirements = update_terms(set, where, read_version)
    return commit_rewrite(ctx, "update", plan, params={**params, "engine": "spark"},
                          requirements=requirements)


_SROW, _TPATH, _TPOS = "__caslake_srow", "__caslake_tpath", "__caslake_tpos"
_ROW = "__caslake_row"


def _target_side(i: int) -> str:
    return f"__caslake_t{i}"


def _source_side(i: int) -> str:
    return f"__caslake_s{i}"


def _target_task(job: RewriteJob, groups: Any, expected: pa.Schema,
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A Spark task reading a MERGE's target: the live rows of each group it is given
    (within the source keys' bounds, ``job.where``), every column renamed
    :func:`_target_side`, with their file and position."""
    arrow = job.table_schema().to_arrow()
    options = job.match.storage_options or None
    for batch in batches:
        for i in batch.column(0).to_pylist():
            store = route(open_store(job.match.uri, options), job.match.external, options)
            scan = Scan(MetadataIO(store), FooterCache(), groups.value[i], None, job.where,
                        TombstoneCache())
            for task, rows in scan.matching_rows():
                if not rows.num_rows:
                    continue
                renamed = pa.Table.from_arrays(
                    [*(rows.column(n) for n in arrow.names),
                     pa.array([task.file.path] * rows.num_rows, pa.string()),
                     rows.column(POSITION).cast(pa.int64())],
                    names=[*(_target_side(k) for k in range(len(arrow))), _TPATH, _TPOS])
                for b in renamed.to_batches():
                    yield conform_for_read(b, expected)


class _Hidden:
    """A task's stand-in for a DeletePlan: the positions hidden per file path
    (``TargetRows.tasks`` hold the paths there)."""

    def __init__(self) -> None:
        self.per_path: dict[str, BitMap] = {}

    def add(self, path: str, positions: BitMap) -> None:
        self.per_path[path] = self.per_path.get(path, BitMap()) | positions


def _first_of_each(table: pa.Table, columns: list[str]) -> pa.Table:
    """``table``'s rows whose ``columns`` are not NULL, the first of each distinct value
    of them, in ``table``'s order."""
    present = table.filter(pc.is_valid(table.column(columns[-1])))
    numbered = present.append_column(_ROW, pa.array(np.arange(present.num_rows), pa.int64()))
    firsts = numbered.group_by(columns, use_threads=False).aggregate([(_ROW, "min")])
    return present.take(pa.array(np.sort(firsts.column(f"{_ROW}_min").to_numpy())))


def _merge_task(job: RewriteJob, batches: Iterator[pa.RecordBatch]
                ) -> Iterator[pa.RecordBatch]:
    """A Spark task of a MERGE: the joined rows of its share of target rows (every
    pair of a target row is in one task) and of unmatched source rows; the core's
    clause logic (:func:`caslake.ops.merge.merge_rows`) on them; the new rows written."""
    schema = job.table_schema()
    arrow = schema.to_arrow()
    received = list(batches)
    joined = pa.Table.from_batches(received) if received else None
    if joined is None or not joined.num_rows:
        return
    src = _first_of_each(joined, [_SROW])
    source = pa.Table.from_arrays([src.column(_source_side(k))
                                   for k in range(len(job.source_names))],
                                  names=list(job.source_names))
    tgt = _first_of_each(joined, [_TPATH, _TPOS]).sort_by([(_TPATH, "ascending"),
                                                           (_TPOS, "ascending")])
    spark_rows = pa.Table.from_arrays([tgt.column(_target_side(k)) for k in range(len(arrow))],
                                      names=arrow.names)
    conformed = [conform_for_write(b, arrow) for b in spark_rows.to_batches()]
    rows = pa.Table.from_batches(conformed) if conformed else arrow.empty_table()
    of_row = [str(p) for p in tgt.column(_TPATH).to_pylist()]  # never NULL: filtered
    paths = sorted(set(of_row))
    index = {p: k for k, p in enumerate(paths)}
    rows = rows.append_column(FILE, pa.array([index[p] for p in of_row], pa.int32()))
    rows = rows.append_column(POSITION, tgt.column(_TPOS).cast(pa.int64()))
    hidden = _Hidden()
    target = TargetRows(rows, cast(Any, tuple(paths)))
    new = merge_rows(source, list(job.keys), job.clauses, target, cast(Any, hidden), arrow)
    yield from _written(job, hidden.per_path, new)


class SparkMergeBuilder(MergeBuilder):
    """``caslake.spark.merge(spark, uri, df, on=[...])``: the clauses of
    ``Table.merge``, executed with Spark doing the work (see :meth:`execute`)."""

    def __init__(self, spark: SparkSession, uri: str, df: DataFrame, on: Sequence[str] | str,
                 storage_options: StorageOptions | None) -> None:
        table = open_table(uri, storage_options=storage_options)
        super().__init__(table.context, to_arrow_schema(df.schema, timezone="UTC").empty_table(),
                         on)
        self._spark, self._uri, self._df = spark, uri, df
        self._storage_options = storage_options

    def execute(self, *, read_version: int | None = None) -> CommitResult:
        """One commit, as ``Table.merge(...).execute()``.  Spark reads the target rows
        the source's keys may match (every live row with a ``not_matched_by_source``
        clause), joins them with ``df`` on the keys, and each task applies the clauses
        to its rows (all pairs of one target row land in one task, so a target row
        that two source rows match is a DuplicateKey error) and writes the new rows.
        ``df`` is evaluated twice per planning (its keys' bounds, then the join):
        persist it first if it is costly or not deterministic."""
        if not self._clauses:
            raise InvalidArgument("merge needs at least one when_... clause")
        clauses = tuple(self._clauses)
        keys = tuple(self._keys)
        ctx = self._ctx
        by_source = any(c.kind == BY_SOURCE for c in clauses)
        inserts = any(c.kind == NOT_MATCHED for c in clauses)
        source = self._df.withColumn(_SROW, F.monotonically_increasing_id())
        source = source.select(*(F.col(n).alias(_source_side(k))
                                 for k, n in enumerate(self._df.columns)), _SROW)

        def plan(base: Snapshot) -> Rewrite:
            arrow = base.manifest.schema.to_arrow()
            bounds = None if by_source else self._key_bounds(arrow)
            cond: Condition = PredicateCondition("TRUE") if bounds is None else bounds
            tasks = [] if not by_source and bounds is None else condition_scan(
                ctx.io, ctx.footers, ctx.tombstones, base, cond).plan().tasks
            where = None if bounds is None else key_scan_where(bounds.keys)
            job = _rewrite_job(self._uri, self._storage_options, base,
                               source_names=tuple(self._df.columns), keys=keys,
                               clauses=clauses, where=where)
            spark = self._spark
            spark_schema = StructType(
                [*(StructField(_target_side(k), spark_type_for(f.type, f.name))
                   for k, f in enumerate(arrow)),
                 StructField(_TPATH, StringType()), StructField(_TPOS, LongType())])
            groups = group_tasks(tasks, base, 2 * spark.sparkContext.defaultParallelism)
            groups_bc = spark.sparkContext.broadcast(groups)
            try:
                target = map_in_arrow(
                    spark.range(0, len(groups), 1, max(1, len(groups))),
                    functools.partial(_target_task, job, groups_bc,
                                      to_arrow_schema(spark_schema, timezone="UTC")),
                    spark_schema)
                how = {(True, True): "full", (True, False): "right", (False, True): "left",
                       (False, False): "inner"}[(by_source, inserts)]
                on = [F.col(_source_side(self._df.columns.index(sk)))
                      .cast(spark_type_for(arrow.field(tk).type, tk)) == F.col(_target_side(
                          arrow.names.index(tk))) for tk, sk in keys]
                joined = source.join(target, on=on, how=how).repartition(
                    2 * spark.sparkContext.defaultParallelism,
                    F.coalesce(F.col(_TPATH), F.col(_SROW).cast("string")), F.col(_TPOS))
                return _run_rewrite(joined, functools.partial(_merge_task, job), base,
                                    {t.file.path: t for t in tasks})
            finally:
                with contextlib.suppress(Exception):
                    groups_bc.destroy()

        params = {"key": ",".join(k for k, _ in keys), "engine": "spark",
                  "clauses": "; ".join(c.text for c in clauses)}
        requirements: tuple[Requirement, ...] = ()
        if read_version is not None:
            requirements = (ReadSetUnchanged(read_version, (PredicateCondition("TRUE"),),
                                             "merge"),)
        return commit_rewrite(ctx, "merge_into", plan, params=params, requirements=requirements)

    def _key_bounds(self, arrow: pa.Schema) -> KeyCondition | None:
        """The source keys' bounds in the table's types (one Spark job), for pruning
        the target; None when the source has no non-NULL key."""
        frame = self._df.select(*(F.col(sk).cast(spark_type_for(arrow.field(tk).type, tk))
                                  .alias(tk) for tk, sk in self._keys)).dropna()
        aggs = [f(tk).alias(f"{name}_{i}") for i, (tk, _) in enumerate(self._keys)
                for name, f in (("lo", F.min), ("hi", F.max))]
        row = frame.agg(*aggs).toArrow()
        if row.num_rows == 0 or row.column("lo_0").null_count:
            return None
        bounds = pa.table({tk: pa.concat_arrays([row.column(f"lo_{i}").combine_chunks(),
                                                 row.column(f"hi_{i}").combine_chunks()])
                           for i, (tk, _) in enumerate(self._keys)})
        return KeyCondition(_key_table(bounds.to_batches(), arrow, [k for k, _ in self._keys]))


def merge(spark: SparkSession, uri: str, df: DataFrame, on: Sequence[str] | str, *,
          storage_options: StorageOptions | None = None) -> SparkMergeBuilder:
    """``Table.merge(df, on=...)`` with Spark doing the work: add the same
    ``when_...`` clauses, then ``.execute()`` (one commit).

    Examples:
        >>> (caslake.spark.merge(spark, '/data/orders', updates_df, on=['id'])
        ...  .when_matched_update_all().when_not_matched_insert_all()
        ...  .execute())  # doctest: +SKIP
    """
    return SparkMergeBuilder(spark, uri, df, on, storage_options)


__all__ = ["BROADCAST_KEYS_LIMIT", "SparkMergeBuilder", "delete", "merge", "run_match_job",
           "spark_planner", "update", "upsert"]
